"""The runtime emits the span tree and attributes of DESIGN §6 (pinned here)."""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from agentwarm import PrefetchPolicy
from agentwarm import telemetry as tm
from agentwarm.runtime import PrefetchKind, PrefetchOutcome

from .conftest import make_branching


async def test_run_emits_workflow_step_llm_and_prefill_spans(engine):
    wf = make_branching(think_s=0.01)
    for seed in range(5):
        await wf.run("warm up", engine=engine, state={"seed": seed})
    with tm.capture_spans() as exporter:
        result = await wf.run("traced", engine=engine, state={"seed": 0}, policy=PrefetchPolicy())
    spans = exporter.get_finished_spans()
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)

    (root,) = by_name["invoke_workflow branching"]
    assert root.attributes[tm.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert root.attributes[tm.AW_RUN_ID] == result.run_id

    steps = [s for s in spans if s.name.startswith("invoke_agent ")]
    assert [s.name for s in sorted(steps, key=lambda s: s.start_time)] == [
        f"invoke_agent {n}" for n in result.path
    ]
    for s in steps:
        assert s.parent is not None and s.parent.span_id == root.context.span_id
        assert s.attributes[tm.GEN_AI_AGENT_NAME] == s.attributes[tm.AW_STEP_NODE]
        for key in (tm.AW_STEP_INDEX, tm.AW_STEP_FROM, tm.AW_STEP_PREFETCHED, tm.AW_STEP_TTFT):
            assert key in s.attributes
    first = min(steps, key=lambda s: s.start_time)
    assert first.attributes[tm.AW_STEP_FROM] == "__start__"

    llm = [s for s in spans if s.name == "text_completion fake"]
    assert len(llm) == len(result.path)
    for s in llm:
        assert s.kind is SpanKind.INTERNAL
        assert s.attributes[tm.GEN_AI_OPERATION_NAME] == "text_completion"
        for key in (
            tm.GEN_AI_USAGE_INPUT_TOKENS,
            tm.GEN_AI_USAGE_OUTPUT_TOKENS,
            tm.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
            tm.GEN_AI_REQUEST_MODEL,
        ):
            assert key in s.attributes
        assert not any(k.startswith("gen_ai.input") for k in s.attributes)  # no content

    prefills = by_name["agentwarm.prefill"]
    spec = [s for s in prefills if s.attributes[tm.AW_PREFILL_KIND] == PrefetchKind.SPECULATIVE]
    assert len(spec) == len(result.speculative_prefetches) > 0
    for s in prefills:
        assert s.attributes[tm.AW_PREFILL_OUTCOME] in set(PrefetchOutcome)
        assert not any(k.startswith("gen_ai.") for k in s.attributes if k.startswith("agentwarm"))
        for key in (tm.AW_PREFILL_TARGET, tm.AW_PREFILL_TOKENS, tm.AW_PREFILL_SOURCE):
            assert key in s.attributes
    for s in spec:
        assert tm.AW_PREFILL_PROBABILITY in s.attributes and tm.AW_PREFILL_RANK in s.attributes
    hit_targets = {
        s.attributes[tm.AW_PREFILL_TARGET]
        for s in spec
        if s.attributes[tm.AW_PREFILL_OUTCOME] == "hit"
    }
    assert hit_targets <= set(result.path)
