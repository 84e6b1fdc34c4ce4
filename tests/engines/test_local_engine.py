"""LocalEngine on the tiny preset: exactness, cancellation, priority, promotion, budget, errors.

Ordering tests pause the worker thread inside ``step_hook`` (called right before a step runs) and
count the logged steps; nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import random
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from functools import cache
from pathlib import Path
from typing import TypeVar

import pytest
import torch

from agentwarm.engines.base import PrefillStatus, Priority
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.local.model import LoadedModel, load_model
from agentwarm.engines.local.runner import ModelRunner
from agentwarm.engines.local.scheduler import StepEvent
from agentwarm.errors import EngineError, InvalidRequest, RequestAborted

T = TypeVar("T")
TOL = 1e-4
WAIT_S = 30.0


@cache
def tiny() -> LoadedModel:
    return load_model("tiny", seed=0)


@cache
def reference() -> ModelRunner:
    """A runner of the same weights for cold (cache-free) reference forwards."""
    return ModelRunner(tiny())


def cold_logits(ids: list[int]) -> torch.Tensor:
    return reference().forward_full(ids)[-1]


def cold_greedy(ids: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(int(torch.argmax(cold_logits([*ids, *out]))))
    return out


def prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(0, 256) for _ in range(n)]


class Pause:
    """A step hook that stops the worker before a chosen step until the test releases it."""

    def __init__(self, when: Callable[[StepEvent], bool]) -> None:
        self.when = when
        self.reached = threading.Event()
        self.go = threading.Event()
        self.action: Callable[[StepEvent], None] | None = None

    def __call__(self, event: StepEvent) -> None:
        if self.action is not None:
            self.action(event)
        if not self.reached.is_set() and self.when(event):
            self.reached.set()
            if not self.go.wait(WAIT_S):
                raise RuntimeError("test never released the paused worker")

    async def wait(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, WAIT_S), "worker never paused"


async def settle(engine: LocalEngine) -> None:
    """The cache is consistent and no request holds a lock."""
    await engine.check_integrity()
    assert await on_worker(engine, lambda: engine.cache.active_locks) == 0
    assert await on_worker(engine, lambda: engine.cache.locked_tokens) == 0


async def on_worker(engine: LocalEngine, fn: Callable[[], T]) -> T:
    """``fn()`` run on the engine's worker thread, between two steps (``Scheduler.call``)."""
    return await asyncio.wrap_future(engine.scheduler.call(fn))


@pytest.fixture
async def engine() -> AsyncIterator[LocalEngine]:
    async with LocalEngine(tiny(), chunk_size=32, check_integrity_on_idle=True) as eng:
        yield eng
        await settle(eng)


