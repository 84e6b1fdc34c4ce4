"""The host-RAM tier (``HostTier``, for ``device="cuda"``): the disk tier's keys, exact round
trips, longest stored runs against a model, LRU within its byte budget, namespaces apart; its
logic on CPU (``pin_memory`` off), the pinned path on a GPU (``-m gpu``, skipped without one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentwarm.engines.kvtier import DiskTier
from agentwarm.engines.kvtier.host import HostTier
from agentwarm.engines.kvtier.keys import block_keys
from tests.engines.kvtier.helpers import BLOCK, bytes_per_token, prefix_kv

BLOCK_BYTES = BLOCK * bytes_per_token()
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def tier(blocks: int = 100, pin_memory: bool | None = None) -> HostTier:
    return HostTier(max_bytes=blocks * BLOCK_BYTES, block_tokens=BLOCK, pin_memory=pin_memory)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_blocks_come_back_exactly(dtype: torch.dtype) -> None:
    host = tier(blocks=1000)
    ids = list(range(10, 23))  # 3 whole blocks and 1 token
    kv = prefix_kv("", ids, dtype=dtype)
    assert host.write("", ids, kv, 0) == 3
    assert host.stored_prefix("", ids) == 12
    back = host.read("", ids, 4, 12)
    assert back is not None and back.dtype == dtype
    assert torch.equal(back, kv.narrow(3, 4, 8))
    assert host.read("", ids, 0, 16) is None  # the partial block was not stored
    assert host.read("", ids, 2, 8) is None  # not block-aligned


def test_the_keys_are_the_disk_tiers(tmp_path: Path) -> None:
    ids = list(range(40))
    host = tier()
    assert host.keys(ids) == block_keys(ids, BLOCK)
    disk = DiskTier(
        tmp_path,
        fingerprint="f",
        kv_bytes_per_token=bytes_per_token(),
        max_bytes=1 << 20,
        block_tokens=BLOCK,
    )
    try:  # a prefix stored in each tier is found at the same block boundaries
        host.write("ns", ids[:16], prefix_kv("ns", ids[:16]), 0)
        disk.write("ns", ids, prefix_kv("ns", ids), 0)
        disk.flush()
        assert host.stored_prefix("ns", ids) == 16
        assert disk.stored_prefix("ns", ids, 16) == 40  # the disk tier has what follows
    finally:
        disk.close()


def test_a_write_after_the_first_blocks_extends_the_run() -> None:
    host = tier()
    ids = list(range(100, 124))
    assert host.write("", ids[:8], prefix_kv("", ids[:8]), 0) == 2
    assert host.stored_prefix("", ids, 8) == 8  # the block holding 8 is not stored
    assert host.write("", ids, prefix_kv("", ids, 8), 8) == 4
    assert host.write("", ids, prefix_kv("", ids, 8), 8) == 0  # already stored
    assert host.stored_prefix("", ids) == 24
    full = host.read("", ids, 0, 24)
    assert full is not None and torch.equal(full, prefix_kv("", ids))
    with pytest.raises(ValueError, match="must be a multiple of 4 and kv must cover"):
        host.write("", ids, prefix_kv("", ids, 8), 6)


def test_least_recently_used_blocks_go_first_and_the_budget_holds() -> None:
    host = tier(blocks=4)
    a, b = [1] * 8, [2] * 8  # two blocks each
    host.write("", a, prefix_kv("", a), 0)
    host.write("", b, prefix_kv("", b), 0)
    assert host.read("", a, 0, 8) is not None  # a is now the most recently used
    c = [3] * 4
    host.write("", c, prefix_kv("", c), 0)
    stats = host.stats()
    assert (stats.stored_blocks, stats.stored_bytes, stats.evicted_blocks) == (
        4,
        4 * BLOCK_BYTES,
        1,
    )
    assert host.stored_prefix("", b) == 0  # b's first block went: its run is gone
    assert host.stored_prefix("", a) == 8 and host.stored_prefix("", c) == 4
    assert tier(blocks=0).write("", c, prefix_kv("", c), 0) == 0  # no room at all


def test_namespaces_never_share_a_block() -> None:
    host = tier()
    ids = list(range(8))
    host.write("a", ids, prefix_kv("a", ids), 0)
    assert host.stored_prefix("b", ids) == 0 and host.read("b", ids, 0, 8) is None
    assert host.stored_prefix("a", ids) == 8


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["", "t"]), st.lists(st.integers(0, 2), max_size=14)),
        max_size=8,
    ),
    st.lists(st.integers(0, 2), max_size=14),
)
def test_stored_prefix_is_the_longest_stored_run(
    writes: list[tuple[str, list[int]]], probe: list[int]
) -> None:
    host = tier(blocks=10_000)  # nothing evicted: the model is the set of stored prefixes
    stored: set[tuple[str, tuple[int, ...]]] = set()
    for ns, ids in writes:
        host.write(ns, ids, prefix_kv(ns, ids), 0)
        stored |= {(ns, tuple(ids[:end])) for end in range(BLOCK, len(ids) + 1, BLOCK)}
    for ns in ("", "t"):
        end = 0
        while end + BLOCK <= len(probe) and (ns, tuple(probe[: end + BLOCK])) in stored:
            end += BLOCK
        assert host.stored_prefix(ns, probe) == end
        if end:
            back = host.read(ns, probe, 0, end)
            assert back is not None and torch.equal(back, prefix_kv(ns, probe[:end]))


def test_off_cuda_nothing_is_pinned_and_pinning_is_refused() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine pins by default")
    assert tier().pinned is False and tier().stats().pinned is False
    with pytest.raises(ValueError, match=r"needs CUDA .* the radix cache is the host tier"):
        tier(pin_memory=True)


@pytest.mark.gpu
@NEEDS_CUDA
def test_on_cuda_blocks_are_pinned_and_come_back_on_the_device() -> None:
    host = tier(blocks=1000)
    assert host.pinned is True
    ids = list(range(50, 66))
    kv = prefix_kv("", ids, dtype=torch.bfloat16).to("cuda")
    assert host.write("", ids, kv, 0) == 4
    assert all(block.kv.is_pinned() for block in host._blocks.values())
    on_gpu = host.read("", ids, 0, 16, device="cuda")
    assert on_gpu is not None and on_gpu.device.type == "cuda"
    assert torch.equal(on_gpu, kv)
    on_cpu = host.read("", ids, 4, 12)  # waits for the copy out of the GPU
    assert on_cpu is not None and torch.equal(on_cpu, kv[:, :, :, 4:12].cpu())
