"""Smoke test of ``benchmarks/kv_tier.py`` (issue 25's restart check and breakeven table) on the
tiny preset. No timing is asserted: the report's structure, and what holds whatever the speed
(the restarted engine's first request is served from disk in whole blocks, token-identical)."""

from __future__ import annotations

import json

import pytest

from benchmarks.kv_tier import GOAL_RESTART_RATIO, main


@pytest.mark.slow
def test_restart_check_and_breakeven_on_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--models", "tiny", "--tokens", "200", "--lengths", "64,130", "--repeat", "1"]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    tiny = report["models"]["tiny"]
    restart = tiny["restart"]
    assert restart["prompt_tokens"] == 200
    assert restart["disk_tokens"] == 192  # three whole blocks of 64; the rest is computed
    assert restart["greedy_identical"] is True
    assert restart["goal"] == GOAL_RESTART_RATIO
    assert restart["met"] == (restart["disk_over_cold"] <= GOAL_RESTART_RATIO)
    b = tiny["breakeven"]
    assert b["kv_bytes_per_token"] == 4 * 2 * 2 * 64 * 4  # layers x K,V x kv heads x dim x fp32
    assert [r["tokens"] for r in b["rows"]] == [64, 130]
    assert b["breakeven_read_bytes_per_s"] == pytest.approx(
        b["kv_bytes_per_token"] * b["prefill_tokens_per_s"]
    )
    assert all(r["read_cold_bytes_per_s"] > 0 for r in b["rows"])
    assert main(args) == 0
    table = capsys.readouterr().out
    assert table.startswith("| model | KV bytes/token |") and "| tiny | 4,096 |" in table
