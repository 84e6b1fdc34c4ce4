"""The disk tier's parts inside the engine, on the real DiskTier with small tensors: the spill
of an evicted node (block alignment, the path above it, blocks already stored), and the
loader's decision and prefill-throughput EWMA."""

from __future__ import annotations

from pathlib import Path

import torch

from agentwarm.engines.kvtier import DiskTier
from agentwarm.engines.kvtier.stack import TierStack
from agentwarm.engines.local.kv import KV_OPS
from agentwarm.engines.local.loading import META_PREFILL_TOKENS_PER_S, Loader
from agentwarm.engines.local.prefixes import Prefixes
from agentwarm.engines.local.spill import Spiller
from agentwarm.engines.radix import RadixCache

BLOCK = 8
SHAPE = (2, 2, 1, 0, 4)  # layers, K/V, kv heads, tokens, head dim
BYTES_PER_TOKEN = 2 * 2 * 1 * 4 * 4


def kv_of(n: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(SHAPE[0], SHAPE[1], SHAPE[2], n, SHAPE[4], generator=gen)


def tier_at(path: Path) -> DiskTier:
    return DiskTier(
        path,
        fingerprint="test-model",
        kv_bytes_per_token=BYTES_PER_TOKEN,
        max_bytes=1 << 20,
        block_tokens=BLOCK,
    )


def test_an_evicted_node_spills_its_blocks_from_the_boundary_below_its_start(
    tmp_path: Path,
) -> None:
    tier = tier_at(tmp_path)
    ids = list(range(100, 140))  # 40 tokens
    kv = kv_of(40)
    cache: RadixCache[torch.Tensor] = RadixCache(
        None, ops=KV_OPS, on_evict=Spiller(TierStack(tier)).spill
    )
    cache.insert("", ids[:13], kv[:, :, :, :13].clone())
    cache.insert("", ids, kv[:, :, :, 13:].clone(), value_offset=13)  # node [13, 40)
    assert cache.evict(27) == 27  # the leaf [13, 40) goes
    tier.flush()
    # Blocks [8, 40) hold the leaf's tokens; block [0, 8) is still cached, so not written.
    assert tier.stored_prefix("", ids, 0) == 0
    assert tier.stored_prefix("", ids, 8) == 40
    read = tier.read("", ids, 8, 40)
    assert read is not None and torch.equal(read, kv[:, :, :, 8:40])
    # The rest goes too: its one whole block is written, the tail of 5 tokens is not.
    cache.evict(13)
    tier.flush()
    assert tier.stored_prefix("", ids, 0) == 40
    assert tier.stats().stored_blocks == 5
    tier.close()


def test_spill_all_writes_what_is_cached_once(tmp_path: Path) -> None:
    tier = tier_at(tmp_path)
    cache: RadixCache[torch.Tensor] = RadixCache(None, ops=KV_OPS)
    a, b = list(range(24)), [*range(16), *range(50, 58)]  # share the first 16
    kv = kv_of(24, seed=1)
    other = kv_of(8, seed=2)
    cache.insert("", a, kv.clone())
    cache.insert("", b, other.clone(), value_offset=16)
    spiller = Spiller(TierStack(tier))
    spiller.spill_all(cache)
    spiller.spill_all(cache)  # nothing new: every block is stored already
    tier.flush()
    assert tier.stats().stored_blocks == 4  # [0, 8) and [8, 16) shared, [16, 24) of each
    read = tier.read("", b, 0, 24)
    assert read is not None and torch.equal(read, torch.cat([kv[:, :, :, :16], other], dim=3))
    assert tier.stats().blocks_written == 4
    tier.close()


def test_the_loader_loads_while_a_figure_is_unknown_then_decides_by_them(tmp_path: Path) -> None:
    tier = tier_at(tmp_path)
    ids = list(range(16))
    tier.write("", ids, kv_of(16), 0)
    tier.flush()
    cache: RadixCache[torch.Tensor] = RadixCache(None, ops=KV_OPS)
    loader = Loader(
        TierStack(tier),
        Prefixes(cache, 0.0),
        chunk_size=256,
        kv_bytes_per_token=BYTES_PER_TOKEN,
        place=lambda kv: kv,
    )
    assert loader.prefill_tokens_per_s is None and tier.read_bytes_per_s is None
    assert loader.worth_loading(16, 16)  # nothing measured yet: load (and so measure)
    assert tier.read("", ids, 0, 16) is not None
    assert tier.read_bytes_per_s is not None  # measured now
    loader.prefill_tokens_per_s = 1e-3  # recomputing 16 tokens would take hours
    assert loader.worth_loading(16, 16)
    loader.prefill_tokens_per_s = 1e18  # recomputing is faster than any read
    assert not loader.worth_loading(16, 16)
    tier.close()


def test_the_prefill_ewma_weighs_chunks_by_length_and_is_kept_in_the_tier(tmp_path: Path) -> None:
    tier = tier_at(tmp_path)
    loader = Loader(
        TierStack(tier),
        Prefixes(RadixCache(None, ops=KV_OPS), 0.0),
        chunk_size=256,
        kv_bytes_per_token=BYTES_PER_TOKEN,
        place=lambda kv: kv,
    )
    loader.observe_prefill(256, 1.0)
    assert loader.prefill_tokens_per_s == 256.0  # the first figure is taken whole
    loader.observe_prefill(256, 0.5)  # 512 tok/s, a full chunk: weight 0.25
    assert loader.prefill_tokens_per_s == 320.0
    loader.observe_prefill(128, 0.25)  # 512 tok/s, half a chunk: weight 0.125
    assert loader.prefill_tokens_per_s == 344.0
    assert tier.meta[META_PREFILL_TOKENS_PER_S] == 344.0
    tier.close()
    again = tier_at(tmp_path)
    seeded = Loader(
        TierStack(again),
        Prefixes(RadixCache(None, ops=KV_OPS), 0.0),
        chunk_size=256,
        kv_bytes_per_token=BYTES_PER_TOKEN,
        place=lambda kv: kv,
    )
    assert seeded.prefill_tokens_per_s == 344.0
    again.close()
