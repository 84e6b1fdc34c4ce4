"""agentwarm.stats on hand-built trace files, with exact expected numbers."""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from agentwarm import START
from agentwarm import telemetry as tm
from agentwarm.errors import ConfigError
from agentwarm.runtime import PrefetchKind, PrefetchOutcome, StepOutcome
from agentwarm.stats import (
    acceptance_ratio,
    branch_hit_rate,
    compute_stats,
    read_traces,
    wasted_tokens,
)

_ids = count(1)


def step(
    run: str,
    index: int,
    frm: str,
    node: str,
    *,
    prefetched: bool = False,
    ttft: float | None = None,
    prompt: int = 100,
    cached: int = 0,
    workflow: str = "wf",
) -> dict[str, Any]:
    attrs: dict[str, Any] = tm.step_attributes(
        workflow=workflow,
        run_id=run,
        index=index,
        from_node=frm,
        node=node,
        prefetched=prefetched,
        outcome=(
            StepOutcome.NONE
            if frm == START
            else (StepOutcome.HIT if prefetched else StepOutcome.MISS)
        ),
    )
    attrs.update(tm.step_result_attributes(ttft_s=ttft, prompt_tokens=prompt, cached_tokens=cached))
    return span(tm.step_span_name(node), attrs, run)


def prefill(
    run: str,
    source: str,
    target: str,
    outcome: str,
    computed: int,
    *,
    kind: PrefetchKind = PrefetchKind.SPECULATIVE,
    workflow: str = "wf",
) -> dict[str, Any]:
    attrs: dict[str, Any] = tm.prefill_attributes(
        workflow=workflow,
        run_id=run,
        source=source,
        target=target,
        kind=kind,
        tokens=computed + 10,
        probability=0.5,
        rank=1,
    )
    attrs[tm.AW_PREFILL_OUTCOME] = outcome
    attrs[tm.AW_PREFILL_COMPUTED_TOKENS] = computed
    return span(tm.SPAN_PREFILL, attrs, run)


