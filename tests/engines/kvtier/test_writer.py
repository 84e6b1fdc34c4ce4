"""The writer thread: ``write`` never waits (a full queue drops, counted), one daemon thread,
``flush``/``close`` wait for the queued writes.

A stalled disk is made by holding the writer inside its block write on an event (the function
the writer calls is wrapped; the queue, the tier and the files are real)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from agentwarm.engines.kvtier import tier as tier_module
from tests.engines.kvtier.helpers import BLOCK, bytes_per_token, open_tier, prefix_kv, tier_warnings

BLOCK_BYTES = BLOCK * bytes_per_token()


@pytest.fixture
def stall(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """``(entered, release)``: the writer sets ``entered`` in its first block write and waits
    for ``release`` there."""
    entered, release = threading.Event(), threading.Event()
    real = tier_module.store_block

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(10), "the test never released the writer"
        return real(*args, **kwargs)

    monkeypatch.setattr(tier_module, "store_block", held)
    yield entered, release
    release.set()


def seq(i: int) -> list[int]:
    return [1000 + i] * BLOCK


def test_a_full_queue_drops_writes_and_counts_them_without_waiting(
    tmp_path: Path, stall: tuple[threading.Event, threading.Event], caplog: pytest.LogCaptureFixture
) -> None:
    entered, release = stall
    tier = open_tier(tmp_path, queue_bytes=2 * BLOCK_BYTES)
    tier.write("", seq(0), prefix_kv("", seq(0)), 0)
    assert entered.wait(10)  # the writer holds block 0 (it still counts in the queue)
    tier.write("", seq(1), prefix_kv("", seq(1)), 0)  # fits: 2 blocks queued
    for i in range(2, 6):  # the disk is stuck: these return at once, dropped
        tier.write("", seq(i), prefix_kv("", seq(i)), 0)
    tier.write("", seq(1), prefix_kv("", seq(1)), 0)  # already queued: skipped, not dropped
    assert tier.stats().writes_dropped == 4
    assert tier.stats().blocks_written == 0
    release.set()
    tier.flush()
    stats = tier.stats()
    assert (stats.blocks_written, stats.writes_dropped) == (2, 4)
    assert [tier.stored_prefix("", seq(i)) for i in range(6)] == [BLOCK, BLOCK, 0, 0, 0, 0]
    tier.write("", seq(2), prefix_kv("", seq(2)), 0)  # room again
    tier.flush()
    assert tier.stored_prefix("", seq(2)) == BLOCK
    [warning] = tier_warnings(caplog)
    assert "dropped a write of 1 blocks" in warning
    tier.close()


def test_flush_with_a_timeout_returns_while_the_disk_is_stuck(
    tmp_path: Path, stall: tuple[threading.Event, threading.Event]
) -> None:
    entered, release = stall
    tier = open_tier(tmp_path)
    tier.write("", seq(0), prefix_kv("", seq(0)), 0)
    assert entered.wait(10)
    tier.flush(timeout=0.01)
    assert tier.stats().blocks_written == 0
    release.set()
    tier.close()
    assert tier.stats().blocks_written == 1


def test_close_waits_for_the_queued_writes(
    tmp_path: Path, stall: tuple[threading.Event, threading.Event]
) -> None:
    entered, release = stall
    tier = open_tier(tmp_path)
    for i in range(3):
        tier.write("", seq(i), prefix_kv("", seq(i)), 0)
    assert entered.wait(10)
    closing = threading.Thread(target=tier.close)
    closing.start()
    release.set()
    closing.join(10)
    assert not closing.is_alive()
    assert tier.stats().blocks_written == 3
    tier.write("", seq(9), prefix_kv("", seq(9)), 0)  # closed: ignored, no error
    with open_tier(tmp_path) as again:
        assert [again.stored_prefix("", seq(i)) for i in range(3)] == [BLOCK] * 3
        kv = again.read("", seq(2), 0, BLOCK)
        assert kv is not None and torch.equal(kv, prefix_kv("", seq(2)))


def test_one_daemon_writer_thread_per_tier_started_by_the_first_write(tmp_path: Path) -> None:
    def writers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "kv-tier-writer"]

    before = len(writers())
    tier = open_tier(tmp_path)
    assert len(writers()) == before
    for i in range(20):
        tier.write("", seq(i), prefix_kv("", seq(i)), 0)
    tier.flush()
    mine = [t for t in writers() if t.is_alive()]
    assert len(mine) == before + 1 and all(t.daemon for t in mine)
    tier.close()
    assert len([t for t in writers() if t.is_alive()]) == before


def test_the_caller_may_drop_its_reference_the_writer_keeps_the_kv(tmp_path: Path) -> None:
    ids = list(range(16))
    with open_tier(tmp_path) as tier:
        tier.write("", ids, prefix_kv("", ids), 0)  # a temporary: only the queue holds it
        tier.flush()
        kv = tier.read("", ids, 0, 16)
        assert kv is not None and torch.equal(kv, prefix_kv("", ids))


def test_reads_racing_the_writer_and_its_evictions_are_exact_or_none(tmp_path: Path) -> None:
    size = open_tier(tmp_path / "probe")
    size.write("", seq(0), prefix_kv("", seq(0)), 0)
    size.close()
    budget = 3 * size.stats().stored_bytes
    with open_tier(tmp_path / "race", max_bytes=budget) as tier:
        seen = 0
        for i in range(40):
            tier.write("", seq(i), prefix_kv("", seq(i)), 0)  # queued: the writer evicts too
            if i % 8 == 7:
                tier.flush()  # so that some reads find what they ask for
            for j in range(max(0, i - 4), i + 1):
                kv = tier.read("", seq(j), 0, BLOCK)
                if kv is not None:
                    seen += 1
                    assert torch.equal(kv, prefix_kv("", seq(j)))
            assert tier.stats().stored_bytes <= budget
        tier.flush()
        assert tier.stats().stored_blocks == 3
        assert tier.stats().blocks_rejected == 0
        assert seen > 0


def test_an_idle_writer_ends_its_thread_and_the_next_write_starts_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwarm.engines.kvtier import writer

    monkeypatch.setattr(writer, "IDLE_EXIT_S", 0.01)
    tier = open_tier(tmp_path)
    tier.write("", seq(0), prefix_kv("", seq(0)), 0)
    tier.flush()
    thread = tier._writer._thread
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()
    tier.write("", seq(1), prefix_kv("", seq(1)), 0)
    tier.close()
    assert [tier.stored_prefix("", seq(i)) for i in range(2)] == [BLOCK, BLOCK]
