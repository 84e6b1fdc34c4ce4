"""Faults of the disk tier reach LocalEngine safely (issue 25): a damaged store is recomputed,
with the same tokens and a warning, never loaded."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from agentwarm.engines.kvtier.keys import block_keys
from agentwarm.engines.local import LocalEngine
from tests.engines.test_local_engine import prompt, settle, tiny


async def store(kv_dir: Path, ids: list[int]) -> tuple[tuple[int, ...], list[Path]]:
    """Run ``ids`` on a cold engine over ``kv_dir`` and stop it: its greedy output, and the
    block files it left."""
    async with LocalEngine(tiny(), kv_dir=kv_dir) as first:
        out = await first.generate(ids, max_tokens=6)
    files = sorted(kv_dir.rglob("*.kv"))
    assert len(files) == len(ids) // 64
    return out.token_ids, files


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


@pytest.mark.parametrize("damage", [flip_middle_byte, truncate])
async def test_damaged_blocks_are_recomputed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    ids = prompt(random.Random(12), 600)
    cold, files = await store(tmp_path, ids)
    for path in files:
        damage(path)  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="agentwarm.engines"):
        async with LocalEngine(tiny(), kv_dir=tmp_path, check_integrity_on_idle=True) as second:
            out = await second.generate(ids, max_tokens=6)
            assert out.cached_tokens_by_source == {"device": 0, "disk": 0}
            assert out.computed_tokens == 600
            assert out.token_ids == cold
            await settle(second)
    assert [r for r in caplog.records if r.levelno == logging.WARNING] != []


async def test_a_damaged_later_block_keeps_the_blocks_read_before_it(tmp_path: Path) -> None:
    ids = prompt(random.Random(13), 600)
    cold, _ = await store(tmp_path, ids)
    # Block 5 (tokens [320, 384)) sits in the second load step, [256, 512).
    (damaged,) = tmp_path.rglob(f"{block_keys(ids, 64)[5]}.kv")
    flip_middle_byte(damaged)
    async with LocalEngine(tiny(), kv_dir=tmp_path, check_integrity_on_idle=True) as second:
        out = await second.generate(ids, max_tokens=6)
        assert out.cached_tokens_by_source == {"device": 0, "disk": 256}
        assert out.computed_tokens == 600 - 256
        assert out.token_ids == cold
        assert second.disk is not None
        stats = second.disk.tier.stats()
        assert stats.blocks_rejected == 1 and not damaged.exists()
        assert second.disk.loader.loads_failed == 1
        await settle(second)
