"""LocalEngine with a host-RAM tier above the disk tier (issue 25 §1, ``kv_host_bytes``).

On CUDA the host tier is on by default (pinned memory); on CPU the radix cache is already in host
memory, so there is none unless ``kv_host_bytes`` asks for one: these CPU tests do, to run the
same wiring (write-through spills, host-first loads, the ``"host"`` source) that the ``gpu`` test
runs pinned on a GPU. Writes to disk are asynchronous: tests wait with ``tier.flush()``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import pytest
import torch

from agentwarm.engines.local import LocalEngine
from agentwarm.errors import InvalidRequest
from tests.engines.test_local_engine import prompt, settle, tiny

BLOCK = 64


def host_engine(kv_dir: Path, host_blocks: int, **kwargs: object) -> LocalEngine:
    model = tiny()
    probe = LocalEngine(model)
    per_token = probe.runner.kv_bytes_per_token
    kwargs.setdefault("check_integrity_on_idle", True)
    return LocalEngine(
        model,
        kv_dir=kv_dir,
        kv_host_bytes=host_blocks * BLOCK * per_token,
        **kwargs,  # type: ignore[arg-type]
    )


async def evict_and_return(engine: LocalEngine, rng: random.Random) -> tuple[object, object]:
    """Generate a 4-block prompt, evict it with another, flush the disk writes, run it again:
    (the first completion, the second)."""
    first, other = prompt(rng, 4 * BLOCK), prompt(rng, 4 * BLOCK)
    other[0] = (first[0] + 1) % 256  # nothing shared: the whole run comes from a lower tier
    out = await engine.generate(first, max_tokens=4)
    await engine.generate(other, max_tokens=4)  # evicts `first`: spilled to both tiers
    assert engine.disk is not None
    await asyncio.to_thread(engine.disk.tier.flush)
    again = await engine.generate(first, max_tokens=4)
    return out, again


async def test_an_evicted_prefix_comes_back_from_host_ram(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agentwarm.engines.local.disk"):
        engine = host_engine(tmp_path, host_blocks=64, max_cached_tokens=5 * BLOCK)
    warnings = [r.getMessage() for r in caplog.records if "kv_host_bytes" in r.getMessage()]
    assert len(warnings) == 1 and "leave it unset on CPU" in warnings[0]
    async with engine:
        assert engine.disk is not None and engine.disk.host is not None
        assert engine.disk.host.pinned is False
        out, again = await evict_and_return(engine, random.Random(11))
        assert again.cached_tokens_by_source == {"device": 0, "host": 3 * BLOCK, "disk": 0}
        assert again.token_ids == out.token_ids  # the first run was cold
        stats = await engine.stats()
        assert stats.disk_hit_tokens == 3 * BLOCK  # every tier below the device counts
        assert stats.host_tier_max_bytes == 64 * BLOCK * engine.runner.kv_bytes_per_token
        assert stats.host_tier_stored_bytes > 0
        assert engine.disk.tier.stats().blocks_read == 0  # the disk was not read
        assert engine.disk.tier.stats().stored_blocks >= 4  # but it has them (write-through)
        await settle(engine)


async def test_what_host_ram_dropped_comes_from_disk(tmp_path: Path) -> None:
    # One block of host RAM: of the evicted prompt's blocks it keeps the last one written,
    # so the run from the start of the prompt is served by the disk.
    async with host_engine(tmp_path, host_blocks=1, max_cached_tokens=5 * BLOCK) as engine:
        out, again = await evict_and_return(engine, random.Random(12))
        assert again.cached_tokens_by_source == {"device": 0, "host": 0, "disk": 3 * BLOCK}
        assert again.token_ids == out.token_ids
        assert engine.disk is not None
        assert engine.disk.host is not None and engine.disk.host.stats().evicted_blocks > 0
        await settle(engine)


async def test_after_a_restart_the_disk_serves_what_host_ram_lost(tmp_path: Path) -> None:
    ids = prompt(random.Random(13), 5 * BLOCK)
    async with host_engine(tmp_path, host_blocks=64) as first:
        cold = await first.generate(ids, max_tokens=4)
    async with host_engine(tmp_path, host_blocks=64) as second:
        warm = await second.generate(ids, max_tokens=4)
        assert warm.cached_tokens_by_source == {"device": 0, "host": 0, "disk": 4 * BLOCK}
        assert warm.token_ids == cold.token_ids
        await settle(second)


async def test_the_host_tier_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="kv_host_bytes needs kv_dir"):
        LocalEngine(tiny(), kv_host_bytes=1 << 20)
    with pytest.raises(InvalidRequest, match="kv_host_bytes must be >= 0"):
        LocalEngine(tiny(), kv_dir=tmp_path, kv_host_bytes=-1)
    async with LocalEngine(tiny(), kv_dir=tmp_path) as engine:  # CPU: no host tier by default
        assert engine.disk is not None and engine.disk.host is None
        out = await engine.generate(prompt(random.Random(14), 80), max_tokens=1)
        assert out.cached_tokens_by_source == {"device": 0, "disk": 0}  # no "host" key
        assert (await engine.stats()).host_tier_max_bytes == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
async def test_on_cuda_the_pinned_host_tier_serves_an_evicted_prefix(tmp_path: Path) -> None:
    rng = random.Random(15)
    async with LocalEngine(
        "tiny", device="cuda", kv_dir=tmp_path, max_cached_tokens=5 * BLOCK
    ) as engine:
        assert engine.disk is not None and engine.disk.host is not None  # on by default
        assert engine.disk.host.pinned is True
        out, again = await evict_and_return(engine, rng)
        assert again.cached_tokens_by_source == {"device": 0, "host": 3 * BLOCK, "disk": 0}
        assert again.token_ids == out.token_ids
        assert (await engine.stats()).host_tier_stored_bytes > 0
