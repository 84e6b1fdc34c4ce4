"""Smoke test of ``benchmarks/warmup_bench.py`` (the restart scenario of issue 14) on the trimmed
tau-airline excerpt (3 conversations: 2 train, 1 test) and the tiny preset.

No timing is asserted (the machine may be loaded): the report's structure, and what holds
whatever the speed: cold's first request finds nothing cached, the warmed mode's first request
finds exactly what the plan holds of it, and warming raises the hit ratio.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from agentwarm.engines.fake import FakeEngine
from agentwarm.warmup.render import load_chat_renderer
from benchmarks.warmup_bench import GOALS, MODES, main
from benchmarks.warmup_workload import Request, airline, distinct_tokens, interleave, replay

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tau_airline" / "excerpt"
REQUESTS, REWARM_EVERY = 3, 2


def _run(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    args = [
        "--profile", "quick",
        "--file", str(FIXTURE / "conversations.jsonl"),
        "--requests", str(REQUESTS),
        "--rewarm-every", str(REWARM_EVERY),
        "--top-k", "1",
        "--json",
    ]  # fmt: skip
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


@pytest.mark.slow
def test_restart_scenario_on_the_excerpt(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTWARM_NO_PROGRESS", "1")
    report = _run(capsys)
    assert (report["model"], report["tokenizer"], report["chat_template"]) == (
        "tiny",
        "QwenTokenizer",
        "qwen2.5",
    )
    assert (report["requests"], report["rewarm_every"], report["modes"]) == (
        REQUESTS,
        REWARM_EVERY,
        list(MODES),
    )
    assert set(report["workloads"]) == {"airline"}
    w = report["workloads"]["airline"]

    # The workload, independently: the excerpt's split and the first request's head.
    workload = airline(FIXTURE / "conversations.jsonl")
    replayed = interleave(workload.test, REQUESTS)
    assert (w["train_conversations"], w["test_conversations"], w["requests"]) == (
        len(workload.train),
        len(workload.test),
        len(replayed),
    )
    assert w["train_requests"] == sum(len(c) for c in workload.train)
    renderer = load_chat_renderer("tiny")
    first = replayed[0]
    head = renderer.prefix_ids(first.messages[:1], first.tools)  # the policy and the tools
    assert len(w["plan"]) == 1 and w["plan"][0]["share"] == 1.0
    assert w["plan"][0]["tokens"] == len(head)
    assert w["first_request"]["plan_prefix_tokens"] == len(head)
    assert (
        len(head) <= w["first_request"]["plan_match_tokens"] < w["first_request"]["prompt_tokens"]
    )

    modes = w["modes"]
    assert list(modes) == list(MODES)
    for mode, m in modes.items():
        assert len(m["samples"]) == REQUESTS, mode
        assert [s["prompt_tokens"] for s in m["samples"]] == [
            s["prompt_tokens"] for s in modes["cold"]["samples"]
        ]
        assert m["prompt_tokens"] == sum(s["prompt_tokens"] for s in m["samples"])
        assert m["cached_tokens"] == sum(s["cached_tokens"] for s in m["samples"])
        assert all(_finite(m[k]) and m[k] > 0 for k in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s"))
        assert m["ttft_p50_s"] <= m["ttft_p95_s"] <= m["ttft_p99_s"]
        assert (m["warmup"] is None) == (mode in ("cold", "disk_restart"))
        assert m["rewarms"] == (
            len(range(REWARM_EVERY, REQUESTS, REWARM_EVERY)) if mode.startswith("keep") else 0
        )
        small = "_small" in mode
        assert (m["capacity_tokens"] == w["small_cache_tokens"]) == small
    longest = max(s["prompt_tokens"] for s in modes["cold"]["samples"])
    assert w["small_cache_tokens"] == max(longest, 2 * len(head), int(w["distinct_tokens"] * 0.5))
    assert w["small_cache_fits_all"] == (w["small_cache_tokens"] >= w["distinct_tokens"])

    # Behaviour that holds whatever the speed.
    assert modes["cold"]["samples"][0]["cached_tokens"] == 0
    warm = modes["warm"]
    assert warm["warmup"]["prefixes"] == len(w["plan"]) and warm["warmup"]["skipped"] == 0
    assert warm["samples"][0]["cached_tokens"] == w["first_request"]["plan_match_tokens"]
    assert warm["hit_ratio"] > modes["cold"]["hit_ratio"]
    assert modes["keepwarm_unbounded"]["hit_ratio"] >= warm["hit_ratio"]

    # The disk tier (issue 25): only the disk modes read from disk; the restarted engine's first
    # request loads the head the traffic before the restart shared with it (the policy and the
    # tools), in whole blocks; the warm-up after the restart loads instead of computing.
    for mode, m in modes.items():
        if "disk" not in mode:
            assert m["disk_hit_tokens"] == 0, mode
    assert modes["disk_restart"]["disk_hit_tokens"] > 0
    assert modes["disk_warm"]["disk_hit_tokens"] > 0
    restart = modes["disk_restart"]
    assert restart["spilled_bytes_before_restart"] > 0
    assert restart["samples"][0]["cached_tokens"] >= len(head) // 64 * 64
    assert modes["disk_warm"]["warmup"]["computed_tokens"] < warm["warmup"]["computed_tokens"]
    assert modes["keepwarm_small_disk"]["hit_ratio"] >= modes["keepwarm_small"]["hit_ratio"]

    # Ratios and goals are reported, met or not.
    assert set(w["goals"]) == set(GOALS)
    for key, goal in w["goals"].items():
        assert goal["goal"] == GOALS[key] and _finite(goal["value"])
        assert isinstance(goal["met"], bool)
    assert w["hit_gap_points"] == pytest.approx(
        (modes["keepwarm_unbounded"]["hit_ratio"] - modes["keepwarm_small"]["hit_ratio"]) * 100
    )


def test_interleave_is_round_robin_and_distinct_tokens_counts_a_prefix_tree() -> None:
    def conv(cid: str, turns: int) -> tuple[Request, ...]:
        return tuple(Request(cid, k, ({"role": "user", "content": cid},), ()) for k in range(turns))

    a, b, c = conv("a", 3), conv("b", 1), conv("c", 2)
    order = [(r.conversation, r.turn) for r in interleave([a, b, c])]
    assert order == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("c", 1), ("a", 2)]
    assert [(r.conversation, r.turn) for r in interleave([a, b, c], 4)] == order[:4]
    assert distinct_tokens([[1, 2, 3], [1, 2, 4], [1, 2], [5]]) == 5
    assert distinct_tokens([]) == 0


async def test_replay_sends_a_conversations_turn_after_its_previous_one() -> None:
    # Four requests of two conversations, all four slots free: a conversation's second turn
    # still waits for its first, so it finds the first turn's whole prompt cached.
    a0, b0 = list(range(1, 301)), list(range(1001, 1301))
    a1, b1 = [*a0, *range(301, 341)], [*b0, *range(1301, 1341)]
    before: list[int] = []

    async def hook(i: int) -> None:
        before.append(i)

    async with FakeEngine(seconds_per_token=1e-4) as engine:
        samples = await replay(
            engine, [a0, b0, a1, b1], ["a", "b", "a", "b"], concurrency=4, before=hook
        )
    assert before == [0, 1, 2, 3]
    assert [s["prompt_tokens"] for s in samples] == [300, 300, 340, 340]
    assert [s["cached_tokens"] for s in samples] == [0, 0, 300, 300]
    assert all(s["ttft_s"] > 0 for s in samples)
