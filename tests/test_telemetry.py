"""The telemetry contract: span names, attribute keys, exporters, provider setup."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode

from agentwarm import START
from agentwarm import telemetry as tm
from agentwarm._spec import MissReason
from agentwarm.errors import ConfigError
from agentwarm.runtime import PrefetchKind, PrefetchOutcome, StepOutcome
from agentwarm.telemetry import attributes, instrumentation, jsonl, names, setup


def test_span_names() -> None:
    assert tm.workflow_span_name("support") == "invoke_workflow support"
    assert tm.step_span_name("triage") == "invoke_agent triage"
    assert tm.llm_span_name("tiny") == "text_completion tiny"
    assert tm.SPAN_PREFILL == "agentwarm.prefill"


def test_attribute_keys_are_pinned() -> None:
    assert {
        "GEN_AI_OPERATION_NAME": tm.GEN_AI_OPERATION_NAME,
        "GEN_AI_AGENT_NAME": tm.GEN_AI_AGENT_NAME,
        "GEN_AI_REQUEST_MODEL": tm.GEN_AI_REQUEST_MODEL,
        "GEN_AI_PROVIDER_NAME": tm.GEN_AI_PROVIDER_NAME,
        "GEN_AI_REQUEST_MAX_TOKENS": tm.GEN_AI_REQUEST_MAX_TOKENS,
        "GEN_AI_REQUEST_TEMPERATURE": tm.GEN_AI_REQUEST_TEMPERATURE,
        "GEN_AI_RESPONSE_FINISH_REASONS": tm.GEN_AI_RESPONSE_FINISH_REASONS,
        "GEN_AI_USAGE_INPUT_TOKENS": tm.GEN_AI_USAGE_INPUT_TOKENS,
        "GEN_AI_USAGE_OUTPUT_TOKENS": tm.GEN_AI_USAGE_OUTPUT_TOKENS,
        "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS": tm.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    } == {
        "GEN_AI_OPERATION_NAME": "gen_ai.operation.name",
        "GEN_AI_AGENT_NAME": "gen_ai.agent.name",
        "GEN_AI_REQUEST_MODEL": "gen_ai.request.model",
        "GEN_AI_PROVIDER_NAME": "gen_ai.provider.name",
        "GEN_AI_REQUEST_MAX_TOKENS": "gen_ai.request.max_tokens",
        "GEN_AI_REQUEST_TEMPERATURE": "gen_ai.request.temperature",
        "GEN_AI_RESPONSE_FINISH_REASONS": "gen_ai.response.finish_reasons",
        "GEN_AI_USAGE_INPUT_TOKENS": "gen_ai.usage.input_tokens",
        "GEN_AI_USAGE_OUTPUT_TOKENS": "gen_ai.usage.output_tokens",
        "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS": "gen_ai.usage.cache_read.input_tokens",
    }
    own = [v for k, v in vars(names).items() if k.startswith("AW_")]
    assert len(own) == 32
    assert all(v.startswith("agentwarm.") for v in own)
    assert sorted(v for v in own if v.startswith("agentwarm.step.miss.")) == [
        "agentwarm.step.miss.cause",
        "agentwarm.step.miss.message",
        "agentwarm.step.miss.missing_tokens",
        "agentwarm.step.miss.p",
        "agentwarm.step.miss.price",
        "agentwarm.step.miss.rank",
        "agentwarm.step.miss.reason",
        "agentwarm.step.miss.token",
    ]
    assert tm.AW_STEP_TTFT == "agentwarm.step.ttft_s"
    assert tm.AW_STEP_HINT_NODE == "agentwarm.step.hint_node"
    assert tm.AW_STEP_HINT_LEAD == "agentwarm.step.hint_lead_s"
    assert tm.AW_PREFILL_OUTCOME == "agentwarm.prefill.outcome"
    assert tm.AW_STEP_DISK_CACHED_TOKENS == "agentwarm.step.disk_cached_tokens"


def test_outcome_and_kind_values_are_pinned() -> None:
    # The strings of JSON output, trace files and metric attributes.
    assert [str(r) for r in MissReason] == [
        "not_predicted",
        "priced_out",
        "dropped",
        "guardrail",
        "failed",
        "overtaken",
        "off",
        "late",
        "prefix_mismatch",
    ]
    assert [str(o) for o in PrefetchOutcome] == ["hit", "wasted", "cancelled", "failed", "dropped"]
    assert [str(k) for k in PrefetchKind] == [
        "speculative",
        "confirmed",
        "static",
        "keep_warm",
        "explicit",
    ]
    assert [str(o) for o in StepOutcome] == ["hit", "miss", "none"]
    assert json.dumps([PrefetchOutcome.DROPPED, StepOutcome.NONE]) == '["dropped", "none"]'
    attrs = tm.step_attributes(
        workflow="w",
        run_id="r",
        index=1,
        from_node="a",
        node="b",
        prefetched=True,
        outcome=StepOutcome.HIT,
    )
    assert type(attrs[tm.AW_STEP_OUTCOME]) is str  # a plain string reaches every exporter


def test_the_package_reexports_every_name_of_its_modules() -> None:
    # The library's callers use tm.X for any name, builder or instrument; __all__ stays small.
    for module in (names, attributes, instrumentation, jsonl, setup):
        for name in module.__all__:
            assert getattr(tm, name) is getattr(module, name), name
    assert set(tm.__all__) == {
        "CAPTURE_CONTENT_ENV",
        "JsonlSpanExporter",
        "Telemetry",
        "capture_content",
        "capture_spans",
        "configure",
        "span_to_dict",
    }


def test_gen_ai_keys_match_the_semconv_package() -> None:
    semconv = pytest.importorskip("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
    for name in (
        "GEN_AI_OPERATION_NAME",
        "GEN_AI_AGENT_NAME",
        "GEN_AI_REQUEST_MODEL",
        "GEN_AI_PROVIDER_NAME",
        "GEN_AI_REQUEST_MAX_TOKENS",
        "GEN_AI_REQUEST_TEMPERATURE",
        "GEN_AI_RESPONSE_FINISH_REASONS",
        "GEN_AI_USAGE_INPUT_TOKENS",
        "GEN_AI_USAGE_OUTPUT_TOKENS",
        "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
        "GEN_AI_INPUT_MESSAGES",
        "GEN_AI_OUTPUT_MESSAGES",
    ):
        assert getattr(tm, name) == getattr(semconv, name)
    ops = semconv.GenAiOperationNameValues
    assert ops.INVOKE_WORKFLOW.value == tm.OP_INVOKE_WORKFLOW
    assert ops.INVOKE_AGENT.value == tm.OP_INVOKE_AGENT
    assert ops.TEXT_COMPLETION.value == tm.OP_TEXT_COMPLETION


def _emit_run(tracer: object) -> None:
    """One workflow run with one step, one LLM call and one prefill, built from the helpers."""
    from opentelemetry.trace import Tracer

    assert isinstance(tracer, Tracer)
    with (
        tracer.start_as_current_span(
            tm.workflow_span_name("support"),
            kind=SpanKind.INTERNAL,
            attributes=tm.workflow_attributes("support", "run-1"),
        ),
        tracer.start_as_current_span(
            tm.step_span_name("triage"),
            attributes=tm.step_attributes(
                workflow="support",
                run_id="run-1",
                index=0,
                from_node=START,
                node="triage",
                prefetched=False,
                outcome=StepOutcome.NONE,
            ),
        ) as step,
    ):
        with tracer.start_as_current_span(
            tm.llm_span_name("tiny"),
            attributes=tm.llm_request_attributes(
                model="tiny",
                provider=tm.PROVIDER_LOCAL,
                max_tokens=32,
                temperature=0.0,
                agent="triage",
            ),
        ) as llm:
            llm.set_attributes(
                tm.llm_response_attributes(
                    input_tokens=120, output_tokens=7, cached_tokens=96, finish_reason="stop"
                )
            )
        with tracer.start_as_current_span(
            tm.SPAN_PREFILL,
            attributes=tm.prefill_attributes(
                workflow="support",
                run_id="run-1",
                source="triage",
                target="refund",
                kind=PrefetchKind.SPECULATIVE,
                tokens=100,
                probability=0.75,
                rank=0,
            ),
        ) as pre:
            pre.set_attribute(tm.AW_PREFILL_OUTCOME, PrefetchOutcome.WASTED)
            pre.set_attribute(tm.AW_PREFILL_COMPUTED_TOKENS, 40)
        step.set_attributes(
            tm.step_result_attributes(ttft_s=0.25, prompt_tokens=120, cached_tokens=96)
        )


def test_spans_carry_names_and_required_attributes() -> None:
    # The attribute builders' output. The LLM span's kind and provider are the engine's, set by
    # the runtime: pinned on real engines in tests/test_llm_spans.py.
    with tm.capture_spans() as exporter:
        _emit_run(tm.get_tracer())
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(spans) == [
        "agentwarm.prefill",
        "invoke_agent triage",
        "invoke_workflow support",
        "text_completion tiny",
    ]
    wf, step = spans["invoke_workflow support"], spans["invoke_agent triage"]
    llm, pre = spans["text_completion tiny"], spans["agentwarm.prefill"]
    assert dict(wf.attributes or {}) == {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.agent.name": "support",
        "agentwarm.workflow": "support",
        "agentwarm.run.id": "run-1",
    }
    assert dict(step.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "triage",
        "agentwarm.workflow": "support",
        "agentwarm.run.id": "run-1",
        "agentwarm.step.index": 0,
        "agentwarm.step.from": "__start__",
        "agentwarm.step.node": "triage",
        "agentwarm.step.prefetched": False,
        "agentwarm.step.outcome": "none",
        "agentwarm.step.ttft_s": 0.25,
        "agentwarm.step.prompt_tokens": 120,
        "agentwarm.step.cached_tokens": 96,
    }
    assert dict(llm.attributes or {}) == {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.request.model": "tiny",
        "gen_ai.provider.name": "agentwarm.local",
        "gen_ai.request.max_tokens": 32,
        "gen_ai.request.temperature": 0.0,
        "gen_ai.agent.name": "triage",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 96,
        "gen_ai.response.finish_reasons": ("stop",),
    }
    assert dict(pre.attributes or {}) == {
        "agentwarm.workflow": "support",
        "agentwarm.run.id": "run-1",
        "agentwarm.prefill.source": "triage",
        "agentwarm.prefill.target": "refund",
        "agentwarm.prefill.kind": "speculative",
        "agentwarm.prefill.tokens": 100,
        "agentwarm.prefill.probability": 0.75,
        "agentwarm.prefill.rank": 0,
        "agentwarm.prefill.outcome": "wasted",
        "agentwarm.prefill.computed_tokens": 40,
    }
    assert step.parent is not None and wf.context is not None
    assert step.parent.span_id == wf.context.span_id
    assert pre.parent is not None and step.context is not None
    assert pre.parent.span_id == step.context.span_id


def test_step_result_attributes_leave_out_missing_ttft() -> None:
    assert tm.step_result_attributes(ttft_s=None, prompt_tokens=0, cached_tokens=0) == {
        "agentwarm.step.prompt_tokens": 0,
        "agentwarm.step.cached_tokens": 0,
    }
    hinted = tm.step_result_attributes(
        ttft_s=None, prompt_tokens=0, cached_tokens=0, hint_node="refund", hint_lead_s=0.125
    )
    assert hinted == {
        "agentwarm.step.prompt_tokens": 0,
        "agentwarm.step.cached_tokens": 0,
        "agentwarm.step.hint_node": "refund",
        "agentwarm.step.hint_lead_s": 0.125,
    }
    gained = tm.step_result_attributes(
        ttft_s=None, prompt_tokens=0, cached_tokens=0, hint_node="refund", hint_gain_s=0.0625
    )
    assert gained["agentwarm.step.hint_gain_s"] == 0.0625
    assert tm.AW_STEP_HINT_GAIN == "agentwarm.step.hint_gain_s"


def test_jsonl_exporter_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    provider = TracerProvider()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = tm.JsonlSpanExporter(path)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agentwarm", "9.9")
    with (
        tracer.start_as_current_span("invoke_workflow w", attributes={"a": 1}) as root,
        tracer.start_as_current_span("child", kind=SpanKind.CLIENT) as child,
    ):
        child.set_attribute("reasons", ("stop", "length"))
        child.add_event("ev", {"x": 2})
        child.set_status(StatusCode.ERROR, "boom")
    provider.shutdown()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["name"] for x in lines] == ["child", "invoke_workflow w"]
    c, r = lines
    assert c["traceId"] == r["traceId"] == format(root.get_span_context().trace_id, "032x")
    assert c["spanId"] == format(child.get_span_context().span_id, "016x")
    assert c["parentSpanId"] == r["spanId"] and r["parentSpanId"] is None
    assert (c["kind"], r["kind"]) == ("SPAN_KIND_CLIENT", "SPAN_KIND_INTERNAL")
    assert c["attributes"] == {"reasons": ["stop", "length"]}
    assert r["attributes"] == {"a": 1}
    assert c["events"][0]["name"] == "ev" and c["events"][0]["attributes"] == {"x": 2}
    assert c["status"] == {"code": "STATUS_CODE_ERROR", "message": "boom"}
    assert r["status"] == {"code": "STATUS_CODE_UNSET"}
    assert c["scope"] == {"name": "agentwarm", "version": "9.9"}
    assert c["resource"]["telemetry.sdk.language"] == "python"
    assert isinstance(c["startTimeUnixNano"], int)
    assert c["startTimeUnixNano"] <= c["endTimeUnixNano"]
    assert set(c) == {
        "traceId",
        "spanId",
        "parentSpanId",
        "name",
        "kind",
        "startTimeUnixNano",
        "endTimeUnixNano",
        "attributes",
        "events",
        "status",
        "resource",
        "scope",
    }


def test_jsonl_exporter_appends_and_is_thread_safe(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"earlier": true}\n')
    provider = TracerProvider()
    tracer = provider.get_tracer("x")
    spans = []
    for i in range(8):
        with tracer.start_as_current_span(f"s{i}") as s:
            pass
        spans.append(s)
    exporter = tm.JsonlSpanExporter(path)

    def worker() -> None:
        for _ in range(25):
            exporter.export(spans)  # type: ignore[arg-type]

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    exporter.shutdown()
    lines = path.read_text().splitlines()
    assert lines[0] == '{"earlier": true}'
    decoded = [json.loads(x) for x in lines[1:]]
    assert len(decoded) == 4 * 25 * 8
    assert {d["name"] for d in decoded} == {f"s{i}" for i in range(8)}
    assert exporter.export(spans).name == "FAILURE"  # type: ignore[arg-type]


def test_configure_can_run_repeatedly_in_one_process(tmp_path: Path) -> None:
    tracer = tm.get_tracer()  # obtained before any configure(): must still export afterwards
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with tm.configure(trace_file=first) as handle:
        assert handle.trace_file == first
        with tracer.start_as_current_span("one"):
            pass
    with tracer.start_as_current_span("between"):
        pass
    with tm.configure(trace_file=second), tm.get_tracer().start_as_current_span("two"):
        pass
    assert [json.loads(x)["name"] for x in first.read_text().splitlines()] == ["one"]
    assert [json.loads(x)["name"] for x in second.read_text().splitlines()] == ["two"]


def test_configure_errors_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot write trace file"):
        tm.configure(trace_file=tmp_path / "missing-dir" / "t.jsonl")
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"pip install 'agentwarm\[otlp\]'"):
            tm.configure(otlp_endpoint="http://localhost:4318")


def test_console_exporter_prints_spans_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with tm.configure(console=True), tm.get_tracer().start_as_current_span(tm.step_span_name("x")):
        pass
    out = capsys.readouterr()
    assert '"name": "invoke_agent x"' in out.err
    assert out.out == ""


def test_instruments_names_units_and_attributes() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    inst = tm.Instruments(provider.get_meter("agentwarm"))
    inst.record_issued("wf", 3)
    inst.record_hit("wf")
    inst.record_wasted("wf", 50)
    inst.record_wasted("wf", 0)
    inst.record_ttft("wf", 0.02, StepOutcome.HIT)
    inst.record_ttft("wf", 0.2, StepOutcome.MISS)
    data = reader.get_metrics_data()
    assert data is not None
    found = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert sorted(found) == [
        "agentwarm.prefetch.hits",
        "agentwarm.prefetch.issued",
        "agentwarm.prefetch.wasted_tokens",
        "agentwarm.step.ttft",
    ]
    assert found["agentwarm.step.ttft"].unit == "s"

    def values(name: str) -> dict[tuple[tuple[str, object], ...], object]:
        points = found[name].data.data_points
        return {
            tuple(sorted((p.attributes or {}).items())): getattr(p, "value", None)
            or getattr(p, "sum", None)
            for p in points
        }

    assert values("agentwarm.prefetch.issued") == {(("agentwarm.workflow", "wf"),): 3}
    assert values("agentwarm.prefetch.hits") == {(("agentwarm.workflow", "wf"),): 1}
    assert values("agentwarm.prefetch.wasted_tokens") == {(("agentwarm.workflow", "wf"),): 50}
    assert values("agentwarm.step.ttft") == {
        (("agentwarm.step.outcome", "hit"), ("agentwarm.workflow", "wf")): 0.02,
        (("agentwarm.step.outcome", "miss"), ("agentwarm.workflow", "wf")): 0.2,
    }
    assert tm.instruments() is tm.instruments()


def test_capture_content_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tm.CAPTURE_CONTENT_ENV, raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    assert tm.capture_content() is False
    monkeypatch.setenv(tm.CAPTURE_CONTENT_ENV, "1")
    assert tm.capture_content() is True
    monkeypatch.setenv(tm.CAPTURE_CONTENT_ENV, "0")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    assert tm.capture_content() is True


USER_PIPELINE = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

user = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(user))
trace.set_tracer_provider(provider)

from agentwarm import telemetry as tm
from agentwarm.telemetry import attributes, instrumentation, jsonl, names, setup

with tm.get_tracer().start_as_current_span(tm.step_span_name("before")):
    pass
with tm.configure(trace_file=sys.argv[1]):
    with tm.get_tracer().start_as_current_span(tm.step_span_name("during")):
        pass
print(json.dumps([s.name for s in user.get_finished_spans()]))
"""


def test_spans_reach_an_application_configured_provider(tmp_path: Path) -> None:
    import subprocess
    import sys

    trace_file = tmp_path / "t.jsonl"
    out = subprocess.run(
        [sys.executable, "-c", USER_PIPELINE, str(trace_file)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(out.stdout) == ["invoke_agent before", "invoke_agent during"]
    assert [json.loads(x)["name"] for x in trace_file.read_text().splitlines()] == [
        "invoke_agent during"
    ]
    assert "Overriding" not in out.stderr
