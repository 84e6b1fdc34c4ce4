"""Trace values that are not finite or make no sense are skipped with a per-line warning.

A step or prefill span whose TTFT is ``Infinity``/``NaN``/negative, whose token count or index is
negative, fractional or beyond :data:`MAX_COUNT`, whose probability is outside 0..1, whose kind
or outcome is not a PrefetchKind / PrefetchOutcome value, or whose required name is not a
string, and a workflow span whose end steps are not step indices, is one :class:`Problem`;
``agentwarm stats --json`` always prints strict JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwarm import START
from agentwarm import telemetry as tm
from agentwarm.cli import app
from agentwarm.runtime import PrefetchKind, PrefetchOutcome
from agentwarm.stats import MAX_COUNT, read_traces
from tests.stats.test_traces import prefill, span, step

runner = CliRunner()

LONG = "9" * 5000
LONG_SHOWN = f"{repr(LONG)[:30]}... (5002 characters)"
#: How the reader lists the prefill kinds it accepts (every PrefetchKind value, in order).
KINDS = "'speculative', 'confirmed', 'static', 'keep_warm' or 'explicit'"

#: (span kind, attribute, bad value, the problem reported)
BAD: list[tuple[str, str, Any, str]] = [
    ("step", tm.AW_STEP_TTFT, math.inf, "is not a finite number: inf"),
    ("step", tm.AW_STEP_TTFT, -math.inf, "is not a finite number: -inf"),
    ("step", tm.AW_STEP_TTFT, math.nan, "is not a finite number: nan"),
    ("step", tm.AW_STEP_TTFT, 1e999, "is not a finite number: inf"),
    ("step", tm.AW_STEP_TTFT, "Infinity", "is not a finite number: 'Infinity'"),
    ("step", tm.AW_STEP_TTFT, -0.25, "is negative: -0.25"),
    ("step", tm.AW_STEP_TTFT, "x", "is not a number: 'x'"),
    ("step", tm.AW_STEP_PROMPT_TOKENS, -5, "is negative: -5"),
    ("step", tm.AW_STEP_PROMPT_TOKENS, 1e308, f"is larger than {MAX_COUNT}: 1e+308"),
    (
        "step",
        tm.AW_STEP_PROMPT_TOKENS,
        MAX_COUNT + 1,
        f"is larger than {MAX_COUNT}: {MAX_COUNT + 1}",
    ),
    ("step", tm.AW_STEP_PROMPT_TOKENS, 12.5, "is not an integer: 12.5"),
    ("step", tm.AW_STEP_PROMPT_TOKENS, math.inf, "is not an integer: inf"),
    ("step", tm.AW_STEP_PROMPT_TOKENS, LONG, f"is not an integer: {LONG_SHOWN}"),
    ("step", tm.AW_STEP_CACHED_TOKENS, -1, "is negative: -1"),
    ("step", tm.AW_STEP_INDEX, -1, "is negative: -1"),
    ("prefill", tm.AW_PREFILL_COMPUTED_TOKENS, math.nan, "is not an integer: nan"),
    ("prefill", tm.AW_PREFILL_TOKENS, -10, "is negative: -10"),
    ("prefill", tm.AW_PREFILL_PROBABILITY, 1.5, "is larger than 1: 1.5"),
    ("prefill", tm.AW_PREFILL_PROBABILITY, -0.1, "is negative: -0.1"),
    ("prefill", tm.AW_PREFILL_PROBABILITY, math.nan, "is not a finite number: nan"),
    ("prefill", tm.AW_PREFILL_RANK, -1, "is negative: -1"),
    ("step", tm.AW_STEP_TTFT, [1], "is not a number: [1]"),
    ("step", tm.AW_STEP_PROMPT_TOKENS, True, "is not an integer: True"),
    ("prefill", tm.AW_PREFILL_KIND, "guess", f"is not {KINDS}: 'guess'"),
    (
        "prefill",
        tm.AW_PREFILL_OUTCOME,
        "lost",
        "is not 'hit', 'wasted', 'cancelled', 'failed' or 'dropped': 'lost'",
    ),
    (
        "prefill",
        tm.AW_PREFILL_OUTCOME,
        5,
        "is not 'hit', 'wasted', 'cancelled', 'failed' or 'dropped': 5",
    ),
    ("workflow", tm.AW_RUN_END_STEPS, [1, True], "is not a list of step indices: [1, True]"),
    ("workflow", tm.AW_RUN_END_STEPS, "2", "is not a list of step indices: '2'"),
]

#: (span kind, a required name attribute, a value that is not a non-empty string)
BAD_NAMES: list[tuple[str, str, Any]] = [
    ("step", tm.AW_STEP_NODE, 5),
    ("step", tm.AW_STEP_FROM, ""),
    ("prefill", tm.AW_PREFILL_SOURCE, None),
    ("prefill", tm.AW_PREFILL_TARGET, ["b"]),
    ("prefill", tm.AW_PREFILL_KIND, None),  # kind: not a PrefetchKind
    ("workflow", tm.AW_RUN_ID, 7),
]


def _span(kind: str, key: str, value: Any) -> dict[str, Any]:
    if kind == "step":
        rec = step("r1", 1, "a", "b", ttft=0.5)
    elif kind == "prefill":
        rec = prefill("r1", "a", "b", "hit", 5)
    else:
        attrs = {**tm.workflow_attributes("wf", "r1"), **tm.workflow_result_attributes([1])}
        rec = span(tm.workflow_span_name("wf"), attrs, "r1")
    rec["attributes"][key] = value
    return rec


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    # json.dumps writes inf/nan as Infinity/NaN, as a buggy or hostile writer would
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(("kind", "key", "value", "problem"), BAD)
def test_bad_value_skips_the_span_with_its_line(
    tmp_path: Path, kind: str, key: str, value: Any, problem: str
) -> None:
    first = step("r1", 0, START, "a", ttft=0.25)
    path = _write(tmp_path / "t.jsonl", [first, _span(kind, key, value), step("r1", 2, "b", "c")])
    data = read_traces([path])
    assert [(p.line, p.message) for p in data.problems] == [(2, f"'{key}' {problem}")]
    assert (len(data.steps), len(data.prefills), len(data.runs)) == (2, 0, 0)


@pytest.mark.parametrize(("kind", "key", "value"), BAD_NAMES)
def test_a_required_name_that_is_not_a_string_skips_the_span(
    tmp_path: Path, kind: str, key: str, value: Any
) -> None:
    first = step("r1", 0, START, "a", ttft=0.25)
    path = _write(tmp_path / "t.jsonl", [first, _span(kind, key, value)])
    data = read_traces([path])
    if key == tm.AW_PREFILL_KIND:
        problem = f"'{key}' is not {KINDS}: None"
    else:
        problem = f"{kind} span without a string '{key}'"
    assert [(p.line, p.message) for p in data.problems] == [(2, problem)]
    assert (len(data.steps), len(data.prefills), len(data.runs)) == (1, 0, 0)


def test_prefill_kind_and_outcome_are_read_as_their_enums(tmp_path: Path) -> None:
    no_outcome = prefill("r1", "a", "c", "wasted", 3, kind=PrefetchKind.CONFIRMED)
    del no_outcome["attributes"][tm.AW_PREFILL_OUTCOME]
    records = [prefill("r1", "a", "b", "hit", 5), no_outcome]
    data = read_traces([_write(tmp_path / "t.jsonl", records)])
    assert data.problems == []
    assert [(p.kind, p.outcome) for p in data.prefills] == [
        (PrefetchKind.SPECULATIVE, PrefetchOutcome.HIT),
        (PrefetchKind.CONFIRMED, None),
    ]
    assert all(isinstance(p.kind, PrefetchKind) for p in data.prefills)
    assert isinstance(data.prefills[0].outcome, PrefetchOutcome)


def test_a_run_span_is_read(tmp_path: Path) -> None:
    run = _span("workflow", tm.AW_RUN_END_STEPS, [1, 2])
    data = read_traces([_write(tmp_path / "t.jsonl", [run])])
    assert data.problems == []
    assert [(r.workflow, r.run_id, r.completed, r.end_steps) for r in data.runs] == [
        ("wf", "r1", True, (1, 2))
    ]


@pytest.mark.parametrize(
    ("key", "value", "read"),
    [
        (tm.AW_STEP_TTFT, 0, 0.0),
        (tm.AW_STEP_TTFT, "0.125", 0.125),
        (tm.AW_STEP_PROMPT_TOKENS, MAX_COUNT, MAX_COUNT),
        (tm.AW_STEP_PROMPT_TOKENS, 12.0, 12),
        (tm.AW_STEP_PROMPT_TOKENS, "12", 12),
    ],
)
def test_edge_values_are_accepted(tmp_path: Path, key: str, value: Any, read: Any) -> None:
    data = read_traces([_write(tmp_path / "t.jsonl", [_span("step", key, value)])])
    assert data.problems == []
    got = {
        tm.AW_STEP_TTFT: data.steps[0].ttft_s,
        tm.AW_STEP_PROMPT_TOKENS: data.steps[0].prompt_tokens,
    }
    assert got[key] == read and type(got[key]) is type(read)


def test_probability_one_is_accepted(tmp_path: Path) -> None:
    data = read_traces(
        [_write(tmp_path / "t.jsonl", [_span("prefill", tm.AW_PREFILL_PROBABILITY, 1)])]
    )
    assert (data.problems, data.prefills[0].probability) == ([], 1.0)


def _otlp_line(attrs: dict[str, dict[str, Any]]) -> str:
    span = {
        "traceId": "a" * 32,
        "spanId": "b" * 16,
        "name": tm.step_span_name("b"),
        "attributes": [{"key": k, "value": v} for k, v in attrs.items()],
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        (tm.AW_STEP_PROMPT_TOKENS, {"intValue": LONG}, f"is not an integer: {LONG_SHOWN}"),
        (tm.AW_STEP_PROMPT_TOKENS, {"intValue": "abc"}, "is not an integer: 'abc'"),
        (
            tm.AW_STEP_PROMPT_TOKENS,
            {"intValue": 1e308},
            f"is larger than {MAX_COUNT}: {str(int(1e308))[:30]}... (309 characters)",
        ),
        (tm.AW_STEP_TTFT, {"doubleValue": "abc"}, "is not a number: 'abc'"),
        (tm.AW_STEP_TTFT, {"doubleValue": "NaN"}, "is not a finite number: nan"),
    ],
)
def test_otlp_values_that_do_not_convert_are_problems(
    tmp_path: Path, key: str, value: dict[str, Any], problem: str
) -> None:
    attrs = {
        tm.AW_STEP_NODE: {"stringValue": "b"},
        tm.AW_STEP_FROM: {"stringValue": "a"},
        key: value,
    }
    path = tmp_path / "otlp.jsonl"
    path.write_text(_otlp_line(attrs) + "\n")
    data = read_traces([path])
    assert [(p.line, p.message) for p in data.problems] == [(1, f"'{key}' {problem}")]


def _strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"invalid JSON constant {constant} in the output")

    return json.loads(text, parse_constant=refuse)


def test_stats_json_is_strict_json_and_skips_infinite_ttft(tmp_path: Path) -> None:
    records = [
        step("r1", 0, START, "a", ttft=0.25),
        _span("step", tm.AW_STEP_TTFT, math.inf),
        _span("step", tm.AW_STEP_TTFT, math.nan),
        _span("step", tm.AW_STEP_PROMPT_TOKENS, 1e308),
    ]
    path = _write(tmp_path / "t.jsonl", records)
    result = runner.invoke(app, ["stats", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"warning: skipped {path}:2: '{tm.AW_STEP_TTFT}' is not a finite number: inf",
        f"warning: skipped {path}:3: '{tm.AW_STEP_TTFT}' is not a finite number: nan",
        f"warning: skipped {path}:4: '{tm.AW_STEP_PROMPT_TOKENS}' is larger than {MAX_COUNT}: "
        "1e+308",
    ]
    out = _strict(result.stdout)
    assert (out["steps"], out["skipped_lines"]) == (1, 3)
    assert (out["ttft_p50_s"], out["ttft_p95_s"], out["prompt_tokens"]) == (0.25, 0.25, 100)


def test_stats_text_has_no_nan(tmp_path: Path) -> None:
    records = [step("r1", 0, START, "a", ttft=0.25), _span("step", tm.AW_STEP_TTFT, math.nan)]
    path = _write(tmp_path / "t.jsonl", records)
    result = runner.invoke(app, ["stats", str(path)], env={"COLUMNS": "140"})
    assert result.exit_code == 0, result.output
    assert "nan" not in result.stdout.lower() and "inf" not in result.stdout.lower()
    assert "TTFT p50 / p95    250.0 / 250.0 ms" in result.stdout


def test_stats_with_only_bad_values_exits_2(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [_span("step", tm.AW_STEP_TTFT, math.inf)])
    result = runner.invoke(app, ["stats", str(path), "--json"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"warning: skipped {path}:1: '{tm.AW_STEP_TTFT}' is not a finite number: inf",
        "error: no agentwarm step or prefill spans in 1 file (0 spans read); "
        "write traces with `agentwarm run --trace FILE`",
    ]
