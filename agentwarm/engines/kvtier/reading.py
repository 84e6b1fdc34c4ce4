"""Reading a run of consecutive blocks into one KV: each file verified, the first block's
layout imposed on the rest, copied into one tensor of the whole range."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from agentwarm.engines.kvtier.blockfile import DTYPES, BlockError, Expected, read_block

__all__ = ("BadBlock", "read_run")

SEQ_DIM = 3


class BadBlock(Exception):
    """Block ``position`` of a run cannot be loaded; ``error`` says why."""

    def __init__(self, position: int, error: BlockError) -> None:
        super().__init__(f"block {position} of the run: {error}")
        self.position = position
        self.error = error


def read_run(paths: Sequence[Path], expects: Sequence[Expected]) -> torch.Tensor:
    """The KV of the blocks in ``paths`` (each checked against its ``expects``) concatenated
    along the token axis, on CPU; :class:`BadBlock` at the first one that fails."""
    out: torch.Tensor | None = None
    layout: tuple[str, tuple[int, ...]] | None = None
    for position, (path, expect) in enumerate(zip(paths, expects, strict=True)):
        if layout is not None:
            expect = replace(expect, dtype=layout[0], shape=layout[1])
        try:
            header, block = read_block(path, expect)
        except BlockError as exc:
            raise BadBlock(position, exc) from None
        size = header.shape[SEQ_DIM]
        if out is None:
            layout = (header.dtype, header.shape)
            shape = list(header.shape)
            shape[SEQ_DIM] = size * len(paths)
            out = torch.empty(shape, dtype=DTYPES[header.dtype])
        out.narrow(SEQ_DIM, position * size, size).copy_(block)
    if out is None:
        raise ValueError("read_run needs at least one block")
    return out
