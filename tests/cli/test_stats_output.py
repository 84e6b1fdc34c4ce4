"""What ``agentwarm stats`` and ``agentwarm graph`` print, through the CLI runner: n/a where a
figure has no basis, TTFT percentiles, one JSON key set, exit 2 without spans, plurals."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwarm import telemetry as tm
from agentwarm.cli import app
from agentwarm.runtime import PrefetchKind, StepOutcome
from agentwarm.stats import HINT_KEYS, SUMMARY_KEYS

runner = CliRunner()

STATS_ONLY = {"edges", "files", "skipped_lines", *HINT_KEYS}


def _step(
    run: str, index: int, frm: str, node: str, hit: bool, ttft: float, *, wf: str = "wf"
) -> dict[str, Any]:
    attrs: dict[str, Any] = tm.step_attributes(
        workflow=wf, run_id=run, index=index, from_node=frm, node=node, prefetched=hit,
        outcome=StepOutcome.HIT if hit else StepOutcome.MISS,
    )  # fmt: skip
    attrs.update(tm.step_result_attributes(ttft_s=ttft, prompt_tokens=80, cached_tokens=40))
    return {"traceId": (wf + run).ljust(32, "0"), "spanId": f"{run}{index:015x}",
            "name": f"invoke_agent {node}", "attributes": attrs}  # fmt: skip


def _prefill(run: str, n: int, target: str, outcome: str) -> dict[str, Any]:
    attrs: dict[str, Any] = tm.prefill_attributes(
        workflow="wf",
        run_id=run,
        source="a",
        target=target,
        kind=PrefetchKind.SPECULATIVE,
        tokens=50,
    )
    attrs.update({tm.AW_PREFILL_OUTCOME: outcome, tm.AW_PREFILL_COMPUTED_TOKENS: 40})
    return {"traceId": ("wf" + run).ljust(32, "0"), "spanId": f"{run}f{n:014x}",
            "name": "agentwarm.prefill", "attributes": attrs}  # fmt: skip


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _stats(*args: str) -> Any:
    return runner.invoke(app, ["stats", *args], env={"COLUMNS": "160"})


def _no_baseline_trace(tmp_path: Path) -> Path:
    """Two runs a → b, b prefetched and hit both times: b never ran without a prefetch."""
    return _write(
        tmp_path / "t.jsonl",
        [
            _step("1", 0, "__start__", "a", False, 0.30),
            _prefill("1", 0, "b", "hit"),
            _step("1", 1, "a", "b", True, 0.05),
            _step("2", 0, "__start__", "a", False, 0.32),
            _prefill("2", 0, "b", "hit"),
            _step("2", 1, "a", "b", True, 0.07),
        ],
    )


def test_ttft_saved_without_a_baseline_reads_na(tmp_path: Path) -> None:
    trace = _no_baseline_trace(tmp_path)
    table = _stats(str(trace))
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert "TTFT saved (est.) n/a  (no hit node also ran without a prefetch: no baseline)" in lines
    assert "0.0 ms" not in table.stdout
    out = json.loads(_stats(str(trace), "--json").stdout)
    assert out["ttft_saved_s"] is None


def test_ttft_saved_with_a_baseline_is_a_number(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl",
        [
            _step("1", 0, "__start__", "a", False, 0.30),
            _step("1", 1, "a", "b", False, 0.25),
            _step("2", 0, "__start__", "a", False, 0.30),
            _step("2", 1, "a", "b", True, 0.05),
        ],
    )
    table = _stats(str(trace))
    assert table.exit_code == 0, table.output
    assert any(
        line.startswith("TTFT saved (est.) 200.0 ms  (Σ") for line in table.stdout.splitlines()
    )
    assert json.loads(_stats(str(trace), "--json").stdout)["ttft_saved_s"] == pytest.approx(0.2)


def test_ttft_percentiles_in_table_and_json(tmp_path: Path) -> None:
    # TTFTs 0.30, 0.05, 0.32, 0.07 → sorted 0.05 0.07 0.30 0.32: p50 = 0.185,
    # p95 (inclusive) = 0.30 + 0.85 * 0.02 = 0.317.
    trace = _no_baseline_trace(tmp_path)
    out = json.loads(_stats(str(trace), "--json").stdout)
    assert out["ttft_p50_s"] == pytest.approx(0.185)
    assert out["ttft_p95_s"] == pytest.approx(0.317)
    assert out["ttft_mean_s"] == pytest.approx(0.185)
    assert "TTFT p50 / p95    185.0 / 317.0 ms" in _stats(str(trace)).stdout.splitlines()


def test_json_keys_are_the_summary_keys(tmp_path: Path) -> None:
    out = json.loads(_stats(str(_no_baseline_trace(tmp_path)), "--json").stdout)
    assert list(out)[: len(SUMMARY_KEYS)] == list(SUMMARY_KEYS)
    assert set(out) == set(SUMMARY_KEYS) | STATS_ONLY
    assert out["workflow"] == "wf"  # the key `agentwarm run --json` uses; no "workflows"
    assert "workflows" not in out
    assert (out["runs"], out["steps"], out["branch_steps"], out["branch_hits"]) == (2, 4, 2, 2)


def test_json_workflow_is_null_when_traces_mix_workflows(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl",
        [
            _step("1", 0, "__start__", "a", False, 0.3, wf="one"),
            _step("1", 0, "__start__", "a", False, 0.3, wf="two"),
        ],
    )
    out = json.loads(_stats(str(trace), "--json").stdout)
    assert out["workflow"] is None
    assert sorted({e["workflow"] for e in out["edges"]}) == ["one", "two"]
    only = json.loads(_stats(str(trace), "--json", "--workflow", "two").stdout)
    assert (only["workflow"], only["runs"]) == ("two", 1)


@pytest.mark.parametrize("as_json", [False, True])
def test_no_spans_is_exit_2_with_one_error_line(tmp_path: Path, as_json: bool) -> None:
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    result = _stats(str(empty), *(["--json"] if as_json else []))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: no agentwarm step or prefill spans in 1 file (0 spans read); "
        "write traces with `agentwarm run --trace FILE`\n"
    )


def test_only_foreign_spans_is_exit_2(tmp_path: Path) -> None:
    other = _write(
        tmp_path / "o.jsonl",
        [{"traceId": "f" * 32, "spanId": "1" * 16, "name": "GET /", "attributes": {}}],
    )
    result = _stats(str(other), str(other))
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: no agentwarm step or prefill spans in 2 files (1 span read); "
    )


def test_unknown_workflow_is_exit_2_naming_the_known_ones(tmp_path: Path) -> None:
    result = _stats(str(_no_baseline_trace(tmp_path)), "--workflow", "nope")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: no spans of workflow 'nope' in 1 file (6 spans read); "
        "the traces hold 'wf': fix --workflow\n"
    )


def test_singular_counts_and_no_prefetch_figures(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.jsonl", [_step("1", 0, "__start__", "a", False, 0.3)])
    result = _stats(str(trace))
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0] == "wf: 1 run · 1 step · 1 file"
    assert "branch hit rate   —  (no step after a run's first)" in lines
    assert "acceptance ratio  —  (no speculative prefills)" in lines
    assert "TTFT saved (est.) 0.0 ms  (Σ over hits: node's mean TTFT when not prefetched − " in (
        result.stdout
    )


def test_plural_counts(tmp_path: Path) -> None:
    result = _stats(str(_no_baseline_trace(tmp_path)))
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0] == "wf: 2 runs · 4 steps · 1 file"
    assert "branch hit rate   100.0%  (2/2 steps after a run's first)" in lines


FLOW = """
from agentwarm import node, END

