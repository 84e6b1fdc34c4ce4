"""LocalEngine with the disk KV tier (issue 25): restarts, eviction spills, warm-ups, refusals.

Every engine here runs the real :class:`~agentwarm.engines.kvtier.DiskTier` in a temporary
directory. Writes are asynchronous; a test that needs them on disk waits with ``tier.flush()``
(or closes the engine), never with a sleep. Outputs are compared with a cold forward of the same
weights (no cache at all) or a cold engine's.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from agentwarm.engines.base import PrefillStatus
from agentwarm.engines.kvtier import DiskTier, model_fingerprint
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.local.loading import META_PREFILL_TOKENS_PER_S
from agentwarm.engines.local.model import load_model
from tests.engines.test_local_engine import Pause, cold_greedy, prompt, reference, settle, tiny

BLOCK = 64
OUT = 6


def tier_engine(kv_dir: Path, **kwargs: object) -> LocalEngine:
    kwargs.setdefault("check_integrity_on_idle", True)
    return LocalEngine(tiny(), kv_dir=kv_dir, **kwargs)  # type: ignore[arg-type]


def whole_blocks(n: int) -> int:
    return n // BLOCK * BLOCK


async def store(
    kv_dir: Path, ids: list[int], *, namespace: str = "", **kwargs: object
) -> tuple[int, ...]:
    """Run ``ids`` on a first, cold engine over ``kv_dir`` and stop it (its cache is spilled);
    its greedy output."""
    async with tier_engine(kv_dir, **kwargs) as first:
        out = await first.generate(ids, max_tokens=OUT, namespace=namespace)
        assert out.cached_tokens_by_source == {"device": 0, "disk": 0}
        return out.token_ids


# --------------------------------------------------------------------- restarts


async def test_a_restarted_engine_serves_the_prompt_from_disk(tmp_path: Path) -> None:
    ids = prompt(random.Random(1), 600)
    cold = await store(tmp_path, ids)
    async with tier_engine(tmp_path) as second:
        out = await second.generate(ids, max_tokens=OUT)
        # The generate computes its last prompt token: whole blocks of the first 599 come
        # from disk, the rest is computed.
        assert out.cached_tokens_by_source == {"device": 0, "disk": whole_blocks(599)}
        assert out.cached_tokens == 576 and out.computed_tokens == 24
        assert out.token_ids == cold
        kinds = [(e.kind, e.start, e.stop) for e in second.scheduler.events]
        loads = [("load", 0, 256), ("load", 256, 512), ("load", 512, 576)]
        assert kinds[:4] == [*loads, ("prefill", 576, 600)]
        stats = await second.stats()
        assert (stats.hit_tokens, stats.disk_hit_tokens, stats.computed_tokens) == (576, 576, 24)
        assert stats.tier_enabled is True and stats.tier_loads_refused == 0
        assert stats.tier_bytes_read >= 576 * second.runner.kv_bytes_per_token
        await settle(second)
        # A second request finds it in the radix tree now.
        again = await second.generate(ids, max_tokens=OUT)
        assert again.cached_tokens_by_source == {"device": 599, "disk": 0}
        assert again.token_ids == out.token_ids


async def test_a_warm_up_prefill_loads_from_disk(tmp_path: Path) -> None:
    ids = prompt(random.Random(2), 600)
    cold = await store(tmp_path, ids)
    async with tier_engine(tmp_path) as second:
        warm = await second.prefill(ids)
        assert warm.done
        assert warm.cached_tokens_by_source == {"device": 0, "disk": 576}
        assert (warm.cached_tokens, warm.computed_tokens) == (576, 24)
        out = await second.generate(ids, max_tokens=OUT)
        assert out.cached_tokens_by_source == {"device": 599, "disk": 0}
        assert out.token_ids == cold
        await settle(second)


async def test_a_prefill_found_whole_on_disk_computes_nothing(tmp_path: Path) -> None:
    ids = prompt(random.Random(3), 4 * BLOCK)
    await store(tmp_path, ids)
    async with tier_engine(tmp_path) as second:
        warm = await second.prefill(ids)
        assert warm.cached_tokens_by_source == {"device": 0, "disk": 4 * BLOCK}
        assert warm.computed_tokens == 0
        await settle(second)


async def test_an_engine_without_a_tier_reports_no_split(tmp_path: Path) -> None:
    ids = prompt(random.Random(4), 80)
    async with LocalEngine(tiny()) as engine:
        out = await engine.generate(ids, max_tokens=2)
        assert out.cached_tokens_by_source == {}
        stats = await engine.stats()
        assert stats.tier_enabled is None and stats.disk_hit_tokens == 0


@pytest.mark.slow
async def test_small_restart_from_disk_gives_the_cold_tokens(tmp_path: Path) -> None:
    small = load_model("small", seed=0)
    ids = prompt(random.Random(5), 3000)
    async with LocalEngine(small, kv_dir=tmp_path) as first:
        cold = await first.generate(ids, max_tokens=8)
        assert cold.cached_tokens == 0
    async with LocalEngine(small, kv_dir=tmp_path, check_integrity_on_idle=True) as second:
        warm = await second.generate(ids, max_tokens=8)
        assert warm.cached_tokens_by_source == {"device": 0, "disk": whole_blocks(2999)}
        assert warm.computed_tokens == 3000 - whole_blocks(2999)
        assert warm.token_ids == cold.token_ids
        await settle(second)


# ---------------------------------------------------------------------- spills


async def test_an_evicted_prefix_comes_back_from_disk(tmp_path: Path) -> None:
    rng = random.Random(6)
    first, other = prompt(rng, 4 * BLOCK), prompt(rng, 4 * BLOCK)
    async with tier_engine(tmp_path, max_cached_tokens=5 * BLOCK) as engine:
        out = await engine.generate(first, max_tokens=4)
        await engine.generate(other, max_tokens=4)  # evicts `first`, which is spilled
        stats = await engine.stats()
        assert stats.evicted_tokens >= 4 * BLOCK
        assert engine.disk is not None
        await asyncio.to_thread(engine.disk.tier.flush)
        again = await engine.generate(first, max_tokens=4)
        assert again.cached_tokens_by_source == {"device": 0, "disk": 3 * BLOCK}
        assert again.token_ids == out.token_ids  # the first run was cold
        stats = await engine.stats()
        assert stats.disk_hit_tokens == 3 * BLOCK and stats.tier_bytes_written > 0
        await settle(engine)


async def test_a_flush_spills_nothing(tmp_path: Path) -> None:
    ids = prompt(random.Random(7), 3 * BLOCK)
    async with tier_engine(tmp_path) as engine:
        await engine.prefill(ids)
        await engine.flush_cache()
        assert engine.disk is not None
        await asyncio.to_thread(engine.disk.tier.flush)
        again = await engine.prefill(ids)
        assert again.cached_tokens_by_source == {"device": 0, "disk": 0}


# ------------------------------------------------------------- loading decisions


async def test_a_load_slower_than_recomputing_is_refused(tmp_path: Path) -> None:
    ids = prompt(random.Random(8), 600)
    cold = await store(tmp_path, ids)
    # Real figures through the tier's own API: a real read measures the read throughput, and
    # the persisted prefill throughput says recomputing is faster than any disk.
    tier = DiskTier(
        tmp_path,
        fingerprint=model_fingerprint(tiny(), chunk_size=256),
        kv_bytes_per_token=reference().kv_bytes_per_token,
        max_bytes=1 << 30,
    )
    assert tier.read("", ids, 0, BLOCK) is not None
    assert tier.read_bytes_per_s is not None
    tier.meta[META_PREFILL_TOKENS_PER_S] = 1e15
    tier.close()
    async with tier_engine(tmp_path) as second:
        out = await second.generate(ids, max_tokens=OUT)
        assert out.cached_tokens_by_source == {"device": 0, "disk": 0}
        assert out.computed_tokens == 600
        stats = await second.stats()
        assert stats.tier_loads_refused == 1 and stats.disk_hit_tokens == 0
        assert out.token_ids == cold
        await settle(second)


async def test_the_measured_prefill_throughput_outlives_the_process(tmp_path: Path) -> None:
    ids = prompt(random.Random(9), 300)
    async with tier_engine(tmp_path) as first:
        await first.prefill(ids)
        assert first.disk is not None
        measured = first.disk.loader.prefill_tokens_per_s
        assert measured is not None and measured > 0
    async with tier_engine(tmp_path) as second:
        assert second.disk is not None
        assert second.disk.loader.prefill_tokens_per_s == pytest.approx(measured)


# ---------------------------------------------------------------------- tenants


async def test_a_namespace_never_loads_another_namespaces_blocks(tmp_path: Path) -> None:
    ids = prompt(random.Random(10), 300)
    await store(tmp_path, ids, namespace="a")
    async with tier_engine(tmp_path) as second:
        other = await second.generate(ids, max_tokens=4, namespace="b")
        assert other.cached_tokens_by_source == {"device": 0, "disk": 0}
        own = await second.generate(ids, max_tokens=4, namespace="a")
        assert own.cached_tokens_by_source == {"device": 0, "disk": whole_blocks(299)}
        assert own.token_ids == other.token_ids
        await settle(second)


# ------------------------------------------------------------------ preemption


async def test_a_live_request_runs_between_two_load_steps(tmp_path: Path) -> None:
    rng = random.Random(11)
    spec_ids = prompt(rng, 600)
    live_ids = prompt(rng, 70)
    await store(tmp_path, spec_ids, chunk_size=BLOCK)
    pause = Pause(lambda e: e.rid == "spec" and e.kind == "load" and e.start == BLOCK)
    async with tier_engine(tmp_path, chunk_size=BLOCK, step_hook=pause) as engine:
        spec = asyncio.create_task(engine.prefill(spec_ids, rid="spec"))
        await pause.wait()
        live = asyncio.create_task(engine.generate(live_ids, rid="live", max_tokens=3))
        await asyncio.sleep(0)  # the live request is submitted
        pause.go.set()
        completion = await live
        result = await spec
        events = [(e.kind, e.rid, e.start) for e in engine.scheduler.events]
        paused_at = events.index(("load", "spec", BLOCK))
        live_steps = [i for i, e in enumerate(events) if e[1] == "live"]
        # The load step in flight finished; the live request ran next, all of it, then the
        # speculative load went on where it stopped.
        assert live_steps == list(range(paused_at + 1, paused_at + 1 + 4))  # 2 chunks, 2 decodes
        assert events[live_steps[-1] + 1] == ("load", "spec", 2 * BLOCK)
        assert list(completion.token_ids) == cold_greedy(live_ids, 3)
        assert result.done
        assert result.cached_tokens_by_source == {"device": 0, "disk": whole_blocks(600)}
        assert result.computed_tokens == 600 - whole_blocks(600)
        await settle(engine)


async def test_a_live_request_over_a_speculative_load_loads_the_rest_itself(
    tmp_path: Path,
) -> None:
    ids = prompt(random.Random(14), 600)
    cold = await store(tmp_path, ids, chunk_size=BLOCK)
    pause = Pause(lambda e: e.rid == "spec" and e.kind == "load" and e.start == BLOCK)
    async with tier_engine(tmp_path, chunk_size=BLOCK, step_hook=pause) as engine:
        spec = asyncio.create_task(engine.prefill(ids, rid="spec"))
        await pause.wait()
        live = asyncio.create_task(engine.generate(ids, rid="live", max_tokens=OUT))
        await asyncio.sleep(0)
        pause.go.set()
        completion = await live
        result = await spec
        # The speculative load got two blocks in; the live request took those from the tree
        # and loaded the rest; the speculative one then found everything there.
        assert completion.cached_tokens_by_source == {"device": 2 * BLOCK, "disk": 576 - 128}
        assert completion.computed_tokens == 24 and completion.token_ids == cold
        assert result.cached_tokens_by_source == {"device": 600 - 2 * BLOCK, "disk": 2 * BLOCK}
        assert result.computed_tokens == 0
        assert engine.disk is not None
        assert engine.disk.tier.stats().blocks_read == 576 // BLOCK  # no block read twice
        await settle(engine)


async def test_an_abort_between_load_steps_keeps_what_was_loaded(tmp_path: Path) -> None:
    ids = prompt(random.Random(15), 600)
    cold = await store(tmp_path, ids, chunk_size=BLOCK)
    pause = Pause(lambda e: e.rid == "spec" and e.kind == "load" and e.start == 2 * BLOCK)
    async with tier_engine(tmp_path, chunk_size=BLOCK, step_hook=pause) as engine:
        spec = asyncio.create_task(engine.prefill(ids, rid="spec"))
        await pause.wait()
        await engine.abort("spec")
        pause.go.set()
        result = await spec
        assert result.status is PrefillStatus.ABORTED
        # The step in flight finished (three blocks loaded), then the abort took effect.
        assert result.cached_tokens_by_source == {"device": 0, "disk": 3 * BLOCK}
        assert result.computed_tokens == 0
        await settle(engine)
        out = await engine.generate(ids, max_tokens=OUT)
        assert out.cached_tokens_by_source == {"device": 3 * BLOCK, "disk": 576 - 3 * BLOCK}
        assert out.token_ids == cold
        await settle(engine)
