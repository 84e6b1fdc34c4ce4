"""Smoke test of ``python -m benchmarks.gateway_bench``: the quick profile on the fake engine runs
both layouts straight, straight with Dynamo's next-turn warm (``next_turn``) and through the
gateway, and the overhead mode reports its figures.

No timing goal is asserted (the figures are the benchmark's business, and the machine may be
loaded): only that every figure is there, sane, and counts what it should.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentwarm.bench.conversations import load_conversations

ROOT = Path(__file__).resolve().parents[2]
CONVERSATIONS = ROOT.parent / "shared" / "data" / "tau-airline" / "conversations.jsonl"
# The quick profile: 3 warm-up conversations, then 2 measured, at most 5 assistant turns each.
WARMUP, MEASURED, MAX_STEPS, OVERHEAD_REQUESTS = 3, 2, 5, 40

pytestmark = pytest.mark.skipif(
    not CONVERSATIONS.is_file(), reason=f"{CONVERSATIONS} is not there (shared data)"
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gateway_bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _measured_requests() -> int:
    """One request per assistant turn of the measured conversations, counted from the file."""
    convs = load_conversations(CONVERSATIONS)[WARMUP : WARMUP + MEASURED]
    turns = [sum(1 for m in c.messages if m["role"] == "assistant") for c in convs]
    return sum(min(n, MAX_STEPS) for n in turns)


def _check_overhead(overhead: dict[str, Any]) -> None:
    assert overhead["requests"] == OVERHEAD_REQUESTS
    assert overhead["goal_ms"] == 2.0
    assert _finite(overhead["direct"]["p50_ms"]) and overhead["direct"]["p50_ms"] > 0
    for kind in ("nohooks", "learner"):
        figures = overhead[kind]
        for key in ("p50_ms", "p95_ms", "added_p50_ms", "added_p95_ms"):
            assert _finite(figures[key]), (kind, key, figures)
        assert 0 < figures["overhead_p50_ms"] <= figures["overhead_p95_ms"], (kind, figures)
        assert figures["p50_ms"] <= figures["p95_ms"]
    assert isinstance(overhead["goal_met"], bool) and isinstance(overhead["hop_goal_met"], bool)


@pytest.mark.slow
def test_quick_profile_measures_both_layouts_straight_and_through_the_gateway() -> None:
    done = _run("--quick", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["profile"], report["engine"], report["max_tokens"]) == ("quick", "fake", 8)
    assert set(report["layouts"]) == {"subagent", "shared"}
    requests = _measured_requests()
    for layout, figures in report["layouts"].items():
        assert figures["layout"] == layout
        assert (figures["warmup_conversations"], figures["measured_conversations"]) == (
            WARMUP,
            MEASURED,
        )
        direct, gateway, next_turn = figures["direct"], figures["gateway"], figures["next_turn"]
        for mode in (direct, next_turn, gateway):
            assert mode["requests"] == requests
            assert 0 < mode["ttft_p50_s"] <= mode["ttft_p95_s"]
            assert _finite(mode["ttft_mean_s"]) and mode["ttft_mean_s"] > 0
            assert mode["prompt_tokens"] > 0 and 0 <= mode["cached_fraction"] <= 1
        # Straight to the upstream nothing is prefetched.
        assert (direct["prefetches_issued"], direct["prefetch_hits"], direct["wasted_tokens"]) == (
            0,
            0,
            0,
        )
        assert direct["branch_hit_rate"] is None and direct["acceptance_ratio"] is None
        assert direct["gateway_overhead_p50_ms"] is None
        # Through the gateway the learner prefetched; the hits it counts are of measured steps.
        assert gateway["prefetches_issued"] > 0
        assert 0 <= gateway["prefetch_hits"] <= gateway["prefetches_issued"]
        assert 0 <= gateway["branch_hits"] <= gateway["branch_steps"] <= requests
        assert 0 <= gateway["branch_hit_rate"] <= 1 and 0 <= gateway["acceptance_ratio"] <= 1
        assert gateway["wasted_tokens"] >= 0
        assert (
            _finite(gateway["gateway_overhead_p50_ms"]) and gateway["gateway_overhead_p50_ms"] > 0
        )
        for q in ("mean", "p50", "p95"):
            assert figures["ttft_ratio"][q] == pytest.approx(
                gateway[f"ttft_{q}_s"] / direct[f"ttft_{q}_s"]
            )
            assert figures["ttft_ratio_vs_next_turn"][q] == pytest.approx(
                gateway[f"ttft_{q}_s"] / next_turn[f"ttft_{q}_s"]
            )
        # next_turn (Dynamo's speculative prefill): one max_tokens=1 warm after each reply.
        assert next_turn["next_turn_warms"] == requests and next_turn["next_turn_failed"] == 0
        assert next_turn["next_turn_computed_tokens"] > 0
        assert next_turn["prefetches_issued"] == 0 and next_turn["branch_hit_rate"] is None
        assert figures["goal_ratio"] == {"subagent": 0.6, "shared": 1.02}[layout]
        assert figures["goal_met"] == (figures["ttft_ratio"]["mean"] <= figures["goal_ratio"])
    subagent = report["layouts"]["subagent"]["gateway"]
    assert subagent["prefetch_hits"] > 0 and subagent["branch_hits"] > 0
    # What was prefetched for a hit is what the real request began with (token-exact).
    assert subagent["hit_cached_fraction"] > 0.9
    _check_overhead(report["overhead"])


@pytest.mark.slow
def test_overhead_mode_reports_a_finite_p50() -> None:
    done = _run("--quick", "--overhead", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["layouts"] == {}
    _check_overhead(report["overhead"])


def test_more_conversations_than_the_file_holds_is_refused_naming_the_options() -> None:
    done = _run("--quick", "--warmup", "90", "--conversations", "20", "--json")
    assert done.returncode == 2
    assert "--warmup 90 plus --conversations 20" in done.stderr
    assert "ask for fewer" in done.stderr
    assert done.stdout == ""
