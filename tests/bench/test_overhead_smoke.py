"""Smoke test of ``python -m benchmarks.overhead``: its JSON has every row and every run ended.

No timing is asserted: the figures themselves are the benchmark's business (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.overhead", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.slow
def test_quick_json_has_every_row_and_every_run_completed() -> None:
    done = _run("--quick", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    concurrency = report["sizes"]["concurrency"]
    assert report["steps_per_run"] == 6
    assert report["ratio_goal"] == 1.1
    assert isinstance(report["goals_met"], bool)

    rows = report["rows"]
    assert [r["case"] for r in rows[:3]] == [
        "per step, no LLM call",
        "per step, one ctx.llm call",
        'per step, one ctx.llm call, timing="step_start"',
    ]
    assert [r["runs"] for r in rows[3:]] == concurrency
    per_step_runs = report["sizes"]["runs"] * report["sizes"]["repeats"]
    for row in rows:
        expected = per_step_runs if row["unit"] == "ms" else row["runs"]
        assert row["runs"] == expected
        assert (row["completed_without"], row["completed_with"]) == (expected, expected), row
        assert row.get("timed_out", False) is False
        for key in ("without", "with", "ratio"):
            assert math.isfinite(row[key]) and row[key] > 0, (key, row)
        assert row["over"] == (row["ratio"] > 1.1)

    # LangGraph (test extra) on the same 6-node chain, without and with an LLM call per node.
    assert [r["case"] for r in report["langgraph"]] == ["no LLM call", "one LLM call"]
    for row in report["langgraph"]:
        assert row["completed"] == row["runs"] == per_step_runs
        assert math.isfinite(row["langgraph_ms"]) and row["langgraph_ms"] > 0

    # Memory: one entry per concurrent case and policy, each with every run completed.
    memory = report["memory"]
    assert [(m["runs"], m["policy"]) for m in memory] == [
        (n, policy) for n in concurrency for policy in ("no prefetch", "prefetch")
    ]
    for m in memory:
        assert m["completed"] == m["runs"]
        assert m["peak_rss_mib"] > 0
        assert m["retained_objects"] >= 0
        assert m["pending_tasks_after"] >= 0

    # The prefetching runs did speculate (their outcomes are counted).
    for row in rows[3:]:
        assert sum(row["prefetches_with"].values()) > 0, row


def test_bad_timeout_is_a_usage_error() -> None:
    done = _run("--timeout-s", "0")
    assert done.returncode == 2
    assert "error: --timeout-s must be > 0, got 0.0; pass e.g. --timeout-s 60" in done.stderr
