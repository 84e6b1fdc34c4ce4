"""HashRing and MultiWorkerEngine with in-process workers (FakeEngine and failing doubles)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Sequence

import pytest

from agentwarm.engines.base import (
    Completion,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    PrefillStatus,
    Priority,
    StreamChunk,
)
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.routing import HashRing, MultiWorkerEngine
from agentwarm.errors import EngineTimeout, EngineUnavailable
from tests.waiting import until

SESSIONS = [f"run-{i}" for i in range(200)]


def test_ring_is_deterministic_and_lists_every_node_once() -> None:
    ring = HashRing(["a", "b", "c"])
    again = HashRing(["c", "b", "a"])
    for key in SESSIONS:
        owners = ring.owners(key)
        assert sorted(owners) == ["a", "b", "c"]
        assert again.owners(key) == owners
        assert ring.lookup(key) == owners[0]
        assert ring.lookup(key, skip=[owners[0]]) == owners[1]
    assert ring.lookup("x", skip=["a", "b", "c"]) is None


def test_ring_spreads_keys_and_moves_only_the_removed_nodes_keys() -> None:
    ring = HashRing(["a", "b", "c", "d"])
    owner = {key: ring.lookup(key) for key in SESSIONS}
    counts = Counter(owner.values())
    assert set(counts) == {"a", "b", "c", "d"}
    assert min(counts.values()) >= 25  # 200 keys, 160 virtual nodes each: roughly 50 apiece
    smaller = HashRing(["a", "c", "d"])
    moved = [k for k in SESSIONS if smaller.lookup(k) != owner[k]]
    assert sorted(moved) == sorted(k for k in SESSIONS if owner[k] == "b")
    for key in moved:
        assert smaller.lookup(key) == ring.lookup(key, skip=["b"])


def test_ring_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        HashRing([])
    with pytest.raises(ValueError, match="vnodes"):
        HashRing(["a"], vnodes=0)


def fakes(n: int) -> dict[str, FakeEngine]:
    return {
        f"w{i}": FakeEngine(seconds_per_token=1e-5, seconds_per_output_token=1e-5) for i in range(n)
    }


async def test_a_session_stays_on_one_worker_and_hits_its_cache() -> None:
    workers = fakes(3)
    engine = MultiWorkerEngine(workers)
    prefix = list(range(1, 200))
    for session in SESSIONS[:12]:
        target = engine.route(session)
        await engine.prefill(prefix, session=session, namespace=session)
        out = await engine.generate(
            [*prefix, 7, 8], max_tokens=2, session=session, namespace=session
        )
        assert out.cached_tokens == len(prefix)
        for name, worker in workers.items():
            sessions = {r.session for r in worker.log}
            assert (session in sessions) == (name == target)
    assert sum(len(w.log) for w in workers.values()) == 24
    assert sum(engine.worker_requests().values()) == 24
    assert len({engine.route(s) for s in SESSIONS[:12]}) > 1
    await engine.aclose()


async def test_abort_goes_to_the_worker_that_got_the_rid() -> None:
    workers = {
        name: FakeEngine(seconds_per_token=1e-3, chunk_size=16) for name in ("w0", "w1", "w2")
    }
    engine = MultiWorkerEngine(workers)
    task = asyncio.create_task(engine.prefill(list(range(2000)), rid="r" * 32, session="run-x"))
    target = engine.route("run-x")
    await until(lambda: workers[target].chunks, what="the prefill to start on its worker")
    await engine.abort("r" * 32)
    result = await task
    assert result.status is PrefillStatus.ABORTED
    assert result.computed_tokens < 2000
    assert {name: w.aborts for name, w in workers.items()} == {
        name: (["r" * 32] if name == target else []) for name in workers
    }
    await engine.abort("unknown")  # ignored: no worker has it
    await engine.aclose()


class Dead(FakeEngine):
    """A worker whose server is gone: every call fails like a refused connection."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.alive = False

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        self._fail()
        return await super().prefill_with(ids, params)

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        self._fail()
        return await super().generate_with(ids, params)

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        self._fail()
        async for chunk in super().stream_with(ids, params):
            yield chunk

    async def stats(self) -> EngineStats:
        self._fail()
        return await super().stats()

    async def health(self) -> bool:
        return self.alive

    def _fail(self) -> None:
        self.calls += 1
        if not self.alive:
            raise EngineUnavailable("http://dead:1/generate: cannot reach the server (refused)")


async def test_dead_worker_is_skipped_live_retried_speculative_dropped() -> None:
    dead = Dead()
    alive = FakeEngine(seconds_per_token=1e-5)
    engine = MultiWorkerEngine({"dead": dead, "alive": alive}, retry_down_s=60)
    on_dead = next(s for s in SESSIONS if engine.route(s) == "dead")
    on_alive = next(s for s in SESSIONS if engine.route(s) == "alive")

    with pytest.raises(EngineUnavailable, match="refused"):
        await engine.prefill([1, 2, 3], session=on_dead)  # speculative: the runtime drops it
    assert engine.down_workers() == {
        "dead": "http://dead:1/generate: cannot reach the server (refused)"
    }
    assert engine.route(on_dead) == "alive"  # its runs moved
    assert engine.route(on_alive) == "alive"

    dead_before = dead.calls
    out = await engine.generate([1, 2, 3], max_tokens=2, session=on_dead)
    assert out.prompt_tokens == 3 and dead.calls == dead_before  # skipped while down
    stats = await engine.stats()
    assert stats.requests == 1  # only the alive worker answers stats
    await engine.aclose()