def make_engine(**kwargs: object) -> LocalEngine:
    kwargs.setdefault("check_integrity_on_idle", True)
    return LocalEngine(tiny(), **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------- exactness


@pytest.mark.parametrize("chunk_size", [7, 32, 256])
@pytest.mark.slow
async def test_cached_prefix_plus_suffix_matches_cold_prefill(chunk_size: int) -> None:
    rng = random.Random(chunk_size)
    async with make_engine(chunk_size=chunk_size) as engine:
        for case in range(4):
            ids = prompt(rng, rng.randrange(20, 120))
            split = rng.randrange(1, len(ids))
            ns = f"case{case}"
            pre = await engine.prefill(ids[:split], namespace=ns)
            assert (pre.cached_tokens, pre.computed_tokens) == (0, split)
            warm = await engine.next_token_logits(ids, namespace=ns)
            torch.testing.assert_close(warm, cold_logits(ids), atol=TOL, rtol=0)
            out = await engine.generate(ids, max_tokens=6, namespace=ns + "gen")
            assert out.cached_tokens == 0
            again = await engine.generate(ids, max_tokens=6, namespace=ns)
            assert again.cached_tokens == len(ids) - 1
            assert list(out.token_ids) == list(again.token_ids) == cold_greedy(ids, 6)
        await settle(engine)


@pytest.mark.slow
async def test_exact_after_partial_aborted_prefill() -> None:
    rng = random.Random(7)
    ids = prompt(rng, 150)
    pause = Pause(lambda e: e.kind == "prefill" and e.start == 48)
    async with make_engine(chunk_size=16, step_hook=pause) as engine:
        task = asyncio.create_task(engine.prefill(ids, rid="spec"))
        await pause.wait()
        await engine.abort("spec")
        pause.go.set()
        result = await task
        assert result.status is PrefillStatus.ABORTED
        assert result.computed_tokens == 64  # three chunks done + the one in flight
        assert engine.scheduler.chunks_interrupted == 0  # an abort lets the chunk finish
        warm = await engine.next_token_logits(ids)
        torch.testing.assert_close(warm, cold_logits(ids), atol=TOL, rtol=0)
        out = await engine.generate(ids, max_tokens=5)
        assert out.cached_tokens == len(ids) - 1
        assert list(out.token_ids) == cold_greedy(ids, 5)
        await settle(engine)


async def test_generated_tokens_are_cached_and_exact(engine: LocalEngine) -> None:
    ids = prompt(random.Random(3), 40)
    first = await engine.generate(ids, max_tokens=8)
    follow = [*ids, *first.token_ids, 65, 66]
    second = await engine.generate(follow, max_tokens=4)
    assert second.cached_tokens == len(ids) + 7  # the last generated token's KV was never run
    assert list(second.token_ids) == cold_greedy(follow, 4)


# ----------------------------------------------------------------- cancellation


async def test_abort_speculative_prefill_mid_way_keeps_prefix_and_locks() -> None:
    ids = prompt(random.Random(11), 640)
    pause = Pause(lambda e: e.rid == "spec" and e.start == 96)
    async with make_engine(chunk_size=32, step_hook=pause) as engine:
        task = asyncio.create_task(engine.prefill(ids, rid="spec"))
        await pause.wait()
        events_before = len(engine.scheduler.events)
        await engine.abort("spec")
        pause.go.set()
        result = await task
        after = list(engine.scheduler.events)[events_before:]
        assert [e for e in after if e.rid == "spec"] == []  # only the in-flight chunk ran
        assert result.status is PrefillStatus.ABORTED
        assert (result.cached_tokens, result.computed_tokens) == (0, 128)
        await settle(engine)
        live = await engine.generate(ids, max_tokens=1)
        assert live.cached_tokens == result.computed_tokens == 128
        stats = await engine.stats()
        assert stats.aborted == 1 and stats.requests == 2


async def test_cancelling_the_caller_aborts_the_request() -> None:
    ids = prompt(random.Random(12), 400)
    pause = Pause(lambda e: e.rid == "x" and e.start == 64)
    async with make_engine(chunk_size=32, step_hook=pause) as engine:
        task = asyncio.create_task(engine.generate(ids, rid="x", max_tokens=4))
        await pause.wait()
        task.cancel()
        await asyncio.sleep(0)
        pause.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await settle(engine)
        assert all(e.start <= 64 for e in engine.scheduler.events if e.rid == "x")
        assert (await engine.stats()).aborted == 1


async def test_abort_live_generate_raises_request_aborted() -> None:
    ids = prompt(random.Random(13), 30)
    pause = Pause(lambda e: e.rid == "live" and e.kind == "decode")
    async with make_engine(chunk_size=32, step_hook=pause) as engine:
        task = asyncio.create_task(engine.generate(ids, rid="live", max_tokens=50))
        await pause.wait()
        await engine.abort("live")
        pause.go.set()
        with pytest.raises(RequestAborted):
            await task
        decodes = [e for e in engine.scheduler.events if e.rid == "live" and e.kind == "decode"]
        assert len(decodes) == 1
        await settle(engine)
        follow = [*ids, *cold_greedy(ids, 1), 42]
        again = await engine.generate(follow, max_tokens=1)
        assert again.cached_tokens == len(ids) + 1  # prompt + the KV of the decoded token


async def test_abort_stream(engine: LocalEngine) -> None:
    ids = prompt(random.Random(14), 30)
    pause = Pause(lambda e: e.rid == "s" and e.kind == "decode" and e.start == len(ids) + 1)
    engine.scheduler.step_hook = pause
    stream = engine.generate_stream(ids, rid="s", max_tokens=40)
    first = await anext(stream)
    assert len(first.token_ids) == 1
    await pause.wait()
    await engine.abort("s")
    pause.go.set()
    received = 1
    with pytest.raises(RequestAborted):
        async for _ in stream:
            received += 1
    assert received == 3  # the token before the pause and the one from the step in flight


# --------------------------------------------------------------------- priority


async def test_live_request_interrupts_the_speculative_chunk_in_flight() -> None:
    rng = random.Random(21)
    spec_ids = prompt(rng, 32 * 20)
    live_ids = prompt(rng, 70)
    pause = Pause(lambda e: e.rid == "spec" and e.start == 64)
    async with make_engine(chunk_size=32, step_hook=pause) as engine:
        spec = asyncio.create_task(engine.prefill(spec_ids, rid="spec"))
        await pause.wait()
        live = asyncio.create_task(engine.generate(live_ids, rid="live", max_tokens=3))
        await asyncio.sleep(0)  # the live request is submitted
        pause.go.set()
        completion = await live
        result = await spec
        order = [e.rid for e in engine.scheduler.events]
        paused_at = next(
            i for i, e in enumerate(engine.scheduler.events) if e.rid == "spec" and e.start == 64
        )
        first_live = order.index("live")
        # The chunk in flight yielded at its first layer; the live request ran next.
        assert engine.scheduler.events[paused_at].kind == "interrupted"
        assert first_live - paused_at == 1
        assert engine.scheduler.chunks_interrupted == 1
        live_steps = [i for i, rid in enumerate(order) if rid == "live"]
        assert live_steps == list(range(first_live, first_live + len(live_steps)))
        assert len(live_steps) == 3 + 2  # three prefill chunks, two decode steps
        assert completion.cached_tokens == 0 and len(completion.token_ids) == 3
        assert list(completion.token_ids) == cold_greedy(live_ids, 3)
        # The interrupted chunk was redone whole once the live request finished.
        assert result.done and result.computed_tokens == len(spec_ids)
        spec_chunks = [(e.start, e.stop) for e in engine.scheduler.events if e.rid == "spec"]
        assert spec_chunks.count((64, 96)) == 2
        warm = await engine.next_token_logits(spec_ids)
        torch.testing.assert_close(warm, cold_logits(spec_ids), atol=TOL, rtol=0)
        await settle(engine)


async def test_higher_priority_int_goes_first() -> None:
    rng = random.Random(22)
    pause = Pause(lambda e: e.rid == "blocker")
    async with make_engine(chunk_size=64, step_hook=pause) as engine:
        blocker = asyncio.create_task(engine.prefill(prompt(rng, 10), rid="blocker"))
        await pause.wait()
        low = asyncio.create_task(engine.prefill(prompt(rng, 10), rid="low", priority=1))
        high = asyncio.create_task(engine.prefill(prompt(rng, 10), rid="high", priority=5))
        await asyncio.sleep(0)
        pause.go.set()
        await asyncio.gather(blocker, low, high)
        # The blocker's chunk yields to the higher classes and runs again after them.
        assert [(e.kind, e.rid) for e in engine.scheduler.events] == [
            ("interrupted", "blocker"),
            ("prefill", "high"),
            ("prefill", "low"),
            ("prefill", "blocker"),
        ]


# -------------------------------------------------------------------- promotion


@pytest.mark.slow
async def test_live_request_reuses_in_flight_speculative_prefill() -> None:
    rng = random.Random(31)
    prefix = prompt(rng, 32 * 10)
    full = [*prefix, *prompt(rng, 20)]
    pause = Pause(lambda e: e.rid == "spec" and e.start == 96)
    async with make_engine(chunk_size=32, step_hook=pause) as engine:
        spec = asyncio.create_task(engine.prefill(prefix, rid="spec"))
        await pause.wait()
        live = asyncio.create_task(engine.generate(full, rid="live", max_tokens=4))
        await asyncio.sleep(0)
        pause.go.set()
        completion = await live
        result = await spec
        assert result.done
        # Three chunks done by the speculative prefill; the fourth yielded to the live request.
        assert completion.cached_tokens == 96
        assert result.computed_tokens + completion.computed_tokens == len(full)
        assert result.cached_tokens + result.computed_tokens == len(prefix)
        prefill_events = [e for e in engine.scheduler.events if e.kind == "prefill"]
        assert sum(e.stop - e.start for e in prefill_events) == len(full)
        covered = sorted((e.start, e.stop) for e in prefill_events)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(covered))
        stats = await engine.stats()
        assert stats.computed_tokens == len(full)
        assert list(completion.token_ids) == cold_greedy(full, 4)
        await settle(engine)