@node(entry=True, next=["b", END])
async def a(ctx):
    return "b"

@node(next=[END])
async def b(ctx):
    return END
"""


def _graph_rows(stdout: str) -> dict[tuple[str, str], list[str]]:
    rows = [line.split("│")[1:-1] for line in stdout.splitlines() if line.startswith("│")]
    return {(r[0].strip(), r[1].strip()): [c.strip() for c in r[3:]] for r in rows}


def test_graph_text_without_a_trace_shows_dashes_not_zeros(tmp_path: Path) -> None:
    flow = tmp_path / "wf.py"
    flow.write_text(textwrap.dedent(FLOW))
    args = ["graph", str(flow), "--state-dir", str(tmp_path / "s"), "--format", "text"]
    result = runner.invoke(app, args, env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    rows = _graph_rows(result.stdout)
    assert rows[("a", "b")] == ["—", "—", "—", "—"]
    assert rows[("START", "a")] == ["—", "—", "—", "—"]

    trace = _write(
        tmp_path / "t.jsonl",
        [_step("1", 0, "__start__", "a", False, 0.3), _step("1", 1, "a", "b", True, 0.1)],
    )
    result = runner.invoke(app, [*args, "--trace", str(trace)], env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].rstrip() == (
        "wf: 3 nodes, entry a, hit rates from 1 traced run"
    )
    rows = _graph_rows(result.stdout)
    assert rows[("a", "b")] == ["1", "0", "1", "100%"]  # observed: counts, even zero
    assert rows[("a", "END")] == ["0", "0", "0", "—"]


# --- edges into END, counted from real runs -----------------------------------------------------

# Input "boom": b fails; an input starting with "e": a → END; "fan": a → b and c at once, both
# → END; anything else a → b → END.
END_FLOW = """
from agentwarm import END, node

