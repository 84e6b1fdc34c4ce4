"""Rates with nothing behind them read n/a (``—`` in text, ``null`` in JSON), never 0%, in
``agentwarm run`` (runs table, summary line, JSON), ``agentwarm stats`` (edges table, summary,
JSON) and ``agentwarm graph``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from agentwarm._fmt import NA
from agentwarm.cli import app

runner = CliRunner()
ENV = {"COLUMNS": "200", "AGENTWARM_NO_PROGRESS": "1"}

ONE_NODE = """
from agentwarm import END, node

INPUTS = ["hi"]


@node(entry=True, next=[END])
async def a(ctx):
    await ctx.llm(ctx.input, max_tokens=2)
    return END
"""

# a → b → END; b fails on the input "boom".
TWO_NODES = """
from agentwarm import END, node

INPUTS = ["hi"]


@node(entry=True, next=["b"])
async def a(ctx):
    await ctx.llm(ctx.input, max_tokens=2)
    return "b"


@node(next=[END])
async def b(ctx):
    if ctx.input == "boom":
        raise ValueError("bad input")
    await ctx.llm("b", max_tokens=2)
    return END
"""

NA_KEYS = ("branch_hit_rate", "acceptance_ratio")


def _flow(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flow.py"
    path.write_text(textwrap.dedent(text))
    return path


def _run(tmp_path: Path, *args: str) -> Result:
    state = ["--state-dir", str(tmp_path / "state")]
    return runner.invoke(app, ["run", *args, "--engine", "fake", *state], env=ENV)


def _summary_line(stdout: str) -> str:
    """The summary line (it may wrap: everything after the last table)."""
    tail = stdout[stdout.rindex("path of run") :] if "path of run" in stdout else stdout
    lines = tail.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("flow: "))
    return " ".join(line.strip() for line in lines[start:])


def _na(out: dict[str, Any]) -> dict[str, Any]:
    return {k: out[k] for k in NA_KEYS}


def test_one_node_run_has_no_branch_hit_rate_nor_acceptance(tmp_path: Path) -> None:
    flow = _flow(tmp_path, ONE_NODE)
    text = _run(tmp_path, str(flow))
    assert text.exit_code == 0, text.output
    line = _summary_line(text.stdout)
    assert f"branch hit rate {NA} · acceptance {NA} (0/0)" in line
    assert "0%" not in line.split("cached")[0]
    out = json.loads(_run(tmp_path, str(flow), "--json").stdout)
    assert (out["branch_steps"], out["prefetches_issued"]) == (0, 0)
    assert _na(out) == {"branch_hit_rate": None, "acceptance_ratio": None}
    assert out["per_run_branch_hit_rate"] == [None]


def test_runs_table_shows_na_for_a_run_without_a_branch(tmp_path: Path) -> None:
    result = _run(tmp_path, str(_flow(tmp_path, ONE_NODE)))
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("│   1 │"))
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[:4] == ["1", "1", NA, NA]  # run, steps, branch hits, hit rate so far


def test_every_run_failed_reads_na_not_zero(tmp_path: Path) -> None:
    flow = _flow(tmp_path, TWO_NODES)
    result = _run(tmp_path, str(flow), "--input", "boom")
    assert result.exit_code == 1, result.output
    line = _summary_line(result.stdout)
    assert line.startswith(
        f"flow: 0 runs of 1 completed, 1 failed, 0 steps · branch hit rate {NA} · "
        f"acceptance {NA} (0/0) · cached 0/0 tok ({NA}) · "
    ), line
    out = json.loads(_run(tmp_path, str(flow), "--input", "boom", "--json").stdout)
    assert (out["runs"], out["steps"]) == (0, 0)
    assert _na(out) == {"branch_hit_rate": None, "acceptance_ratio": None}


def test_no_prefetch_run_stats_and_graph_read_na(tmp_path: Path) -> None:
    flow = _flow(tmp_path, TWO_NODES)
    trace = tmp_path / "t.jsonl"
    runs = ["--runs", "3", "--no-prefetch", "--trace", str(trace)]
    result = _run(tmp_path, str(flow), *runs, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["branch_steps"], out["branch_hits"], out["prefetches_issued"]) == (3, 0, 0)
    assert _na(out) == {"branch_hit_rate": None, "acceptance_ratio": None}

    stats = runner.invoke(app, ["stats", str(trace), "--json"], env=ENV)
    assert stats.exit_code == 0, stats.output
    st = json.loads(stats.stdout)
    assert _na(st) == {"branch_hit_rate": None, "acceptance_ratio": None}
    ab = next(e for e in st["edges"] if (e["from"], e["to"]) == ("a", "b"))
    assert (ab["taken"], ab["prefetched"], ab["hits"], ab["hit_rate"]) == (3, 0, 0, None)

    table = runner.invoke(app, ["stats", str(trace)], env=ENV)
    assert table.exit_code == 0, table.output
    lines = [line.rstrip() for line in table.stdout.splitlines()]
    assert f"branch hit rate   {NA}  (nothing prefetched)" in lines
    assert f"acceptance ratio  {NA}  (no speculative prefills)" in lines
    row = next(line for line in lines if "a → b" in line)
    assert [c.strip() for c in row.split("│")[2:6]] == ["3", "0", "0", NA]
    assert "0.0%" not in table.stdout

    args = ["graph", str(flow), "--state-dir", str(tmp_path / "state"), "--format", "text"]
    graph = runner.invoke(app, [*args, "--trace", str(trace)], env=ENV)
    assert graph.exit_code == 0, graph.output
    row = next(line for line in graph.stdout.splitlines() if line.startswith("│ a "))
    assert [c.strip() for c in row.split("│")[4:-1]] == ["3", "0", "0", NA]


def test_a_prefetching_run_still_reports_its_rates(tmp_path: Path) -> None:
    # The counterpart: with prefetching on, the second and third runs' a → b is predicted
    # (learned from the first), so the rates are numbers, not n/a.
    flow = _flow(tmp_path, TWO_NODES)
    out = json.loads(_run(tmp_path, str(flow), "--runs", "3", "--json").stdout)
    assert out["prefetches_issued"] > 0
    assert out["branch_hit_rate"] == out["branch_hits"] / out["branch_steps"]
    assert out["acceptance_ratio"] == out["prefetch_hits"] / out["prefetches_issued"]
