"""Reading a run of consecutive blocks into one KV: each file verified, the first block's
layout imposed on the rest, copied into one tensor of the whole range."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from agentwarm.engines.kvtier.blockfile import DTYPES, BlockError, BlockHeader, Expected, read_block
from agentwarm.engines.kvtier.vectored import tensor_rows

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
    along the token axis, on CPU; :class:`BadBlock` at the first one that fails. Each block's
    bytes are read straight into its place in the result."""
    out: torch.Tensor | None = None
    layout: tuple[str, tuple[int, ...]] | None = None
    for position, (path, expect) in enumerate(zip(paths, expects, strict=True)):
        if layout is not None:
            expect = replace(expect, dtype=layout[0], shape=layout[1])

        def into(header: BlockHeader, position: int = position) -> list[memoryview]:
            nonlocal out
            size = header.shape[SEQ_DIM]
            if out is None:
                shape = list(header.shape)
                shape[SEQ_DIM] = size * len(paths)
                out = torch.empty(shape, dtype=DTYPES[header.dtype])
            return tensor_rows(out.narrow(SEQ_DIM, position * size, size))

        try:
            header = read_block(path, expect, into)
        except BlockError as exc:
            raise BadBlock(position, exc) from None
        layout = (header.dtype, header.shape)
    if out is None:
        raise ValueError("read_run needs at least one block")
    return out