async def test_speculative_prefill_pins_until_aborted() -> None:
    rng = random.Random(32)
    kept = prompt(rng, 40)
    async with make_engine(chunk_size=32, max_cached_tokens=100, pin_ttl_s=60.0) as engine:
        await engine.prefill(kept, rid="winner")
        loser = await engine.prefill(prompt(rng, 40), rid="loser")
        assert loser.done
        # the budget is full of pinned prefixes: a live request still runs, caching what fits
        live = await engine.generate(prompt(rng, 60), max_tokens=1)
        assert live.cached_tokens == 0
        assert (await engine.stats()).cached_tokens <= 100
        again = await engine.generate(kept, max_tokens=1)
        assert again.cached_tokens == len(kept) - 1
        await engine.abort("loser")  # unpins the finished loser: now evictable
        await engine.generate(prompt(rng, 50), max_tokens=1)
        stats = await engine.stats()
        assert stats.evicted_tokens >= 40 and stats.cached_tokens <= 100
        assert (await engine.generate(kept, max_tokens=1)).cached_tokens == len(kept) - 1
        await settle(engine)


async def test_expired_pins_are_forgotten() -> None:
    rng = random.Random(33)
    async with make_engine(pin_ttl_s=1e-9) as engine:
        for _ in range(5):
            assert (await engine.prefill(prompt(rng, 20))).done
        assert await on_worker(engine, lambda: engine.scheduler.prefixes.pinned) <= 1
        await settle(engine)


