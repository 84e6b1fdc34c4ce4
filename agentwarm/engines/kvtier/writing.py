"""Writing one block of a KV into its file under a tier's fingerprint directory."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

import torch

from agentwarm.engines.kvtier.blockfile import BlockHeader, write_block
from agentwarm.engines.kvtier.keys import BLOCK_SUFFIX

__all__ = ("describe_os_error", "store_block")

SEQ_DIM = 3


def store_block(
    root: Path,
    *,
    fingerprint: str,
    namespace: str,
    block: int,
    key: str,
    ids: Sequence[int],
    payload: torch.Tensor,
) -> tuple[Path, int]:
    """Write ``payload`` (the KV of block ``block``, whose key is ``key`` and whose token ids
    are ``ids``; any device) to ``root/namespace/<key>.kv``; returns the path and the file's
    size. Raises OSError."""
    payload = payload.to("cpu")
    header = BlockHeader(
        fingerprint=fingerprint,
        namespace=namespace,
        block=block,
        key=key,
        ids=tuple(ids),
        dtype=str(payload.dtype).removeprefix("torch."),
        shape=tuple(payload.shape),
    )
    path = root / namespace / f"{key}{BLOCK_SUFFIX}"
    path.parent.mkdir(exist_ok=True, mode=0o700)
    return path, write_block(path, header, payload)


def describe_os_error(exc: OSError) -> str:
    """``"ENOSPC: No space left on device"``: the errno's name and its text."""
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    return f"{name}: {text}" if name else text
