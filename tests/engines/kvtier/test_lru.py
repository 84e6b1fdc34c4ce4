"""LRU within the byte budget: never over it, the least recently used block goes first, the
order survives a restart (file mtimes)."""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engines.kvtier.helpers import BLOCK, block_path, bytes_per_token, open_tier, prefix_kv

BLOCKS = [[100 + i] * BLOCK for i in range(6)]
"""Six one-block sequences of distinct keys (3-digit ids: every file has the same size)."""


def file_size(where: Path) -> int:
    with open_tier(where / "probe") as tier:
        tier.write("", BLOCKS[0], prefix_kv("", BLOCKS[0]), 0)
        tier.flush()
        return tier.stats().stored_bytes


SIZE = file_size(Path(tempfile.mkdtemp()))


@settings(max_examples=20, deadline=None)
@given(
    budget=st.integers(1, 4),
    ops=st.lists(st.tuples(st.sampled_from("wr"), st.integers(0, 5)), max_size=14),
)
def test_the_tier_keeps_what_an_lru_model_keeps_and_never_exceeds_the_budget(
    budget: int, ops: list[tuple[str, int]]
) -> None:
    model: OrderedDict[int, None] = OrderedDict()
    evicted = 0
    with (
        tempfile.TemporaryDirectory() as where,
        open_tier(Path(where), max_bytes=budget * SIZE) as tier,
    ):
        for op, i in ops:
            ids = BLOCKS[i]
            if op == "w":
                tier.write("", ids, prefix_kv("", ids), 0)
                tier.flush()
                if i not in model:
                    model[i] = None
                    while len(model) > budget:
                        model.popitem(last=False)
                        evicted += 1
            else:
                kv = tier.read("", ids, 0, BLOCK)
                assert (kv is not None) == (i in model)
                if i in model:
                    assert kv is not None and torch.equal(kv, prefix_kv("", ids))
                    model.move_to_end(i)
            stats = tier.stats()
            assert stats.stored_bytes <= budget * SIZE
            assert stats.evicted_blocks == evicted
            stored = {j for j in range(6) if tier.stored_prefix("", BLOCKS[j]) == BLOCK}
            assert stored == set(model)
        files = (tier.root / "default").glob("*.kv")
        assert sorted(p.name for p in files) == sorted(
            block_path(tier, "", BLOCKS[j], 0).name for j in model
        )


def test_a_read_touches_the_file_so_the_order_survives_a_restart(tmp_path: Path) -> None:
    with open_tier(tmp_path) as tier:
        for ids in BLOCKS[:3]:
            tier.write("", ids, prefix_kv("", ids), 0)
        tier.flush()
        for age, ids in enumerate(BLOCKS[:3]):  # written long ago, oldest first
            os.utime(block_path(tier, "", ids, 0), (1000 + age, 1000 + age))
        assert tier.read("", BLOCKS[0], 0, BLOCK) is not None  # now the newest
    with open_tier(tmp_path, max_bytes=2 * SIZE) as again:  # a smaller budget: one must go
        kept = [i for i in range(3) if again.stored_prefix("", BLOCKS[i]) == BLOCK]
        assert kept == [0, 2]
        assert again.stats().evicted_blocks == 1
        assert not block_path(again, "", BLOCKS[1], 0).exists()


def test_a_block_larger_than_the_budget_is_not_written(tmp_path: Path) -> None:
    with open_tier(tmp_path, max_bytes=BLOCK * bytes_per_token() - 1) as tier:
        tier.write("", BLOCKS[0], prefix_kv("", BLOCKS[0]), 0)
        tier.flush()
        assert tier.stats().stored_blocks == tier.stats().blocks_written == 0
    with open_tier(tmp_path, max_bytes=SIZE - 1) as tier:  # the payload fits, the file does not
        tier.write("", BLOCKS[0], prefix_kv("", BLOCKS[0]), 0)
        tier.flush()
        assert tier.stats().stored_blocks == 0  # written, then evicted at once: never over
        assert tier.stats().evicted_blocks == 1
