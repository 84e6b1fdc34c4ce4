"""KeepWarm: the static warm-up gating readiness, keep-warm rounds re-warming an evicted prefix
(and renewing its pin) on the embedded engine, re-warms when the live hit rate of a window
drops below ``rewarm_below`` (exact rates, the warm-ups' own tokens taken out), cancellation,
and the ``--warmup`` options' checks. The loop's waits are driven by the tests (no sleeps); the
cache's clock is a fake one."""

from __future__ import annotations

import asyncio
import random
from functools import cache
from pathlib import Path

import pytest

from agentwarm._spec import PrefetchKind
from agentwarm.engines.base import EngineStats
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.local.model import LoadedModel, load_model
from agentwarm.errors import ConfigError
from agentwarm.warmup.keepwarm import KeepWarm, load_warmup
from agentwarm.warmup.readiness import Readiness
from agentwarm.warmup.types import Plan, WarmPrefix, save_plan
from agentwarm.warmup.warmer import Warmer
from tests.waiting import until


class Clock:
    """The radix cache's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Ticks:
    """The keep-warm loop's ``wait``: returns when the test says so."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self._go: asyncio.Queue[None] = asyncio.Queue()

    async def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self._go.get()

    async def tick(self, keep: KeepWarm) -> None:
        """Let one wait end; return once the loop handled that tick."""
        done = keep.ticks + 1
        self._go.put_nowait(None)
        await until(lambda: keep.ticks == done, what=f"keep-warm tick {done}")


@cache
def tiny() -> LoadedModel:
    return load_model("tiny", seed=0)


def prompt(first: int, n: int) -> list[int]:
    """``n`` tokens starting with ``first``: prompts with different first tokens share nothing."""
    rng = random.Random(first)
    return [first, *(rng.randrange(10, 256) for _ in range(n - 1))]


def plan_of(*prefixes: list[int]) -> Plan:
    return Plan(tuple(WarmPrefix(input_ids=tuple(p), tokens=len(p)) for p in prefixes))


async def cached(engine: LocalEngine, ids: list[int]) -> int:
    """How many leading tokens of ``ids`` the cache holds now."""
    match = engine.scheduler.call(lambda: engine.cache.match_prefix("", ids).length)
    return await asyncio.wrap_future(match)


def stats(prompt_tokens: int, hit_tokens: int) -> EngineStats:
    return EngineStats(
        cached_tokens=0,
        capacity_tokens=None,
        evicted_tokens=0,
        hit_tokens=hit_tokens,
        prompt_tokens=prompt_tokens,
        computed_tokens=prompt_tokens - hit_tokens,
        requests=0,
        aborted=0,
    )


def test_live_hit_rate_takes_the_warm_ups_own_tokens_out() -> None:
    rate = KeepWarm.live_hit_rate
    # 600 prompt tokens, 300 hits in the window; 200 of them warm-ups, 150 of those hits.
    assert rate(stats(1000, 400), stats(1600, 700), 200, 50) == 150 / 400
    assert rate(stats(0, 0), stats(110, 100), 0, 0) == 100 / 110
    assert rate(stats(0, 0), stats(300, 0), 0, 0) == 0.0
    # Only warm-ups in the window: no live traffic, no rate.
    assert rate(stats(500, 100), stats(600, 200), 100, 0) is None
    assert rate(stats(500, 100), stats(500, 100), 0, 0) is None
    # The counters went back (a flush, a restart): no rate.
    assert rate(stats(500, 100), stats(50, 10), 0, 0) is None


async def test_keep_warm_rewarms_an_evicted_prefix_and_renews_its_pin() -> None:
    clock = Clock()
    engine = LocalEngine(tiny(), chunk_size=32, max_cached_tokens=200)
    engine.cache.clock = clock  # before any request: the worker reads it from then on
    prefix = prompt(1, 80)
    ticks = Ticks()
    keep = KeepWarm(
        plan_of(prefix),
        {"local": Warmer(engine)},
        readiness=Readiness(),
        keep_warm_s=10.0,
        wait=ticks.wait,
    )
    try:
        keep.start()
        await asyncio.wait_for(keep.warmed.wait(), 60)
        assert keep.readiness is not None and keep.readiness.ready
        [static] = keep.summaries
        assert (static.kind, static.prefixes, static.tokens, static.computed_tokens) == (
            PrefetchKind.STATIC,
            1,
            80,
            80,
        )
        await engine.generate(prompt(2, 190), max_tokens=1)
        assert await cached(engine, prefix) == 80  # pinned for 2 x 10 s
        clock.now += 21.0  # the pin expired: other traffic evicts the prefix
        await engine.generate(prompt(3, 190), max_tokens=1)
        left = await cached(engine, prefix)
        assert left < 80

        await ticks.tick(keep)
        assert ticks.waits == [10.0, 10.0]
        assert keep.rounds == 1
        rewarm = keep.summaries[-1]
        assert (rewarm.kind, rewarm.prefixes, rewarm.tokens, rewarm.computed_tokens) == (
            PrefetchKind.KEEP_WARM,
            1,
            80,
            80 - left,
        )
        await engine.generate(prompt(4, 190), max_tokens=1)  # the pin was renewed
        live = await engine.generate([*prefix, 7, 8], max_tokens=1)
        assert live.cached_tokens == 80
    finally:
        await keep.aclose()
        await engine.aclose()


