"""The disk tier's defaults, the budget rule and the check of its options."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

__all__ = (
    "DEFAULT_BLOCK_TOKENS",
    "DEFAULT_KV_DISK_BYTES",
    "DEFAULT_QUEUE_BYTES",
    "FREE_DISK_RESERVE",
    "READ_RATE_WEIGHT",
    "capped_budget",
    "check_options",
)

log = logging.getLogger("agentwarm.engines.kvtier")

DEFAULT_KV_DISK_BYTES = 16 << 30
"""The disk budget when none is given: 16 GiB, capped at open by the free space
(:data:`FREE_DISK_RESERVE`). A 3,849-token tau-airline head is 177 MB for ``small`` in float32
(46,080 bytes per token) and 126 MB for ``1b`` in bfloat16 (32,768): 16 GiB keeps 90 to 130
such heads, far more than the distinct heads of an agent fleet, and leaves most of a
laptop's disk alone."""

DEFAULT_BLOCK_TOKENS = 64
"""Tokens per block: a prefix is found to within 64 tokens (2% of a 3,000-token head), and a
block of ``small`` is a 2.9 MB file, large enough that per-file costs stay small."""

DEFAULT_QUEUE_BYTES = 1 << 30
"""The most KV bytes queued for the writer (capped by the budget): past it, a write is dropped
and counted. It bounds the memory the tier holds on top of the cache's."""

FREE_DISK_RESERVE = 0.05
"""The share of the filesystem the tier leaves free: its budget is capped at open to what it
holds plus the free space beyond this share."""

READ_RATE_WEIGHT = 0.2
"""Weight of the newest read in the read-throughput EWMA."""


def capped_budget(root: Path, stored_bytes: int, max_bytes: int) -> int:
    """``max_bytes``, capped at what is stored under ``root`` plus the free space of its
    filesystem beyond :data:`FREE_DISK_RESERVE` (unchanged if the disk cannot be asked)."""
    try:
        usage = shutil.disk_usage(root)
    except OSError:
        return max_bytes
    room = stored_bytes + max(0, usage.free - int(usage.total * FREE_DISK_RESERVE))
    if room < max_bytes:
        log.info(
            "kv tier %s: budget capped at %d bytes (the free disk beyond %.0f%%)",
            root,
            room,
            FREE_DISK_RESERVE * 100,
        )
    return min(max_bytes, room)


def check_options(
    *,
    fingerprint: str,
    kv_bytes_per_token: int,
    max_bytes: int,
    block_tokens: int,
    queue_bytes: int | None,
) -> None:
    """Raise ``ValueError`` naming the first of a tier's options that is out of range."""
    if not isinstance(fingerprint, str) or not fingerprint:
        raise ValueError("fingerprint must be a non-empty string (see model_fingerprint)")
    for name, value, low in (
        ("kv_bytes_per_token", kv_bytes_per_token, 1),
        ("max_bytes", max_bytes, 0),
        ("block_tokens", block_tokens, 1),
        ("queue_bytes", 0 if queue_bytes is None else queue_bytes, 0),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
