"""KeepWarm: the static warm-up gating readiness, keep-warm rounds re-warming an evicted prefix
(and renewing its pin) on the embedded engine at fixed times with pins that outlast slow rounds,
re-warms when the live hit rate of a window drops below ``rewarm_below`` (exact rates, the
warm-ups' own tokens taken out, live requests served during a round kept in; workers without
server counters left out), unexpected errors as a worker's failure, cancellation and the ready
file, and the ``--warmup`` options' checks. The loop's waits and clock are driven by the tests
(no sleeps); the cache's clock is a fake one."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentwarm._spec import PrefetchKind
from agentwarm.engines.base import EngineStats
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.sglang.client import SGLangEngine
from agentwarm.errors import ConfigError
from agentwarm.warmup.keepwarm import KeepWarm
from agentwarm.warmup.options import load_warmup
from agentwarm.warmup.readiness import Readiness
from agentwarm.warmup.types import Plan, WarmPrefix, save_plan
from agentwarm.warmup.warmer import Warmer, WarmSummary
from tests.waiting import until
from tests.warmup.helpers import Clock, Ticks, cached, prompt, tiny


class LiveDuringWarm(Warmer):
    """A warmer whose engine serves a live request (100 of its 110 prompt tokens cached) while
    each keep-warm round runs (``live``)."""

    live = True

    async def warm(self, plan: Plan, **kwargs: Any) -> WarmSummary:
        summary = await super().warm(plan, **kwargs)
        if self.live and kwargs.get("kind") is PrefetchKind.KEEP_WARM:
            ids = [*range(1, 101), *range(700, 710)]
            assert (await self.engine.generate(ids, max_tokens=1)).cached_tokens == 100
        return summary


class Scripted(Warmer):
    """A warmer that records the pin TTLs it is given and takes ``cost`` seconds of ``clock``
    (or raises ``fail``)."""

    def __init__(self, engine: FakeEngine, clock: Clock, worker: str = "local") -> None:
        super().__init__(engine, worker=worker)
        self.clock = clock
        self.cost = 0.0
        self.fail: Exception | None = None
        self.pins: list[float | None] = []

    async def warm(self, plan: Plan, **kwargs: Any) -> WarmSummary:
        self.pins.append(kwargs.get("pin_ttl_s"))
        self.clock.now += self.cost
        if self.fail is not None:
            raise self.fail
        return await super().warm(plan, **kwargs)


def plan_of(*prefixes: list[int]) -> Plan:
    return Plan(tuple(WarmPrefix(input_ids=tuple(p), tokens=len(p)) for p in prefixes))


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
    assert rate(stats(1000, 400), stats(1600, 700), 200, 150) == 150 / 400
    assert rate(stats(0, 0), stats(110, 100), 0, 0) == 100 / 110
    assert rate(stats(0, 0), stats(300, 0), 0, 0) == 0.0
    # Only warm-ups in the window: no live traffic, no rate.
    assert rate(stats(500, 100), stats(600, 200), 100, 100) is None
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
        clock=ticks.clock,
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
        plan_of(prefix),
        {"local": LiveDuringWarm(engine)},
        rewarm_below=0.5,
        window_s=5.0,
        wait=ticks.wait,
        clock=ticks.clock,
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
        # The next window holds that re-warm (100 prompt tokens, all cached) and the live
        # request served while it ran (100 of 110 hit): only the live one counts.
        await ticks.tick(keep)
        assert keep.hit_rates == {"local": 100 / 110}
        assert keep.rounds == 1
        # A window of the re-warms only: no live traffic, no rate, no re-warm.
        warmer = keep.warmers["local"]
        assert isinstance(warmer, LiveDuringWarm)
        warmer.live = False
        await keep.rewarm()
        await ticks.tick(keep)
        assert keep.hit_rates == {"local": None}
        assert keep.rounds == 2
        assert ticks.waits == [5.0, 5.0, 5.0, 5.0, 5.0]
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


async def test_aclose_removes_the_ready_file(tmp_path: Path) -> None:
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    ready_file = tmp_path / "ready.json"
    keep = KeepWarm(
        plan_of([1, 2, 3]), {"local": Warmer(engine)}, readiness=Readiness(ready_file=ready_file)
    )
    keep.start()
    await keep.warmed.wait()
    assert json.loads(ready_file.read_text())["ready"] is True
    await keep.aclose()
    assert not ready_file.exists()
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
    with pytest.raises(ConfigError, match="--keep-warm, --rewarm-below need a plan to warm"):
        load_warmup(None, keep_warm_s=30, rewarm_below=0.5)
    with pytest.raises(ConfigError, match="--ready-file needs a plan to warm: add --warmup PLAN"):
        load_warmup(None, ready_file=tmp_path / "ready")
    with pytest.raises(ConfigError, match="--keep-warm 0: give the period in seconds"):
        load_warmup(plan, keep_warm_s=0)
    with pytest.raises(ConfigError, match=r"--rewarm-below 1\.5: give a hit rate between 0 and 1"):
        load_warmup(plan, rewarm_below=1.5)
    with pytest.raises(ConfigError, match=r"--ready-file .*does not exist"):
        load_warmup(plan, ready_file=tmp_path / "no" / "ready")
    plan.write_text('{"input_ids": [1]}\n{"input_ids": "x"}\n')
    with pytest.warns(UserWarning, match="line 2 skipped: 'input_ids' must be"):  # issue 23
        settings = load_warmup(plan)
    assert settings is not None and [p.input_ids for p in settings.plan] == [(1,)]
    plan.write_text('{"input_ids": "x"}\n')
    with pytest.raises(ConfigError, match=r"no usable line \(line 1: 'input_ids' must be"):
        load_warmup(plan)


async def test_rounds_keep_their_times_and_pins_outlast_slow_rounds() -> None:
    ticks = Ticks()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    warmer = Scripted(engine, ticks.clock)
    keep = KeepWarm(
        plan_of([1, 2, 3]), {"local": warmer}, keep_warm_s=10.0, wait=ticks.wait, clock=ticks.clock
    )
    try:
        keep.start()
        await keep.warmed.wait()
        warmer.cost = 7.0
        await ticks.tick(keep)  # at 10: a round of 7 s; the next is due at 20, not 27
        assert (ticks.clock.now, keep.rounds, keep.last_round_s) == (17.0, 1, 7.0)
        warmer.cost = 25.0
        await ticks.tick(keep)  # at 20: a round of 25 s overruns the rounds due at 30 and 40
        assert (ticks.clock.now, keep.rounds) == (45.0, 2)
        await ticks.tick(keep)  # at once (overdue), then the next one is due at 50
        assert (ticks.clock.now, keep.rounds) == (70.0, 3)
        assert ticks.waits == [10.0, 3.0, 0.0, 0.0]
        # Pinned for 2 S, or S + twice the last round when rounds are slow.
        assert warmer.pins == [20.0, 20.0, 24.0, 60.0]
    finally:
        await keep.aclose()
        await engine.aclose()


async def test_an_unexpected_error_is_the_worker_s_failure_and_the_others_warm() -> None:
    clock = Clock()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    good, bad = Scripted(engine, clock, "http://a"), Scripted(engine, clock, "http://b")
    bad.fail = RuntimeError("boom")
    readiness = Readiness()
    keep = KeepWarm(plan_of([1, 2, 3]), {"http://a": good, "http://b": bad}, readiness=readiness)
    try:
        keep.start()
        await keep.warmed.wait()
        assert readiness.ready
        assert readiness.to_dict()["error"] == "http://b: RuntimeError: boom"
        assert [(s.worker, s.prefixes, s.error) for s in keep.summaries] == [
            ("http://a", 1, None),
            ("http://b", 0, "RuntimeError: boom"),
        ]
    finally:
        await keep.aclose()
        await engine.aclose()


async def test_not_ready_until_a_keep_warm_round_warms_a_worker() -> None:
    ticks = Ticks()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    warmer = Scripted(engine, ticks.clock)
    warmer.fail = RuntimeError("boom")
    readiness = Readiness()
    keep = KeepWarm(
        plan_of([1, 2, 3]),
        {"local": warmer},
        readiness=readiness,
        keep_warm_s=10.0,
        wait=ticks.wait,
        clock=ticks.clock,
    )
    try:
        keep.start()
        await keep.warmed.wait()
        assert not readiness.ready
        assert (
            readiness.to_dict()["error"] == "no worker could be warmed: local: RuntimeError: boom"
        )
        warmer.fail = None
        await ticks.tick(keep)
        assert readiness.ready and readiness.to_dict()["error"] is None
    finally:
        await keep.aclose()
        await engine.aclose()


async def test_rewarm_below_skips_a_worker_without_server_counters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A worker whose /metrics has no counters (404 here; SGLang without --enable-metrics).
    transport = httpx.MockTransport(lambda request: httpx.Response(404))
    engine = SGLangEngine("http://worker:30000", transport=transport)
    ticks = Ticks()
    keep = KeepWarm(
        plan_of([1, 2, 3]),
        {"http://worker:30000": Warmer(engine, worker="http://worker:30000")},
        rewarm_below=0.5,
        window_s=5.0,
        wait=ticks.wait,
        clock=ticks.clock,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="agentwarm.warmup.keepwarm"):
            keep.start()
            await keep.warmed.wait()
            await ticks.tick(keep)
            await ticks.tick(keep)
        warnings = [r.getMessage() for r in caplog.records if "--rewarm-below" in r.getMessage()]
        assert len(warnings) == 1
        assert "--rewarm-below cannot work for http://worker:30000" in warnings[0]
        assert keep.hit_rates == {}
        assert keep.rounds == 0
    finally:
        await keep.aclose()
        await engine.aclose()


def test_keep_warm_checks_its_schedule_with_config_errors() -> None:
    warmers = {"local": Warmer(FakeEngine())}
    with pytest.raises(ConfigError, match="--keep-warm -1: give the period in seconds"):
        KeepWarm(plan_of([1]), warmers, keep_warm_s=-1)
    with pytest.raises(ConfigError, match="--rewarm-below 2: give a hit rate between 0 and 1"):
        KeepWarm(plan_of([1]), warmers, rewarm_below=2)
    with pytest.raises(ConfigError, match="the re-warm window 0: give it in seconds"):
        KeepWarm(plan_of([1]), warmers, window_s=0)


def test_a_stale_ready_file_is_removed_before_the_server_binds(tmp_path: Path) -> None:
    plan, ready_file = tmp_path / "plan.jsonl", tmp_path / "ready.json"
    save_plan(plan_of([1, 2, 3]), plan)
    ready_file.write_text('{"ready": true}\n')  # left by an earlier run
    assert load_warmup(plan, ready_file=ready_file) is not None
    assert not ready_file.exists()


async def test_a_recurring_error_logs_its_traceback_once_then_one_line_a_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 23 item 12: a failure that recurs every keep-warm round (it once logged a
    3,000-line traceback every round) has its traceback logged once, then one line a round."""
    ticks = Ticks()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    warmer = Scripted(engine, ticks.clock)
    warmer.fail = RecursionError("maximum recursion depth exceeded")
    keep = KeepWarm(
        plan_of([1, 2, 3]), {"local": warmer}, keep_warm_s=10.0, wait=ticks.wait, clock=ticks.clock
    )
    try:
        with caplog.at_level(logging.ERROR, logger="agentwarm.warmup.keepwarm"):
            keep.start()
            await keep.warmed.wait()
            for _ in range(3):
                await ticks.tick(keep)
        records = [r for r in caplog.records if r.name == "agentwarm.warmup.keepwarm"]
        assert len(records) == 4  # the static warm-up and three rounds: one record each
        assert [r.exc_info is not None for r in records] == [True, False, False, False]
        assert records[1].getMessage() == (
            "the keep_warm warm-up of local failed (again): "
            "RecursionError: maximum recursion depth exceeded"
        )
    finally:
        await keep.aclose()
        await engine.aclose()
