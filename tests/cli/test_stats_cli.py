"""``agentwarm stats`` through the CLI runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwarm import telemetry as tm
from agentwarm.cli import app
from agentwarm.runtime import PrefetchKind, StepOutcome
from agentwarm.stats import HINT_KEYS, SUMMARY_KEYS

runner = CliRunner()


def _step(run: str, index: int, frm: str, node: str, hit: bool, ttft: float) -> dict[str, Any]:
    attrs: dict[str, Any] = tm.step_attributes(
        workflow="wf",
        run_id=run,
        index=index,
        from_node=frm,
        node=node,
        prefetched=hit,
        outcome=StepOutcome.HIT if hit else StepOutcome.MISS,
    )
    attrs.update(tm.step_result_attributes(ttft_s=ttft, prompt_tokens=80, cached_tokens=40))
    return {"traceId": run * 32, "spanId": f"{run}{index:015x}", "name": f"invoke_agent {node}",
            "attributes": attrs}  # fmt: skip


def _prefill(run: str, n: int, target: str, outcome: str, computed: int) -> dict[str, Any]:
    attrs: dict[str, Any] = tm.prefill_attributes(
        workflow="wf",
        run_id=run,
        source="a",
        target=target,
        kind=PrefetchKind.SPECULATIVE,
        tokens=50,
    )
    attrs.update({tm.AW_PREFILL_OUTCOME: outcome, tm.AW_PREFILL_COMPUTED_TOKENS: computed})
    return {"traceId": run * 32, "spanId": f"{run}f{n:014x}", "name": "agentwarm.prefill",
            "attributes": attrs}  # fmt: skip


def _trace(path: Path) -> Path:
    records = [
        _step("1", 0, "__start__", "a", False, 0.30),
        _prefill("1", 0, "b", "hit", 40),
        _prefill("1", 1, "c", "cancelled", 15),
        _step("1", 1, "a", "b", True, 0.05),
        _step("2", 0, "__start__", "a", False, 0.32),
        _prefill("2", 0, "b", "wasted", 40),
        _step("2", 1, "a", "c", False, 0.28),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_stats_json(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    result = runner.invoke(app, ["stats", str(trace), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["branch_hit_rate"] == 0.5
    assert out["acceptance_ratio"] == 1 / 3
    assert (out["steps"], out["prefetches_issued"], out["prefetch_hits"]) == (4, 3, 1)
    assert out["wasted_tokens"] == 55
    assert out["ttft_saved_s"] is None  # b was never reached without a prefetch: no baseline
    assert out["skipped_lines"] == 0
    edges = {(e["from"], e["to"]): e for e in out["edges"]}
    assert edges[("a", "b")] == {
        "workflow": "wf",
        "from": "a",
        "to": "b",
        "taken": 1,
        "prefetched": 2,
        "hits": 1,
        "hit_rate": 1.0,
        "wasted_tokens": 40,
        "ttft_hit_mean_s": 0.05,
        "ttft_miss_mean_s": None,
    }
    assert edges[("a", "c")]["hit_rate"] == 0.0
    assert edges[("a", "c")]["wasted_tokens"] == 15


def test_stats_table(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    result = runner.invoke(app, ["stats", str(trace)], env={"COLUMNS": "140"})
    assert result.exit_code == 0, result.output
    assert "wf: 2 runs · 4 steps · 1 file" in result.stdout.splitlines()
    assert "a → b" in result.stdout and "__start__ → a" in result.stdout
    assert "branch hit rate   50.0%  (1/2 steps after a run's first)" in result.stdout
    assert "acceptance ratio  33.3%  (1/3 speculative prefills used)" in result.stdout


def test_stats_reports_bad_lines_and_keeps_going(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    with trace.open("a") as fh:
        fh.write("garbage\n{}\n")
    result = runner.invoke(app, ["stats", str(trace), "--json"])
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        f"warning: skipped {trace}:8: not JSON (Expecting value at column 1)",
        f"warning: skipped {trace}:9: not a span record (no 'name')",
    ]
    assert json.loads(result.stdout)["skipped_lines"] == 2


def test_stats_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["stats", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'missing.jsonl'}: no such trace file\n"
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_stats_empty_file_is_a_usage_error(tmp_path: Path) -> None:
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    for extra in ([], ["--json"]):
        result = runner.invoke(app, ["stats", str(empty), *extra])
        assert result.exit_code == 2
        assert result.stdout == ""
        assert result.stderr.startswith("error: no agentwarm step or prefill spans in 1 file")


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_bot.py"


@pytest.mark.parametrize("engine", ["fake", pytest.param("local", marks=pytest.mark.slow)])
def test_run_then_stats_agree(tmp_path: Path, engine: str) -> None:
    trace = tmp_path / "t.jsonl"
    run = runner.invoke(
        app,
        ["run", str(EXAMPLE), "--runs", "5", "--engine", engine, "--trace", str(trace),
         "--json", "--state-dir", str(tmp_path / "state")],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    ran = json.loads(run.stdout)
    result = runner.invoke(app, ["stats", str(trace), "--json"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["skipped_lines"] == 0 and got["runs"] == 5
    # One key set (agentwarm.stats.Summary and the mid-decode hint figures) in both, and the
    # same figures under every key.
    run_only = {"paths", "per_run_branch_hit_rate", "failed_runs"}
    stats_only = {"edges", "files", "skipped_lines"}
    keys = (*SUMMARY_KEYS, *HINT_KEYS)
    assert set(ran) - run_only == set(got) - stats_only == set(keys)
    assert {k: got[k] for k in keys} == {k: ran[k] for k in keys}
    assert ran["workflow"] == "support_bot"
    assert ran["steps"] > 5 and ran["prefetches_issued"] > 0
    assert ran["ttft_p50_s"] is not None and ran["ttft_p95_s"] >= ran["ttft_p50_s"]