def span(name: str, attrs: dict[str, Any], run: str) -> dict[str, Any]:
    return {
        "traceId": f"{abs(hash(run)):032x}"[-32:],
        "spanId": f"{next(_ids):016x}",
        "parentSpanId": None,
        "name": name,
        "kind": "SPAN_KIND_INTERNAL",
        "startTimeUnixNano": 1,
        "endTimeUnixNano": 2,
        "attributes": attrs,
        "status": {"code": "STATUS_CODE_UNSET"},
        "resource": {},
    }


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Three runs of workflow ``wf`` split over two files (see the expected numbers below)."""
    run1 = [
        step("r1", 0, START, "a", ttft=0.5, prompt=100, cached=0),
        prefill("r1", "a", "b", PrefetchOutcome.HIT, 30),
        prefill("r1", "a", "c", PrefetchOutcome.WASTED, 20),
        step("r1", 1, "a", "b", prefetched=True, ttft=0.1, prompt=200, cached=150),
        prefill("r1", "b", "d", PrefetchOutcome.CANCELLED, 10),
        prefill("r1", "b", "c", PrefetchOutcome.HIT, 50, kind=PrefetchKind.CONFIRMED),
        step("r1", 2, "b", "c", ttft=0.4, prompt=300, cached=250),
    ]
    run2 = [
        step("r2", 0, START, "a", ttft=0.6),
        prefill("r2", "a", "b", PrefetchOutcome.WASTED, 25),
        step("r2", 1, "a", "c", ttft=0.3),
        prefill("r2", "c", "b", PrefetchOutcome.HIT, 5),
        prefill("r2", "c", "a", PrefetchOutcome.FAILED, 0),
        step("r2", 2, "c", "b", prefetched=True, ttft=0.2),
    ]
    run3 = [
        step("r3", 0, START, "a", ttft=0.7),
        step("r3", 1, "a", "b", ttft=0.5),
        step("r3", 2, "b", "c"),  # no LLM call: no TTFT
    ]
    return run1, run2 + run3


def test_exact_statistics_over_two_files(tmp_path: Path) -> None:
    first, second = scenario()
    data = read_traces([write(tmp_path / "1.jsonl", first), write(tmp_path / "2.jsonl", second)])
    assert data.problems == []
    assert (len(data.steps), len(data.prefills), data.spans) == (9, 7, 16)
    st = compute_stats(data.steps, data.prefills)
    assert st.workflows == ["wf"]
    assert (st.runs, st.steps, st.branch_steps, st.branch_hits) == (3, 9, 6, 2)
    assert st.branch_hit_rate == pytest.approx(2 / 6)
    assert (st.prefetches_issued, st.prefetch_hits) == (6, 2)
    assert st.acceptance_ratio == pytest.approx(2 / 6)
    assert st.wasted_tokens == 20 + 10 + 25 + 0
    # b's TTFT when not prefetched: 0.5 (r3); its hits: 0.1 (r1) and 0.2 (r2).
    assert st.ttft_saved_s == pytest.approx((0.5 - 0.1) + (0.5 - 0.2))
    assert st.prompt_tokens == 100 + 200 + 300 + 6 * 100
    assert st.cached_tokens == 150 + 250

    edges = {(e["from"], e["to"]): e for e in st.to_dict()["edges"]}
    assert list(edges) == [
        ("__start__", "a"),
        ("a", "b"),
        ("a", "c"),
        ("b", "c"),
        ("b", "d"),
        ("c", "b"),
        ("c", "a"),
    ]

    def check(key: tuple[str, str], **want: Any) -> None:
        got = {k: edges[key][k] for k in want}
        approx = {k: pytest.approx(v) if isinstance(v, float) else v for k, v in want.items()}
        assert got == approx

    check(("__start__", "a"), taken=3, prefetched=0, hits=0, hit_rate=None, wasted_tokens=0)
    assert edges[("__start__", "a")]["ttft_miss_mean_s"] == pytest.approx(0.6)
    assert edges[("__start__", "a")]["ttft_hit_mean_s"] is None
    check(("a", "b"), taken=2, prefetched=2, hits=1, hit_rate=0.5, wasted_tokens=25)
    check(("a", "b"), ttft_hit_mean_s=0.1, ttft_miss_mean_s=0.5)
    check(("a", "c"), taken=1, prefetched=1, hits=0, hit_rate=0.0, wasted_tokens=20)
    check(("a", "c"), ttft_miss_mean_s=0.3)
    check(("b", "c"), taken=2, prefetched=0, hits=0, wasted_tokens=0, ttft_miss_mean_s=0.4)
    check(("b", "d"), taken=0, prefetched=1, hits=0, hit_rate=None, wasted_tokens=10)
    check(("c", "b"), taken=1, prefetched=1, hits=1, hit_rate=1.0, ttft_hit_mean_s=0.2)
    check(("c", "a"), taken=0, prefetched=1, wasted_tokens=0, ttft_miss_mean_s=None)


def test_pure_definitions_on_plain_records() -> None:
    from dataclasses import dataclass

    @dataclass
    class S:
        from_node: str
        prefetched: bool

    @dataclass
    class P:
        kind: str
        outcome: str | None
        computed_tokens: int

    steps = [S("__start__", True), S("a", True), S("b", False), S("c", True)]
    assert branch_hit_rate(steps) == pytest.approx(2 / 3)
    assert branch_hit_rate([S("__start__", False)]) is None
    prefills = [
        P("speculative", "hit", 5),
        P("speculative", None, 7),
        P("speculative", "cancelled", 11),
        P("confirmed", "wasted", 100),
    ]
    assert acceptance_ratio(prefills) == pytest.approx(1 / 3)
    assert acceptance_ratio([]) is None
    assert wasted_tokens(prefills) == 18


def test_definitions_agree_with_the_runtime_summary() -> None:
    from agentwarm.runtime.records import PrefetchRecord, StepRecord
    from agentwarm.runtime.result import RunResult

    spec, confirmed = PrefetchKind.SPECULATIVE, PrefetchKind.CONFIRMED
    s0 = StepRecord(index=0, node="a", from_node="__start__", path=["a"])
    s1 = StepRecord(index=1, node="b", from_node="a", path=["a", "b"], prefetched=True)
    s2 = StepRecord(index=2, node="c", from_node="b", path=["a", "b", "c"])
    s0.prefetches = [
        PrefetchRecord("b", 0.6, 1, spec, 40, 30, PrefetchOutcome.HIT),
        PrefetchRecord("c", 0.3, 2, spec, 40, 12, PrefetchOutcome.CANCELLED),
    ]
    s1.prefetches = [
        PrefetchRecord("d", 0.9, 1, spec, 40, 9, PrefetchOutcome.WASTED),
        PrefetchRecord("c", 1.0, 1, confirmed, 40, 40, PrefetchOutcome.HIT),
    ]
    run = RunResult("wf", "r", "", ["a", "b", "c"], [s0, s1, s2], {}, 0.0)
    summary = run.summary()
    prefills = [p for s in run.steps for p in s.prefetches]
    assert summary["branch_hit_rate"] == branch_hit_rate(run.steps) == 0.5
    assert summary["acceptance_ratio"] == acceptance_ratio(prefills) == pytest.approx(1 / 3)
    assert summary["wasted_tokens"] == wasted_tokens(prefills) == 21
    outcomes = [s.outcome for s in run.steps]
    assert outcomes == [StepOutcome.NONE, StepOutcome.HIT, StepOutcome.MISS]
    assert all(isinstance(o, StepOutcome) for o in outcomes)


def test_bad_and_foreign_lines_are_reported_with_line_numbers(tmp_path: Path) -> None:
    good = step("r1", 0, START, "a", ttft=0.1)
    no_from = step("r1", 1, "a", "b")
    del no_from["attributes"][tm.AW_STEP_FROM]
    no_target = prefill("r1", "a", "b", PrefetchOutcome.HIT, 3)
    del no_target["attributes"][tm.AW_PREFILL_TARGET]
    bad_int = step("r1", 1, "a", "b")
    bad_int["attributes"][tm.AW_STEP_INDEX] = "seven"
    foreign_span = {"traceId": "f" * 32, "spanId": "e" * 16, "name": "GET /", "attributes": {}}
    lines = [
        json.dumps(good),  # 1
        "this is not json",  # 2
        "",  # 3 (blank: ignored)
        "[1, 2, 3]",  # 4
        json.dumps({"foo": 1}),  # 5
        json.dumps(no_from),  # 6
        json.dumps(no_target),  # 7
        json.dumps(foreign_span),  # 8 (another library's span: counted, not a problem)
        json.dumps(bad_int),  # 9
        json.dumps({"name": "x", "attributes": 5}),  # 10
    ]
    path = tmp_path / "t.jsonl"
    path.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe{\n")  # 11: not UTF-8
    data = read_traces([path])
    assert [(p.line, p.message) for p in data.problems] == [
        (2, "not JSON (Expecting value at column 1)"),
        (4, "not a span record (expected a JSON object)"),
        (5, "not a span record (no 'name')"),
        (6, "step span without a string 'agentwarm.step.from'"),
        (7, "prefill span without a string 'agentwarm.prefill.target'"),
        (9, "'agentwarm.step.index' is not an integer: 'seven'"),
        (10, "attributes is neither an object nor an OTLP key/value list"),
        (11, "not UTF-8 text (byte 0xff at offset 0)"),
    ]
    assert str(data.problems[0]) == f"{path}:2: not JSON (Expecting value at column 1)"
    assert (len(data.steps), len(data.prefills), data.other_spans) == (1, 0, 1)


def test_duplicate_spans_count_once(tmp_path: Path) -> None:
    first, _ = scenario()
    path = write(tmp_path / "t.jsonl", first)
    data = read_traces([path, path])
    assert (len(data.steps), data.duplicates) == (3, 7)


def test_otlp_json_export_lines_are_understood(tmp_path: Path) -> None:
    def kv(key: str, value: Any) -> dict[str, Any]:
        if isinstance(value, bool):
            return {"key": key, "value": {"boolValue": value}}
        if isinstance(value, int):
            return {"key": key, "value": {"intValue": str(value)}}
        if isinstance(value, float):
            return {"key": key, "value": {"doubleValue": value}}
        return {"key": key, "value": {"stringValue": value}}

    s = step("r9", 1, "a", "b", prefetched=True, ttft=0.25)
    p = prefill("r9", "a", "b", PrefetchOutcome.HIT, 12)
    batch = {
        "resourceSpans": [
            {
                "resource": {"attributes": [kv("service.name", "agentwarm")]},
                "scopeSpans": [
                    {
                        "scope": {"name": "agentwarm"},
                        "spans": [
                            {**x, "attributes": [kv(k, v) for k, v in x["attributes"].items()]}
                            for x in (s, p)
                        ],
                    }
                ],
            }
        ]
    }
    data = read_traces([write(tmp_path / "otlp.jsonl", [batch])])
    assert data.problems == []
    assert len(data.steps) == 1 and len(data.prefills) == 1
    got = data.steps[0]
    assert (got.from_node, got.node, got.index, got.prefetched, got.ttft_s) == (
        "a",
        "b",
        1,
        True,
        0.25,
    )
    assert data.prefills[0].computed_tokens == 12


def test_workflow_filter(tmp_path: Path) -> None:
    records = [
        step("r1", 0, START, "a", workflow="one"),
        step("r1", 1, "a", "b", prefetched=True, workflow="one"),
        step("r2", 0, START, "x", workflow="two"),
        step("r2", 1, "x", "y", workflow="two"),
    ]
    data = read_traces([write(tmp_path / "t.jsonl", records)])
    assert compute_stats(data.steps, data.prefills).workflows == ["one", "two"]
    one = compute_stats(data.steps, data.prefills, workflow="one")
    two = compute_stats(data.steps, data.prefills, workflow="two")
    assert (one.branch_hit_rate, two.branch_hit_rate) == (1.0, None)  # two: nothing prefetched
    assert one.edge("a", "b") is not None and one.edge("x", "y") is None


def test_missing_file_and_directory_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such trace file"):
        read_traces([tmp_path / "nope.jsonl"])
    with pytest.raises(ConfigError, match="is a directory"):
        read_traces([tmp_path])


def test_real_spans_roundtrip_through_the_jsonl_exporter(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tracer = tm.get_tracer()
    with tm.configure(trace_file=path):
        for index, (frm, node, hit) in enumerate([(START, "a", False), ("a", "b", True)]):
            attrs = tm.step_attributes(
                workflow="wf",
                run_id="r",
                index=index,
                from_node=frm,
                node=node,
                prefetched=hit,
                outcome=StepOutcome.HIT if hit else StepOutcome.NONE,
            )
            with tracer.start_as_current_span(tm.step_span_name(node), attributes=attrs) as sp:
                if frm == START:
                    with tracer.start_as_current_span(
                        tm.SPAN_PREFILL,
                        attributes=tm.prefill_attributes(
                            workflow="wf",
                            run_id="r",
                            source="a",
                            target="b",
                            kind=PrefetchKind.SPECULATIVE,
                            tokens=64,
                        ),
                    ) as pre:
                        pre.set_attribute(tm.AW_PREFILL_OUTCOME, PrefetchOutcome.HIT)
                sp.set_attributes(
                    tm.step_result_attributes(ttft_s=0.01, prompt_tokens=64, cached_tokens=60)
                )
    data = read_traces([path])
    st = compute_stats(data.steps, data.prefills)
    assert (st.steps, st.branch_hit_rate, st.acceptance_ratio, st.cached_tokens) == (
        2,
        1.0,
        1.0,
        120,
    )
