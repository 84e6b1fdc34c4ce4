"""The gateway's spans (:mod:`agentwarm.gateway.tracing`) read back by the real CLI: three
sessions of the learner's records written through the real JSONL exporter, then
``agentwarm stats --trace F --json`` and ``agentwarm graph --trace F``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from typer.testing import CliRunner

from agentwarm import telemetry as tm
from agentwarm._spec import END, START, PrefetchOutcome
from agentwarm.cli import app
from agentwarm.gateway.learner import Prefetch, Step
from agentwarm.gateway.tracing import GatewayTracer
from agentwarm.stats.definitions import SUMMARY_KEYS, summarize_steps

runner = CliRunner()

HIT, WASTED = PrefetchOutcome.HIT, PrefetchOutcome.WASTED
CANCELLED, FAILED, DROPPED = (
    PrefetchOutcome.CANCELLED,
    PrefetchOutcome.FAILED,
    PrefetchOutcome.DROPPED,
)


def _pf(node: str, tokens: int, outcome: str, computed: int) -> Prefetch:
    pf = Prefetch(node=node, rid=f"rid-{node}-{tokens}", worker="http://w", tokens=tokens)
    pf.outcome, pf.computed_tokens = outcome, computed
    return pf


@dataclass
class Traffic:
    """What the learner saw, in the order it would call the tracer: ``("step", session, Step)``
    when a reply completes, ``("prefetch", session, Prefetch, source)`` when one is settled."""

    events: list[tuple[object, ...]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    prefetches: list[Prefetch] = field(default_factory=list)

    def step(self, session: str, step: Step) -> None:
        self.events.append(("step", session, step))
        self.steps.append(step)

    def prefetch(self, session: str, pf: Prefetch, source: str) -> None:
        self.events.append(("prefetch", session, pf, source))
        self.prefetches.append(pf)

    def write(self, tracer: GatewayTracer) -> None:
        for event in self.events:
            if event[0] == "step":
                _, session, step = event
                assert isinstance(session, str) and isinstance(step, Step)
                tracer.step(session, step, duration_s=0.5)
            else:
                _, session, pf, source = event
                assert isinstance(session, str) and isinstance(pf, Prefetch)
                assert isinstance(source, str)
                tracer.prefetch(session, pf, source=source)


def traffic() -> Traffic:
    """Sessions a (3 steps), b (3 steps), c (1 step): hits, misses, an error reply, and
    prefetches hit, wasted, cancelled, dropped and failed."""
    t = Traffic()
    t.step("a", Step("sup", START, ttft_s=0.30, prompt_tokens=100))
    t.prefetch("a", _pf("baggage", 80, HIT, 80), "sup")  # settled by a's next request
    t.prefetch("a", _pf("refunds", 70, WASTED, 70), "sup")
    # Admission refused it while a's second reply streamed: settled before that step is traced.
    t.prefetch("a", _pf("sup", 150, DROPPED, 0), "baggage")
    t.step("a", Step("baggage", "sup", True, 0.05, 150, 128, prefetched_tokens=80))
    t.step("b", Step("sup", START, ttft_s=0.28, prompt_tokens=100, cached_tokens=100))
    t.prefetch("a", _pf("refunds", 160, CANCELLED, 40), "baggage")
    t.step("a", Step("sup", "baggage", False, 0.25, 200, 150))
    t.prefetch("b", _pf("refunds", 90, HIT, 10), "sup")
    t.step("b", Step("refunds", "sup", True, 0.04, 120, 96, prefetched_tokens=90))
    t.prefetch("b", _pf("sup", 130, FAILED, 0), "refunds")
    t.step("b", Step("sup", "refunds"))  # the upstream failed it: no TTFT, no usage
    t.step("c", Step("baggage", START, ttft_s=0.20, prompt_tokens=90))
    return t


@pytest.fixture
def written(tmp_path: Path) -> Iterator[tuple[Path, Traffic, tm.Telemetry]]:
    """The traffic written to ``trace.jsonl`` by the exporter ``agentwarm gateway --trace``
    configures; sessions a and b were dropped, c is still open (the gateway runs)."""
    path = tmp_path / "trace.jsonl"
    t = traffic()
    telemetry = tm.configure(trace_file=path)
    try:
        tracer = GatewayTracer()
        t.write(tracer)
        tracer.session_end("a")
        tracer.session_end("b")
        assert tracer.open_runs == 1
        yield path, t, telemetry
        tracer.close()
    finally:
        telemetry.shutdown()


def _stats(path: Path) -> dict[str, object]:
    result = runner.invoke(app, ["stats", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out: dict[str, object] = json.loads(result.stdout)
    return out


def test_stats_of_a_gateway_trace_are_the_learners(
    written: tuple[Path, Traffic, tm.Telemetry],
) -> None:
    path, t, telemetry = written
    telemetry.force_flush()  # session c's run span is not written yet: its steps count anyway
    out = _stats(path)
    expected = summarize_steps(t.steps, t.prefetches, workflow="gateway", runs=3).to_dict()
    assert {k: out[k] for k in SUMMARY_KEYS} == expected
    # The same figures, by hand.
    assert (out["runs"], out["steps"], out["branch_steps"], out["branch_hits"]) == (3, 7, 4, 2)
    assert (out["branch_hit_rate"], out["acceptance_ratio"]) == (0.5, 0.4)
    assert (out["prefetches_issued"], out["prefetches_dropped"], out["prefetch_hits"]) == (5, 1, 2)
    assert (out["wasted_tokens"], out["prompt_tokens"], out["cached_tokens"]) == (110, 760, 474)
    assert out["ttft_p50_s"] == pytest.approx(0.225)
    assert out["ttft_p95_s"] == pytest.approx(0.295)
    assert out["ttft_saved_s"] == pytest.approx(0.15)  # baggage: 0.20 not prefetched, 0.05 hit
    edges = {(e["from"], e["to"]): e for e in out["edges"]}  # type: ignore[attr-defined]
    assert {k: (e["taken"], e["prefetched"], e["hits"]) for k, e in edges.items()} == {
        (START, "sup"): (2, 0, 0),
        (START, "baggage"): (1, 0, 0),
        ("sup", "baggage"): (1, 1, 1),
        ("sup", "refunds"): (1, 2, 1),
        ("baggage", "sup"): (1, 1, 0),
        ("baggage", "refunds"): (0, 1, 0),
        ("refunds", "sup"): (1, 1, 0),
        ("sup", END): (2, 0, 0),  # sessions a and b ended there; c is still open
    }


def test_runs_are_written_when_sessions_end(written: tuple[Path, Traffic, tm.Telemetry]) -> None:
    path, t, telemetry = written
    telemetry.force_flush()
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    runs = {s["spanId"]: s for s in spans if s["name"] == "invoke_workflow gateway"}
    assert sorted(s["attributes"][tm.AW_RUN_ID].split(".")[0] for s in runs.values()) == [
        "a",
        "b",
    ]  # c is open
    for run in runs.values():  # ended by the learner: completed, at the run's last step
        assert (run["attributes"][tm.AW_RUN_COMPLETED], run["attributes"][tm.AW_RUN_END_STEPS]) == (
            True,
            [],
        )
    steps = [s for s in spans if s["name"].startswith("invoke_agent ")]
    by_id = {s["spanId"]: s for s in spans}
    for s in steps:
        run_id = s["attributes"][tm.AW_RUN_ID]
        if run_id.startswith("c."):
            assert s["parentSpanId"] not in by_id
            continue
        parent = runs[s["parentSpanId"]]
        assert parent["attributes"][tm.AW_RUN_ID] == run_id
        assert parent["traceId"] == s["traceId"]
        assert s["endTimeUnixNano"] - s["startTimeUnixNano"] == 500_000_000
    index = {
        (s["attributes"][tm.AW_RUN_ID][0], s["attributes"][tm.AW_STEP_INDEX]): (
            s["attributes"][tm.AW_STEP_NODE],
            s["attributes"][tm.AW_STEP_OUTCOME],
        )
        for s in steps
    }
    assert index == {
        ("a", 0): ("sup", "none"),
        ("a", 1): ("baggage", "hit"),
        ("a", 2): ("sup", "miss"),
        ("b", 0): ("sup", "none"),
        ("b", 1): ("refunds", "hit"),
        ("b", 2): ("sup", "miss"),
        ("c", 0): ("baggage", "none"),
    }
    # A prefill is the child of the step it followed when that was the session's last traced
    # step, else of the run (the dropped one, settled before its step's reply completed).
    prefills = [s for s in spans if s["name"] == tm.SPAN_PREFILL]
    parents = sorted(
        (p["attributes"][tm.AW_PREFILL_OUTCOME], by_id[p["parentSpanId"]]["name"]) for p in prefills
    )
    assert parents == [
        ("cancelled", "invoke_agent baggage"),
        ("dropped", "invoke_workflow gateway"),
        ("failed", "invoke_agent refunds"),
        ("hit", "invoke_agent sup"),
        ("hit", "invoke_agent sup"),
        ("wasted", "invoke_agent sup"),
    ]
    assert len(t.prefetches) == len(prefills)


def test_graph_draws_the_observed_transitions(
    written: tuple[Path, Traffic, tm.Telemetry], tmp_path: Path
) -> None:
    path, _, telemetry = written
    telemetry.force_flush()
    # No workflow file: the gateway's heads are declared nowhere. The graph is the trace's
    # transitions, P(next | node) their observed shares, captions P · hits/taken.
    out = tmp_path / "graph.mmd"
    result = runner.invoke(app, ["graph", "--trace", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"wrote {out}\n"
    assert out.read_text() == (
        "---\n"
        "title: gateway\n"
        "---\n"
        "flowchart TD\n"
        "  %% width: observed P(next | node) · colour: branch hit rate over 3 runs (grey: no data)"
        " · label: P · hits/taken\n"
        '  start((" "))\n'
        '  sup["sup<br/>4 visits"]\n'  # 2 sessions started there, 2 steps came back to it
        '  baggage["baggage<br/>2 visits"]\n'
        '  refunds["refunds<br/>1 visit"]\n'
        '  stop(["END"])\n'
        "  start --> sup\n"
        "  start --> baggage\n"  # session c started there
        '  sup -->|"0.50 · 0/2"| stop\n'  # sessions a and b ended after sup (c is still open)
        '  sup -->|"0.25 · 1/1"| baggage\n'
        '  sup -->|"0.25 · 1/1"| refunds\n'
        '  baggage -->|"1.00 · 0/1"| sup\n'  # baggage → refunds was only prefetched: no edge
        '  refunds -->|"1.00 · 0/1"| sup\n'
        "  linkStyle 0 stroke:#94a3b8,stroke-width:2.00px\n"
        "  linkStyle 1 stroke:#94a3b8,stroke-width:2.00px\n"
        "  linkStyle 2 stroke:#94a3b8,stroke-width:4.50px\n"  # END: not a branch, no hit rate
        "  linkStyle 3 stroke:#16a34a,stroke-width:2.75px\n"
        "  linkStyle 4 stroke:#16a34a,stroke-width:2.75px\n"
        "  linkStyle 5 stroke:#dc2626,stroke-width:8.00px\n"
        "  linkStyle 6 stroke:#dc2626,stroke-width:8.00px\n"
        "  classDef entryNode stroke:#16a34a,stroke-width:2.5px\n"
        "  classDef startNode fill:#334155,stroke:#334155\n"
        "  classDef endNode fill:#1e293b,stroke:#1e293b,color:#ffffff\n"
        "  class sup entryNode\n"  # where most sessions started
        "  class start startNode\n"
        "  class stop endNode\n"
    )


def test_a_session_id_back_after_its_session_ended_is_a_new_run() -> None:
    tracer = GatewayTracer("support")
    with tm.capture_spans() as spans:
        tracer.step("s", Step("sup", START, ttft_s=0.1))
        first = tracer.run_id("s")
        tracer.session_end("s")
        tracer.session_end("s")  # already ended: nothing
        # Its abort ended after the session ended: the prefill joins the ended run.
        tracer.prefetch("s", _pf("baggage", 64, CANCELLED, 16), source="sup")
        # So does a reply that completed late; a step from __start__ is a new run.
        tracer.step("s", Step("refunds", "sup", ttft_s=0.3))
        assert tracer.open_runs == 0
        tracer.step("s", Step("sup", START, ttft_s=0.1))
        second = tracer.run_id("s")
        tracer.close()
    assert first is not None and second is not None and first != second
    assert first.startswith("s.") and second.startswith("s.")
    assert tracer.open_runs == 0
    finished = spans.get_finished_spans()
    names = [(s.name, (s.attributes or {})[tm.AW_RUN_ID]) for s in finished]
    assert names == [
        ("invoke_agent sup", first),
        ("invoke_workflow support", first),
        ("agentwarm.prefill", first),
        ("invoke_agent refunds", first),
        ("invoke_agent sup", second),
        ("invoke_workflow support", second),
    ]
    step, run, prefill = finished[:3]
    step_ctx, run_ctx = step.get_span_context(), run.get_span_context()
    assert prefill.parent is not None and step.parent is not None and step_ctx and run_ctx
    assert prefill.parent.span_id == step_ctx.span_id
    assert step.parent.span_id == run_ctx.span_id
    assert run.parent is None
    attrs = [dict(s.attributes or {}) for s in finished]
    assert attrs[3][tm.AW_STEP_INDEX] == 1
    assert (attrs[1][tm.AW_RUN_COMPLETED], attrs[1][tm.AW_RUN_END_STEPS]) == (True, ())
    assert tm.AW_RUN_COMPLETED not in attrs[5]  # open at close: its agent may go on


def test_a_prefetch_not_settled_is_refused() -> None:
    tracer = GatewayTracer()
    pending = Prefetch(node="baggage", rid="r", worker="http://w", tokens=64)
    with pytest.raises(ValueError, match="prefetch of node 'baggage' has no outcome"):
        tracer.prefetch("s", pending)
    with pytest.raises(ValueError, match="give the runs a workflow name"):
        GatewayTracer("")


def test_the_runtime_metrics_are_recorded() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    tracer = GatewayTracer(instruments=tm.Instruments(meter))
    traffic().write(tracer)
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        m.name: m.data.data_points
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    total = {
        name: sum(p.value for p in pts if isinstance(p, NumberDataPoint))
        for name, pts in points.items()
        if name != tm.METRIC_STEP_TTFT
    }
    assert total == {
        tm.METRIC_PREFETCH_ISSUED: 5,
        tm.METRIC_PREFETCH_HITS: 2,
        tm.METRIC_PREFETCH_DROPPED: 1,
        tm.METRIC_PREFETCH_WASTED_TOKENS: 110,
    }
    ttft = {
        (p.attributes or {})[tm.AW_STEP_OUTCOME]: p.count
        for p in points[tm.METRIC_STEP_TTFT]
        if isinstance(p, HistogramDataPoint)
    }
    assert ttft == {"none": 3, "hit": 2, "miss": 1}  # the error reply has no TTFT