async def test_rewarm_below_rewarms_on_a_low_live_hit_rate_only() -> None:
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    prefix = list(range(1, 101))
    ticks = Ticks()
    keep = KeepWarm(
        plan_of(prefix), {"local": Warmer(engine)}, rewarm_below=0.5, window_s=5.0, wait=ticks.wait
    )
    try:
        keep.start()
        await keep.warmed.wait()
        assert keep.pin_ttl_s is None and keep.rounds == 0
        # A window of warm traffic: 100 of 110 prompt tokens hit.
        assert (
            await engine.generate([*prefix, *range(200, 210)], max_tokens=1)
        ).cached_tokens == 100
        await ticks.tick(keep)
        assert keep.hit_rates == {"local": 100 / 110}
        assert keep.rounds == 0
        # A window of cold traffic: nothing hits, below 0.5: re-warmed at once.
        await engine.generate(list(range(300, 600)), max_tokens=1)
        await ticks.tick(keep)
        assert keep.hit_rates == {"local": 0.0}
        assert keep.rounds == 1
        assert [(s.kind, s.tokens) for s in keep.summaries] == [
            (PrefetchKind.STATIC, 100),
            (PrefetchKind.KEEP_WARM, 100),
        ]
        # The next window holds only that re-warm: no live traffic, no rate, no re-warm.
        await ticks.tick(keep)
        assert keep.hit_rates == {"local": None}
        assert keep.rounds == 1
        assert ticks.waits == [5.0, 5.0, 5.0, 5.0]
    finally:
        await keep.aclose()
        await engine.aclose()


async def test_aclose_aborts_the_warm_up_in_flight() -> None:
    engine = FakeEngine(seconds_per_token=0.01, chunk_size=16)
    readiness = Readiness()
    keep = KeepWarm(plan_of(list(range(1, 1001))), {"local": Warmer(engine)}, readiness=readiness)
    keep.start()
    await until(lambda: engine.scheduler.events, what="the warm-up's first prefill step")
    await keep.aclose()
    assert len(engine.aborts) == 1
    assert not readiness.ready and not keep.warmed.is_set()
    await engine.aclose()


def test_warmup_options_are_checked_before_serving(tmp_path: Path) -> None:
    plan = tmp_path / "plan.jsonl"
    save_plan(plan_of([1, 2, 3]), plan)
    settings = load_warmup(plan, ready_file=tmp_path / "ready", keep_warm_s=30, rewarm_below=0.5)
    assert settings is not None
    assert settings.plan == plan_of([1, 2, 3])
    assert (settings.ready_file, settings.keep_warm_s, settings.rewarm_below) == (
        tmp_path / "ready",
        30,
        0.5,
    )
    assert load_warmup(None) is None
    with pytest.raises(ConfigError, match=r"--keep-warm, --rewarm-below need\(s\) a plan"):
        load_warmup(None, keep_warm_s=30, rewarm_below=0.5)
    with pytest.raises(ConfigError, match="--keep-warm 0: give the period in seconds"):
        load_warmup(plan, keep_warm_s=0)
    with pytest.raises(ConfigError, match=r"--rewarm-below 1\.5: give a hit rate between 0 and 1"):
        load_warmup(plan, rewarm_below=1.5)
    with pytest.raises(ConfigError, match=r"--ready-file .*does not exist"):
        load_warmup(plan, ready_file=tmp_path / "no" / "ready")
    plan.write_text('{"input_ids": [1]}\n{"input_ids": "x"}\n')
    with pytest.raises(ConfigError, match="line 2"):
        load_warmup(plan)