async def test_live_request_is_retried_once_on_the_next_worker() -> None:
    dead = Dead()
    alive = FakeEngine(seconds_per_token=1e-5)
    engine = MultiWorkerEngine({"dead": dead, "alive": alive})
    on_dead = next(s for s in SESSIONS if engine.route(s) == "dead")
    out = await engine.generate([4, 5, 6], max_tokens=3, session=on_dead)
    assert len(out.token_ids) == 3 and dead.calls == 1
    live = await engine.prefill([4, 5], priority=Priority.LIVE, session=SESSIONS[0] + "x")
    assert live.done
    chunks = [c async for c in engine.generate_stream([9, 9], max_tokens=2, session=on_dead)]
    assert chunks[-1].completion is not None
    both_dead = MultiWorkerEngine({"a": Dead(), "b": Dead()}, retry_down_s=60)
    with pytest.raises(EngineUnavailable, match="refused"):  # tried both, raised the last
        await both_dead.generate([1], session="s")
    with pytest.raises(EngineUnavailable, match="no worker is up for 's'"):
        await both_dead.generate([1], session="s")
    await engine.aclose()


async def test_down_worker_gets_traffic_again_after_health_probe() -> None:
    dead = Dead()
    engine = MultiWorkerEngine({"dead": dead, "alive": FakeEngine()}, retry_down_s=0.0)
    on_dead = next(s for s in SESSIONS if engine.route(s) == "dead")
    with pytest.raises(EngineUnavailable):
        await engine.prefill([1], session=on_dead)
    calls = dead.calls
    await engine.generate([1], session=on_dead)  # probe says still dead: goes elsewhere
    assert dead.calls == calls
    dead.alive = True
    await engine.prefill([1], session=on_dead)
    assert dead.calls == calls + 1 and engine.down_workers() == {}
    await engine.aclose()


class Slow(FakeEngine):
    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        raise EngineTimeout("http://slow:1/generate: no answer in time")


async def test_timeouts_do_not_mark_workers_down() -> None:
    engine = MultiWorkerEngine({"slow": Slow(), "other": FakeEngine()})
    on_slow = next(s for s in SESSIONS if engine.route(s) == "slow")
    with pytest.raises(EngineTimeout):
        await engine.generate([1], session=on_slow)
    assert engine.down_workers() == {}
    await engine.aclose()


async def test_urls_become_sglang_engines() -> None:
    engine = MultiWorkerEngine(["http://127.0.0.1:1/", "http://127.0.0.1:2"], tokenizer="byte")
    assert list(engine.workers) == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert engine.encode("ab") == [97, 98]
    assert engine.supports_promotion is False
    with pytest.raises(EngineUnavailable, match="cannot reach"):
        await engine.prefill([1, 2], session="s")
    await engine.aclose()


async def test_the_workers_chat_template_is_the_engines() -> None:
    from agentwarm.chat import QWEN2_5

    engine = MultiWorkerEngine(["http://127.0.0.1:1", "http://127.0.0.1:2"], tokenizer="qwen2.5")
    assert engine.chat_template is QWEN2_5
    await engine.aclose()
    assert MultiWorkerEngine([FakeEngine()]).chat_template is None


class WithTier(FakeEngine):
    """A worker reporting disk-tier figures (as a LocalEngine with ``kv_dir`` does)."""

    def __init__(self, enabled: bool) -> None:
        super().__init__()
        self.enabled = enabled

    async def stats(self) -> EngineStats:
        return dataclasses.replace(
            await super().stats(),
            disk_hit_tokens=5,
            tier_bytes_written=7,
            tier_bytes_read=11,
            tier_loads_refused=1,
            tier_stored_bytes=13,
            tier_enabled=self.enabled,
        )


async def test_the_tier_figures_are_summed_over_the_workers() -> None:
    mixed = MultiWorkerEngine({"a": WithTier(True), "b": WithTier(False), "c": FakeEngine()})
    stats = await mixed.stats()
    assert (
        stats.disk_hit_tokens,
        stats.tier_bytes_written,
        stats.tier_bytes_read,
        stats.tier_loads_refused,
        stats.tier_stored_bytes,
    ) == (10, 14, 22, 2, 26)
    assert stats.tier_enabled is False  # one worker's tier turned itself off
    on = MultiWorkerEngine({"a": WithTier(True), "c": FakeEngine()})
    assert (await on.stats()).tier_enabled is True
    plain = MultiWorkerEngine({"a": FakeEngine(), "b": FakeEngine()})
    assert (await plain.stats()).tier_enabled is None
    for engine in (mixed, on, plain):
        await engine.aclose()
