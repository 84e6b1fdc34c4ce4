"""Small KV layouts and deterministic KV for the disk tier's tests."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from agentwarm.engines.kvtier import DiskTier
from agentwarm.engines.kvtier.keys import BLOCK_SUFFIX, block_keys, namespace_dir

LAYERS, HEADS, HEAD_DIM = 2, 1, 2
BLOCK = 4
"""Tokens per block in these tests."""


def bytes_per_token(dtype: torch.dtype = torch.float32) -> int:
    return LAYERS * 2 * HEADS * HEAD_DIM * dtype.itemsize


def prefix_kv(
    namespace: str, ids: Sequence[int], start: int = 0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A KV for ``ids[start:]`` whose values at token ``t`` depend on ``ids[:t + 1]`` and the
    namespace only (as a real model's do on the prefix): the same prefix always gets the same
    KV. Values are multiples of 1/16 below 16, exact in every float dtype used here."""
    per_token = LAYERS * 2 * HEADS * HEAD_DIM
    rows = []
    running = hashlib.blake2b(namespace.encode(), digest_size=16)
    for t, token in enumerate(ids):
        running.update(int(token).to_bytes(8, "little", signed=True))
        if t >= start:
            digest = hashlib.blake2b(running.digest(), digest_size=per_token).digest()
            rows.append([byte / 16 for byte in digest])
    values = torch.tensor(rows, dtype=torch.float64).reshape(len(rows), LAYERS, 2, HEADS, HEAD_DIM)
    return values.permute(1, 2, 3, 0, 4).contiguous().to(dtype)


def open_tier(path: Path, **kwargs: object) -> DiskTier:
    options: dict[str, object] = {
        "fingerprint": "model-a",
        "kv_bytes_per_token": bytes_per_token(),
        "max_bytes": 1 << 30,
        "block_tokens": BLOCK,
    }
    options.update(kwargs)
    return DiskTier(path, **options)  # type: ignore[arg-type]


def block_path(tier: DiskTier, namespace: str, ids: Sequence[int], block: int) -> Path:
    """The file of block ``block`` of ``ids`` (key by the hash chain)."""
    key = block_keys(ids, tier.block_tokens, block + 1)[block]
    return tier.root / namespace_dir(namespace) / f"{key}{BLOCK_SUFFIX}"


def tier_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "agentwarm.engines.kvtier" and r.levelno == logging.WARNING
    ]
