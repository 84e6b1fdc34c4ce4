"""Per-request pin TTLs on the embedded engine (``PrefillParams.pin_ttl_s``): a warmed prefix
survives cache pressure that evicts an unpinned one, becomes evictable once its TTL passed, and
a re-prefill of the cached prefix renews its pin. The cache's clock is a fake one: no sleeps."""

from __future__ import annotations

from agentwarm.engines.local import LocalEngine
from tests.warmup.helpers import Clock, cached, prompt, tiny

BUDGET = 100


def engine_with(clock: Clock, *, pin_ttl_s: float) -> LocalEngine:
    engine = LocalEngine(
        tiny(),
        chunk_size=32,
        max_cached_tokens=BUDGET,
        pin_ttl_s=pin_ttl_s,
        check_integrity_on_idle=True,
    )
    engine.cache.clock = clock  # before any request: the worker reads it from then on
    return engine


async def test_a_pinned_prefix_survives_pressure_until_its_ttl_passes() -> None:
    clock = Clock()
    warmed, unpinned, defaulted = prompt(1, 30), prompt(2, 30), prompt(3, 20)
    async with engine_with(clock, pin_ttl_s=5.0) as engine:
        assert (await engine.prefill(warmed, pin_ttl_s=10.0)).done  # pinned until 10
        assert (await engine.prefill(unpinned, pin_ttl_s=0)).done  # 0: no pin at all
        assert (await engine.prefill(defaulted)).done  # the engine's default: until 5
        # 80 cached; 50 more need 30 evicted: only the unpinned prefix may go
        await engine.generate(prompt(4, 50), max_tokens=1)
        assert await cached(engine, unpinned) == 0
        assert await cached(engine, warmed) == 30
        assert await cached(engine, defaulted) == 20
        assert (await engine.stats()).evicted_tokens == 30

        clock.now = 7.0  # the default pin expired, the warmed one holds
        await engine.generate(prompt(5, 70), max_tokens=1)  # all 70 unpinned tokens go
        assert await cached(engine, defaulted) == 0
        assert await cached(engine, warmed) == 30

        clock.now = 11.0  # no pin left: the whole budget may go
        await engine.generate(prompt(6, BUDGET), max_tokens=1)
        assert await cached(engine, warmed) == 0
        await engine.check_integrity()


async def test_prefilling_a_cached_prefix_renews_its_pin() -> None:
    clock = Clock()
    warmed = prompt(1, 40)
    async with engine_with(clock, pin_ttl_s=0) as engine:
        first = await engine.prefill(warmed, pin_ttl_s=10.0)
        assert (first.cached_tokens, first.computed_tokens) == (0, 40)
        clock.now = 8.0
        renewed = await engine.prefill(warmed, pin_ttl_s=10.0)  # fully cached: until 18
        assert renewed.done
        assert (renewed.cached_tokens, renewed.computed_tokens) == (40, 0)
        shorter = await engine.prefill(warmed, pin_ttl_s=1.0)  # a pin never shortens
        assert (shorter.cached_tokens, shorter.computed_tokens) == (40, 0)

        clock.now = 15.0  # past the first pin, within the renewed one
        await engine.generate(prompt(2, 60), max_tokens=1)
        await engine.generate(prompt(3, 60), max_tokens=1)  # evicts the 60 unpinned tokens
        assert await cached(engine, warmed) == 40
        assert (await engine.stats()).evicted_tokens == 60

        clock.now = 19.0
        await engine.generate(prompt(4, BUDGET), max_tokens=1)
        assert await cached(engine, warmed) == 0
        await engine.check_integrity()


async def test_aborting_one_finished_prefill_keeps_the_other_pins_of_its_prefix() -> None:
    clock = Clock()
    warmed = prompt(1, 40)
    async with engine_with(clock, pin_ttl_s=0) as engine:
        await engine.prefill(warmed, rid="r1", pin_ttl_s=10.0)
        clock.now = 11.0  # r1's pin expired; r2 pins the prefix anew, until 21
        assert (await engine.prefill(warmed, rid="r2", pin_ttl_s=10.0)).cached_tokens == 40
        await engine.abort("r1")  # its pin no longer counts: r2's stays
        await engine.generate(prompt(2, 60), max_tokens=1)
        await engine.generate(prompt(3, 60), max_tokens=1)
        assert await cached(engine, warmed) == 40
        await engine.prefill(warmed, rid="r3", pin_ttl_s=10.0)
        await engine.abort("r2")  # r3's pin holds
        await engine.generate(prompt(4, 60), max_tokens=1)
        assert await cached(engine, warmed) == 40
        await engine.abort("r3")  # the last pin dropped: evictable before its TTL
        await engine.generate(prompt(5, BUDGET), max_tokens=1)
        assert await cached(engine, warmed) == 0
        await engine.check_integrity()
