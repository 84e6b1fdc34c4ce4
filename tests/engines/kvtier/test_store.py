"""Round trips (bit-exact per dtype), restarts, namespaces, the meta file, argument checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from agentwarm.engines.kvtier import DEFAULT_BLOCK_TOKENS, DEFAULT_KV_DISK_BYTES
from agentwarm.engines.kvtier.keys import namespace_dir
from agentwarm.engines.kvtier.meta import META_NAME
from tests.engines.kvtier.helpers import (
    BLOCK,
    HEAD_DIM,
    HEADS,
    LAYERS,
    block_path,
    bytes_per_token,
    open_tier,
    prefix_kv,
    tier_warnings,
)

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.float8_e4m3fn]


def bits(kv: torch.Tensor) -> torch.Tensor:
    return kv.contiguous().view(torch.uint8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_bit_exact(tmp_path: Path, dtype: torch.dtype) -> None:
    ids = list(range(11))
    generator = torch.Generator().manual_seed(0)
    kv = torch.randn(LAYERS, 2, HEADS, len(ids), HEAD_DIM, generator=generator).to(dtype)
    if dtype.is_floating_point and dtype.itemsize > 1:
        kv.view(-1)[:4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0])
    with open_tier(tmp_path, kv_bytes_per_token=bytes_per_token(dtype)) as tier:
        tier.write("", ids, kv, 0)
        tier.flush()
        assert tier.stored_prefix("", ids) == 8  # 11 ids: two whole blocks
        whole = tier.read("", ids, 0, 8)
        middle = tier.read("", ids, 4, 8)
    assert whole is not None and middle is not None
    assert whole.dtype == dtype and whole.device.type == "cpu"
    assert whole.shape == (LAYERS, 2, HEADS, 8, HEAD_DIM)
    assert torch.equal(bits(whole), bits(kv[:, :, :, :8]))
    assert torch.equal(bits(middle), bits(kv[:, :, :, 4:8]))


def test_a_write_from_start_stores_ids_from_start_and_skips_stored_blocks(tmp_path: Path) -> None:
    ids = list(range(16))
    with open_tier(tmp_path) as tier:
        tier.write("", ids[:8], prefix_kv("", ids[:8]), 0)
        tier.flush()
        tier.write("", ids, prefix_kv("", ids, 4), 4)  # blocks 1..3: block 1 is stored
        tier.flush()
        stats = tier.stats()
        assert (stats.blocks_written, stats.stored_blocks) == (4, 4)
        kv = tier.read("", ids, 0, 16)
        assert kv is not None and torch.equal(kv, prefix_kv("", ids))
        assert (tier.stats().blocks_read, tier.stats().bytes_read) == (4, stats.stored_bytes)


def test_a_new_tier_on_the_same_directory_finds_the_blocks(tmp_path: Path) -> None:
    ids = list(range(20))
    with open_tier(tmp_path) as first:
        first.write("", ids, prefix_kv("", ids), 0)
    # close() waited for the writes: nothing was flushed explicitly
    with open_tier(tmp_path) as second:
        assert second.stored_prefix("", ids) == 20
        assert second.stats().stored_blocks == 5
        assert second.stats().blocks_written == 0
        kv = second.read("", ids, 0, 20)
        assert kv is not None and torch.equal(kv, prefix_kv("", ids))
    with open_tier(tmp_path, fingerprint="model-b") as other:  # another model: its own dir
        assert other.stored_prefix("", ids) == 0
        assert other.root != second.root
    with open_tier(tmp_path, block_tokens=2 * BLOCK) as wider:  # another block size too
        assert wider.stored_prefix("", ids) == 0


def test_the_read_rate_and_the_meta_figures_persist(tmp_path: Path) -> None:
    ids = list(range(8))
    with open_tier(tmp_path) as tier:
        assert tier.read_bytes_per_s is None and tier.meta == {}
        tier.write("", ids, prefix_kv("", ids), 0)
        tier.flush()
        assert tier.read("", ids, 0, 8) is not None
        rate = tier.read_bytes_per_s
        assert rate is not None and rate > 0 and tier.stats().read_bytes_per_s == rate
        tier.meta["prefill_tokens_per_s"] = 812.5
        tier.meta["bad"] = float("nan")  # not finite: not saved
    saved = json.loads((tier.root / META_NAME).read_text())
    assert saved == {
        "format": 1,
        "read_bytes_per_s": rate,
        "meta": {"prefill_tokens_per_s": 812.5},
    }
    with open_tier(tmp_path) as again:
        assert again.read_bytes_per_s == rate
        assert again.meta == {"prefill_tokens_per_s": 812.5}
        assert again.read("", ids, 0, 8) is not None
        assert again.read_bytes_per_s != rate  # an EWMA of the new reads


def test_a_malformed_meta_file_is_ignored_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with open_tier(tmp_path) as tier:
        pass
    (tier.root / META_NAME).write_text('{"format": 1, "read_bytes_per_s": -3}')
    with open_tier(tmp_path) as again:
        assert again.read_bytes_per_s is None and again.enabled
    [warning] = tier_warnings(caplog)
    assert "meta file" in warning and "read_bytes_per_s" in warning


def test_namespaces_never_share_a_file(tmp_path: Path) -> None:
    ids = list(range(8))
    with open_tier(tmp_path) as tier:
        tier.write("tenant-a", ids, prefix_kv("tenant-a", ids), 0)
        tier.flush()
        assert tier.stored_prefix("tenant-a", ids) == 8
        assert tier.stored_prefix("tenant-b", ids) == 0
        assert tier.stored_prefix("", ids) == 0
        tier.write("tenant-b", ids, prefix_kv("tenant-b", ids), 0)
        tier.flush()
        a, b = tier.read("tenant-a", ids, 0, 8), tier.read("tenant-b", ids, 0, 8)
        assert a is not None and b is not None
        assert torch.equal(a, prefix_kv("tenant-a", ids))
        assert torch.equal(b, prefix_kv("tenant-b", ids)) and not torch.equal(a, b)
        path_a, path_b = block_path(tier, "tenant-a", ids, 0), block_path(tier, "tenant-b", ids, 0)
        assert path_a.name == path_b.name and path_a.parent != path_b.parent
        assert {p.name for p in tier.root.iterdir()} == {
            namespace_dir("tenant-a"),
            namespace_dir("tenant-b"),
        }
        everything = [str(p) for p in tmp_path.rglob("*")]
        assert not any("tenant" in name for name in everything)


def test_files_and_directories_are_private(tmp_path: Path) -> None:
    ids = list(range(4))
    with open_tier(tmp_path) as tier:
        tier.write("", ids, prefix_kv("", ids), 0)
    assert os.stat(block_path(tier, "", ids, 0)).st_mode & 0o777 == 0o600
    assert os.stat(tier.root).st_mode & 0o777 == 0o700


def test_bad_arguments_are_errors_naming_the_rule(tmp_path: Path) -> None:
    ids = list(range(8))
    with open_tier(tmp_path) as tier:
        with pytest.raises(ValueError, match="multiple of 4"):
            tier.write("", ids, prefix_kv("", ids, 2), 2)
        with pytest.raises(ValueError, match=r"must be \[layers, 2, heads, 8, head_dim\]"):
            tier.write("", ids, prefix_kv("", ids, 4), 0)
        with pytest.raises(ValueError, match="64 bytes per token; this tier stores 32"):
            tier.write("", ids, prefix_kv("", ids, 0, torch.float64), 0)
        with pytest.raises(ValueError, match="whole blocks of 4 tokens within the 8 ids"):
            tier.read("", ids, 0, 6)
        with pytest.raises(ValueError, match="whole blocks"):
            tier.read("", ids, 4, 12)
    for bad, match in (
        ({"fingerprint": ""}, "fingerprint must be a non-empty string"),
        ({"block_tokens": 0}, "block_tokens must be an integer >= 1, got 0"),
        ({"max_bytes": -1}, "max_bytes must be an integer >= 0"),
        ({"kv_bytes_per_token": 0}, "kv_bytes_per_token must be"),
    ):
        with pytest.raises(ValueError, match=match):
            open_tier(tmp_path, **bad)


def test_the_defaults() -> None:
    assert DEFAULT_KV_DISK_BYTES == 16 << 30
    assert DEFAULT_BLOCK_TOKENS == 64
