"""The disk-tier options of every command that builds an embedded engine — ``agentwarm serve``,
``agentwarm run`` and ``agentwarm bench`` with ``--engine local``: ``--kv-dir DIR
[--kv-disk-gb N]``, checked by :func:`agentwarm.engines.registry.disk_tier_options`. One
definition, so that the three commands say the same."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ("DEFAULT_KV_DISK_GIB", "KvDirOption", "KvDiskGbOption", "KvHostGbOption")

#: ``--kv-disk-gb``'s default as its help says it: the tier's ``DEFAULT_KV_DISK_BYTES`` in GiB
#: (a test checks they agree; the tier's package is not imported here, as it imports torch).
DEFAULT_KV_DISK_GIB = 16

KvDirOption = Annotated[
    Path | None,
    typer.Option(
        "--kv-dir",
        metavar="DIR",
        help="--engine local: the disk KV tier's directory (created if missing). KV evicted from "
        "the prefix cache, and what is cached at a clean stop, is stored there and loaded back "
        "when that beats recomputing it, also by the next process of the same model.",
    ),
]
KvDiskGbOption = Annotated[
    float | None,
    typer.Option(
        "--kv-disk-gb",
        metavar="N",
        help="--kv-dir's budget in GiB (> 0; the least recently used blocks go first). "
        f"Default: {DEFAULT_KV_DISK_GIB} GiB, capped by the free disk space.",
    ),
]
KvHostGbOption = Annotated[
    float | None,
    typer.Option(
        "--kv-host-gb",
        metavar="N",
        help="--kv-dir's host-RAM tier in GiB, between the GPU's cache and the disk (pinned "
        "memory; 0: none). Default on CUDA: a quarter of physical memory, 2 to 8 GiB; on CPU "
        "none (the prefix cache is in host RAM already).",
    ),
]