# -------------------------------------------------------- namespaces and budget


async def test_cache_budget_is_never_exceeded_and_results_stay_exact() -> None:
    rng = random.Random(51)
    budget = 150
    seen: list[int] = []

    async with make_engine(chunk_size=16, max_cached_tokens=budget, pin_ttl_s=0.0) as engine:

        def watch(event: StepEvent) -> None:
            seen.append(engine.cache.total_tokens)

        engine.scheduler.step_hook = watch
        stems = [prompt(rng, 60) for _ in range(3)]
        for i in range(12):
            ids = [*rng.choice(stems), *prompt(rng, rng.randrange(1, 40))]
            if i % 3 == 0:
                await engine.prefill(ids)
            else:
                warm = await engine.next_token_logits(ids)
                torch.testing.assert_close(warm, cold_logits(ids), atol=TOL, rtol=0)
            stats = await engine.stats()
            assert stats.cached_tokens <= budget
            assert stats.capacity_tokens == budget
        stats = await engine.stats()
        assert stats.evicted_tokens > 0 and stats.hit_tokens > 0
        assert max(seen) <= budget
        await settle(engine)


# ----------------------------------------------------------------------- decode


async def test_stops_on_eos(engine: LocalEngine) -> None:
    ids = prompt(random.Random(62), 25)
    greedy = cold_greedy(ids, 3)
    assert greedy[2] not in greedy[:2]
    engine.scheduler.eos_token_id = greedy[2]
    out = await engine.generate(ids, max_tokens=10)
    assert out.token_ids == tuple(greedy[:2]) and out.finish_reason == "stop"


