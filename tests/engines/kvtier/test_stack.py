"""The stack of tiers under the radix cache (``TierStack``): host RAM above disk, write-through,
reads from the host tier first, runs that cross from one tier to the other, each priced at its own
tier's measured throughput. On CPU (the host tier unpinned), with the real ``DiskTier``."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwarm.engines.kvtier import DiskTier
from agentwarm.engines.kvtier.host import HostTier
from agentwarm.engines.kvtier.stack import DISK, HOST, Run, TierStack
from tests.engines.kvtier.helpers import BLOCK, bytes_per_token, open_tier, prefix_kv

CPU = torch.device("cpu")
BPT = bytes_per_token()


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[DiskTier]:
    tier = open_tier(tmp_path)
    yield tier
    tier.close()


def host_of(blocks: int = 1000) -> HostTier:
    return HostTier(max_bytes=blocks * BLOCK * BPT, block_tokens=BLOCK)


def test_a_spill_is_written_through_to_both_tiers(disk: DiskTier) -> None:
    stack = TierStack(disk, host_of())
    ids = list(range(10, 23))  # three whole blocks and a token
    stack.write("", ids, prefix_kv("", ids), 0)
    disk.flush()
    assert stack.host is not None and stack.host.stored_prefix("", ids) == 12
    assert disk.stored_prefix("", ids) == 12
    assert stack.stored_everywhere("", ids, 0) == 12
    assert stack.runs("", ids, 0, len(ids)) == [Run(0, 12, HOST)]  # the host tier answers first


def test_a_durable_write_skips_the_host_tier(disk: DiskTier) -> None:
    host = host_of()
    stack = TierStack(disk, host)
    ids = list(range(8))
    stack.write("", ids, prefix_kv("", ids), 0, durable=True)
    disk.flush()
    assert host.stored_prefix("", ids) == 0 and disk.stored_prefix("", ids) == 8
    assert stack.stored_everywhere("", ids, 0) == 0  # a later spill still fills the host tier


def test_a_run_starts_in_host_ram_and_ends_on_disk(disk: DiskTier) -> None:
    host = host_of()
    stack = TierStack(disk, host)
    ids = list(range(100, 124))  # six blocks
    disk.write("", ids, prefix_kv("", ids), 0)
    disk.flush()
    host.write("", ids[:8], prefix_kv("", ids[:8]), 0)  # the first two blocks only
    runs = stack.runs("", ids, 0, 24)
    assert runs == [Run(0, 8, HOST), Run(8, 24, DISK)]
    assert stack.stored_prefix("", ids, 0) == 24
    kv = stack.read("", ids, runs, CPU)
    assert kv is not None and torch.equal(kv, prefix_kv("", ids))
    assert host.stats().blocks_read == 2 and disk.stats().blocks_read == 4
    assert stack.runs("", ids, 5, 14) == [Run(4, 8, HOST), Run(8, 12, DISK)]  # whole blocks


def test_a_block_only_in_host_ram_bridges_a_gap_on_disk(disk: DiskTier) -> None:
    host = host_of()
    stack = TierStack(disk, host)
    ids = list(range(12))
    disk.write("", ids[:4], prefix_kv("", ids[:4]), 0)
    disk.write("", ids, prefix_kv("", ids, 8), 8)  # blocks 0 and 2 on disk, not block 1
    disk.flush()
    host.write("", ids[:8], prefix_kv("", ids[:8]), 0)  # blocks 0 and 1 in host RAM
    assert stack.runs("", ids, 0, 12) == [Run(0, 8, HOST), Run(8, 12, DISK)]
    assert TierStack(disk).runs("", ids, 0, 12) == [Run(0, 4, DISK)]  # disk alone stops at 4


def test_a_run_the_host_tier_dropped_since_is_not_served(disk: DiskTier) -> None:
    host = host_of(blocks=2)
    stack = TierStack(disk, host)
    a, b = [1] * 8, [2] * 8
    host.write("", a, prefix_kv("", a), 0)
    runs = stack.runs("", a, 0, 8)
    host.write("", b, prefix_kv("", b), 0)  # a's blocks go (LRU), and a is not on disk
    assert stack.read("", a, runs, CPU) is None
    assert stack.runs("", a, 0, 8) == []


def test_loads_are_priced_at_each_tiers_measured_rate(disk: DiskTier) -> None:
    host = host_of()
    stack = TierStack(disk, host)
    assert stack.load_seconds({HOST: 8, DISK: 0}, BPT) is None  # nothing measured yet
    ids = list(range(8))
    stack.write("", ids, prefix_kv("", ids), 0)
    disk.flush()
    assert stack.read("", ids, [Run(0, 8, HOST)], CPU) is not None
    host_rate = host.read_bytes_per_s
    assert host_rate is not None and host_rate > 0
    assert stack.load_seconds({HOST: 8}, BPT) == pytest.approx(8 * BPT / host_rate)
    assert stack.load_seconds({HOST: 8, DISK: 4}, BPT) is None  # the disk has not read yet
    assert disk.read("", ids, 0, 8) is not None
    disk_rate = disk.read_bytes_per_s
    assert disk_rate is not None
    assert stack.load_seconds({HOST: 8, DISK: 4}, BPT) == pytest.approx(
        8 * BPT / host_rate + 4 * BPT / disk_rate
    )
    assert stack.load_seconds({HOST: 0, DISK: 0}, BPT) == 0.0


def test_the_tiers_blocks_must_agree(disk: DiskTier) -> None:
    with pytest.raises(ValueError, match="must be the disk tier's"):
        TierStack(disk, HostTier(max_bytes=1 << 20, block_tokens=BLOCK * 2))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 2), max_size=16)), max_size=8),
    st.lists(st.integers(0, 2), max_size=16),
)
def test_runs_cover_the_longest_prefix_stored_in_either_tier(
    tmp_path_factory: pytest.TempPathFactory,
    writes: list[tuple[bool, list[int]]],
    probe: list[int],
) -> None:
    disk = open_tier(tmp_path_factory.mktemp("stack"))
    host = host_of(blocks=10_000)  # nothing evicted: the model is the stored blocks per tier
    stack = TierStack(disk, host)
    in_host: set[tuple[int, ...]] = set()
    in_disk: set[tuple[int, ...]] = set()
    try:
        for to_host, ids in writes:
            heads = {tuple(ids[:end]) for end in range(BLOCK, len(ids) + 1, BLOCK)}
            if to_host:
                host.write("", ids, prefix_kv("", ids), 0)
                in_host |= heads
            else:
                disk.write("", ids, prefix_kv("", ids), 0)
                in_disk |= heads
        disk.flush()
        expected: list[str] = []
        end = 0
        while end + BLOCK <= len(probe):
            head = tuple(probe[: end + BLOCK])
            if head in in_host:
                expected.append(HOST)
            elif head in in_disk:
                expected.append(DISK)
            else:
                break
            end += BLOCK
        runs = stack.runs("", probe, 0, len(probe))
        got = [r.source for r in runs for _ in range(r.tokens // BLOCK)]
        assert got == expected and stack.stored_prefix("", probe) == end
        assert all(a.stop == b.start and a.source != b.source for a, b in pairwise(runs))
        if runs:
            kv = stack.read("", probe, runs, CPU)
            assert kv is not None and torch.equal(kv, prefix_kv("", probe[:end]))
    finally:
        disk.close()
