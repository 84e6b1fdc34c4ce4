"""Damaged, foreign and planted files: never a wrong tensor. Each is made with plain file
operations on what a tier wrote; the read returns ``None``, the file is dropped from the index
and the disk, and each kind of fault is logged once."""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from agentwarm.engines.kvtier import DiskTier
from tests.engines.kvtier.helpers import block_path, open_tier, prefix_kv, tier_warnings

IDS = list(range(12))
OTHER = list(range(100, 112))


def stored(path: Path, ids: list[int] = IDS, **kwargs: object) -> DiskTier:
    tier = open_tier(path, **kwargs)
    tier.write("", ids, prefix_kv("", ids), 0)
    tier.flush()
    return tier


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def cut_the_checksum(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 1)


def flip_last_payload_byte(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(-5, os.SEEK_END)
        byte = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x01]))


def garble_magic(path: Path) -> None:
    with path.open("r+b") as f:
        f.write(b"ZZZZ")


def future_version(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(4)
        f.write(struct.pack("<H", 2))


def huge_header(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(6)
        f.write(struct.pack("<I", 1 << 30))


def garble_header_json(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(10)  # the JSON's opening brace
        f.write(b"\xff")


def replace_with_noise(path: Path) -> None:
    path.write_bytes(os.urandom(300))


def empty(path: Path) -> None:
    path.write_bytes(b"")


DAMAGE: list[tuple[Callable[[Path], None], str]] = [
    (truncate, "truncated"),
    (cut_the_checksum, "truncated"),
    (flip_last_payload_byte, "fails its crc32"),
    (garble_magic, "not a block file"),
    (future_version, "format version 2"),
    (huge_header, "claims a header"),
    (garble_header_json, "malformed header"),
    (replace_with_noise, "not a block file"),
    (empty, "shorter than a header"),
]


@pytest.mark.parametrize(("damage", "said"), DAMAGE, ids=[d.__name__ for d, _ in DAMAGE])
def test_a_damaged_file_is_dropped_and_recomputed_never_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Callable[[Path], None], said: str
) -> None:
    tier = stored(tmp_path)
    bad = block_path(tier, "", IDS, 1)
    damage(bad)
    assert tier.stored_prefix("", IDS) == 12  # the index reads no file
    assert tier.read("", IDS, 0, 12) is None
    assert not bad.exists()
    assert tier.stored_prefix("", IDS) == 4  # block 1 is gone: the run ends there
    assert tier.stats().blocks_rejected == 1
    [warning] = tier_warnings(caplog)
    assert said in warning and "recomputed" in warning
    kv = tier.read("", IDS, 0, 4)  # what is intact still loads
    assert kv is not None and torch.equal(kv, prefix_kv("", IDS[:4]))
    tier.write("", IDS, prefix_kv("", IDS), 0)  # and the lost block is stored again
    tier.flush()
    kv = tier.read("", IDS, 0, 12)
    assert kv is not None and torch.equal(kv, prefix_kv("", IDS))
    tier.close()


def test_one_warning_per_kind_of_fault(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tier = stored(tmp_path)
    tier.write("", OTHER, prefix_kv("", OTHER), 0)
    tier.flush()
    for ids in (IDS, OTHER):
        for block in (0, 1):
            truncate(block_path(tier, "", ids, block))
        flip_last_payload_byte(block_path(tier, "", ids, 2))
    for ids in (IDS, OTHER):
        assert tier.read("", ids, 0, 4) is None
        assert tier.read("", ids, 4, 8) is None
        assert tier.read("", ids, 8, 12) is None
    assert tier.stats().blocks_rejected == 6
    assert tier.stats().stored_blocks == 0
    warnings = tier_warnings(caplog)
    assert len(warnings) == 2
    assert "truncated" in warnings[0] and "crc32" in warnings[1]
    tier.close()


def test_a_file_of_another_model_copied_in_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = stored(tmp_path / "a", fingerprint="model-b")
    tier = stored(tmp_path / "b", ids=IDS[:4])  # model-a has block 0 only
    planted = block_path(tier, "", IDS, 1)
    shutil.copy(block_path(other, "", IDS, 1), planted)  # same ids, same name, other model
    tier.close()
    again = open_tier(tmp_path / "b")
    assert again.stored_prefix("", IDS) == 8  # found by name
    assert again.read("", IDS, 0, 8) is None  # refused by its header
    assert not planted.exists()
    [warning] = tier_warnings(caplog)
    assert "another model" in warning
    again.close()
    other.close()


def test_a_file_under_another_name_or_tenant_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tier = stored(tmp_path)
    tier.write("tenant-a", IDS, prefix_kv("tenant-a", IDS), 0)
    tier.flush()
    tier.close()
    shutil.copy(block_path(tier, "", IDS, 0), block_path(tier, "", OTHER, 0))  # renamed
    shutil.copy(block_path(tier, "tenant-a", IDS, 2), block_path(tier, "", IDS, 2))  # moved
    again = open_tier(tmp_path)
    assert again.read("", OTHER, 0, 4) is None
    assert again.read("", IDS, 8, 12) is None
    assert again.read("tenant-a", IDS, 8, 12) is not None  # the tenant's own is intact
    assert again.stats().blocks_rejected == 2
    [warning] = tier_warnings(caplog)
    assert "names another key" in warning
    again.close()


def test_names_the_tier_does_not_make_are_ignored_left_in_place_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tier = stored(tmp_path)
    tier.close()
    ns = block_path(tier, "", IDS, 0).parent
    valid_name = block_path(tier, "", OTHER, 0).name
    planted = [
        tier.root / "notes.txt",
        tier.root / "tenant-raw-name",
        ns / "zz.kv",
        ns / (valid_name.upper()),
        ns / ".hidden",
    ]
    for path in planted:
        path.write_bytes(b"not ours")
    (ns / valid_name).symlink_to(block_path(tier, "", IDS, 0))  # a link: never followed
    os.mkfifo(ns / block_path(tier, "", OTHER, 1).name)  # a FIFO would block a reader
    again = open_tier(tmp_path)
    assert again.stats().stored_blocks == 3
    assert again.stored_prefix("", IDS) == 12
    assert again.stored_prefix("", OTHER) == 0
    kv = again.read("", IDS, 0, 12)
    assert kv is not None and torch.equal(kv, prefix_kv("", IDS))
    assert all(path.exists() for path in planted)
    [warning] = tier_warnings(caplog)
    assert "ignored 7 entries this tier did not make (left in place)" in warning
    again.close()


def test_a_stale_temporary_file_of_a_dead_writer_is_removed(tmp_path: Path) -> None:
    tier = stored(tmp_path)
    tier.close()
    ns = block_path(tier, "", IDS, 0).parent
    dead = ns / f".{'0' * 32}.{2**22 + 12345}.tmp"  # above any pid this kernel hands out
    dead.write_bytes(b"half a block")
    live = ns / f".{'1' * 32}.{os.getpid()}.tmp"  # a writer of this process: kept
    live.write_bytes(b"being written")
    open_tier(tmp_path).close()
    assert not dead.exists() and live.exists()


def test_blocks_deleted_behind_the_tiers_back_are_missing_not_faults(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tier = stored(tmp_path)
    block_path(tier, "", IDS, 2).unlink()
    assert tier.read("", IDS, 0, 12) is None
    assert tier.stored_prefix("", IDS) == 8
    assert tier.stats().blocks_rejected == 0
    assert tier_warnings(caplog) == []
    tier.close()