async def test_stats_accounting(engine: LocalEngine) -> None:
    ids = prompt(random.Random(63), 70)
    await engine.prefill(ids[:40])
    out = await engine.generate(ids, max_tokens=2)
    stats = await engine.stats()
    assert (stats.requests, stats.prompt_tokens, stats.hit_tokens) == (2, 110, 40)
    assert stats.computed_tokens == 40 + 30 == 110 - stats.hit_tokens
    assert out.computed_tokens == 30
    await engine.flush_cache()
    stats = await engine.stats()
    assert (stats.cached_tokens, stats.requests, stats.evicted_tokens) == (0, 0, 0)


# ----------------------------------------------------------------------- errors


async def test_bad_requests_raise_invalid_request(engine: LocalEngine) -> None:
    with pytest.raises(InvalidRequest, match="empty"):
        await engine.prefill([])
    with pytest.raises(InvalidRequest, match="exceeds the model context"):
        await engine.generate([1] * (engine.max_context + 1))
    with pytest.raises(InvalidRequest, match="outside vocabulary"):
        await engine.generate([1, 1_000_000])
    with pytest.raises(InvalidRequest, match="max_tokens"):
        await engine.generate([1, 2], max_tokens=0)


async def test_step_failure_is_translated_and_releases_locks() -> None:
    ids = prompt(random.Random(71), 100)

    def boom(event: StepEvent) -> None:
        if event.rid == "bad" and event.start == 64:
            raise RuntimeError("kaboom")

    async with make_engine(chunk_size=32, step_hook=boom) as engine:
        with pytest.raises(EngineError, match="kaboom") as info:
            await engine.prefill(ids, rid="bad")
        assert isinstance(info.value.__cause__, RuntimeError)
        await settle(engine)
        ok = await engine.generate(ids, max_tokens=1)
        assert ok.cached_tokens == 64


def test_load_failure_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(EngineError, match="nope"):
        LocalEngine(str(missing))
    with pytest.raises(EngineError, match=r"unknown model preset|does not exist"):
        LocalEngine("no-such-preset")


async def test_duplicate_rid_in_flight_is_rejected() -> None:
    pause = Pause(lambda e: e.rid == "dup")
    async with make_engine(step_hook=pause) as engine:
        first = asyncio.create_task(engine.prefill([1, 2, 3], rid="dup"))
        await pause.wait()
        with pytest.raises(InvalidRequest, match="already in flight"):
            await engine.prefill([4, 5], rid="dup")
        pause.go.set()
        assert (await first).done
        assert (await engine.generate([1, 2, 3], priority=Priority.LIVE, max_tokens=1)).rid


@pytest.mark.slow
def test_importing_the_package_has_no_side_effect() -> None:
    """Only loading ``LocalEngine`` (which loads torch) sets OMP_WAIT_POLICY, and only when the
    environment does not; the package and the scheduler FakeEngine runs import no torch."""
    code = (
        "import os, sys\n"
        "import agentwarm.engines.local, agentwarm.engines.local.scheduler\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
        "print(os.environ.get('OMP_WAIT_POLICY'))\n"
        "from agentwarm.engines.local import LocalEngine\n"
        "print(os.environ.get('OMP_WAIT_POLICY'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    run = functools.partial(
        subprocess.run, [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    done = run(env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "PASSIVE"]
    kept = run(env={**env, "OMP_WAIT_POLICY": "ACTIVE"})
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.split() == ["ACTIVE", "ACTIVE"]