INPUTS = ["ok"]


@node(entry=True, next=["b", "c", END])
async def a(ctx):
    await ctx.llm(ctx.input, max_tokens=2)
    if ctx.input == "fan":
        return ["b", "c"]
    return END if ctx.input.startswith("e") else "b"


@node(next=[END])
async def b(ctx):
    if ctx.input == "boom":
        raise ValueError("bad input")
    await ctx.llm("b", max_tokens=2)
    return END


@node(next=[END])
async def c(ctx):
    await ctx.llm("c", max_tokens=2)
    return END
"""

RUN_ENV = {"COLUMNS": "160", "AGENTWARM_NO_PROGRESS": "1"}


def _traced_runs(tmp_path: Path, *inputs: str) -> tuple[Path, Path]:
    flow = tmp_path / "endflow.py"
    flow.write_text(textwrap.dedent(END_FLOW))
    lines = tmp_path / "inputs.jsonl"
    lines.write_text("".join(json.dumps(x) + "\n" for x in inputs))
    trace = tmp_path / "t.jsonl"
    args = ["run", str(flow), "--inputs", str(lines), "--engine", "fake", "--trace", str(trace)]
    result = runner.invoke(app, [*args, "--state-dir", str(tmp_path / "s")], env=RUN_ENV)
    assert result.exit_code == (1 if "boom" in inputs else 0), result.output
    return flow, trace


def _edges(trace: Path) -> dict[tuple[str, str], dict[str, Any]]:
    result = _stats(str(trace), "--json")
    assert result.exit_code == 0, result.output
    return {(e["from"], e["to"]): e for e in json.loads(result.stdout)["edges"]}


def test_completed_runs_end_on_an_end_edge_failed_ones_do_not(tmp_path: Path) -> None:
    _, trace = _traced_runs(tmp_path, "ok", "e1", "ok2", "boom", "e2", "ok3")
    edges = _edges(trace)
    # Completed: a → b → END three times, a → END twice; "boom" failed in b: no END edge.
    assert edges[("a", "b")]["taken"] == 4
    b_end, a_end = edges[("b", "__end__")], edges[("a", "__end__")]
    assert {k: b_end[k] for k in ("taken", "prefetched", "hits", "hit_rate")} == {
        "taken": 3,
        "prefetched": 0,
        "hits": 0,
        "hit_rate": None,
    }
    assert (a_end["taken"], a_end["prefetched"], a_end["hits"], a_end["hit_rate"]) == (
        2,
        0,
        0,
        None,
    )
    assert (b_end["wasted_tokens"], b_end["ttft_hit_mean_s"], b_end["ttft_miss_mean_s"]) == (
        0,
        None,
        None,
    )
    assert ("c", "__end__") not in edges
    table = _stats(str(trace))
    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if "b → __end__" in line)
    assert [c.strip() for c in row.split("│")[2:6]] == ["3", "0", "0", "—"]


def test_both_branches_of_a_fan_out_end_the_run(tmp_path: Path) -> None:
    _, trace = _traced_runs(tmp_path, "fan", "fan")
    edges = _edges(trace)
    assert (edges[("b", "__end__")]["taken"], edges[("c", "__end__")]["taken"]) == (2, 2)
    assert ("a", "__end__") not in edges


def test_graph_counts_runs_ending_at_end(tmp_path: Path) -> None:
    flow, trace = _traced_runs(tmp_path, "ok", "e1", "boom", "ok2")
    args = ["graph", str(flow), "--state-dir", str(tmp_path / "s"), "--format", "text"]
    result = runner.invoke(app, [*args, "--trace", str(trace)], env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    rows = _graph_rows(result.stdout)
    assert rows[("b", "END")] == ["2", "0", "0", "—"]
    assert rows[("a", "END")] == ["1", "0", "0", "—"]
    assert rows[("c", "END")] == ["0", "0", "0", "—"]
    assert rows[("START", "a")][0] == "4"


def test_a_trace_without_workflow_spans_has_no_end_edges(tmp_path: Path) -> None:
    # Step spans alone do not say whether a run completed: nothing is guessed.
    trace = _write(
        tmp_path / "t.jsonl",
        [_step("1", 0, "__start__", "a", False, 0.3), _step("1", 1, "a", "b", False, 0.1)],
    )
    assert not [k for k in _edges(trace) if k[1] == "__end__"]
