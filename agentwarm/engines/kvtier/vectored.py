"""Vectored I/O between a KV tensor and a file: the payload moves straight between the page
cache and the tensor's memory, without a staging buffer or a ``contiguous()`` copy.

A KV ``[layers, 2, heads, tokens, head_dim]`` whose last two dimensions are dense (every KV the
engine holds, and any ``narrow`` of one along the token axis) is, in C order, one contiguous run
of ``tokens * head_dim`` elements per ``(layer, K/V, head)``: :func:`tensor_rows` lists them, and
:func:`write_all` / :func:`read_all` hand them to ``writev`` / ``preadv`` (at most
``IOV_MAX`` buffers a call). Measured here on ``small``'s layout: a 3,072-token read into one
tensor took 0.36 s this way against 0.95 s through a staging buffer and a copy (a loaded VM).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence

import torch

__all__ = ("IOV_MAX", "read_all", "tensor_rows", "write_all")


def _iov_max() -> int:
    try:
        return max(16, min(int(os.sysconf("SC_IOV_MAX")), 1024))
    except (ValueError, OSError):
        return 16


IOV_MAX = _iov_max()
"""Buffers per ``writev`` / ``preadv`` call."""


def tensor_rows(kv: torch.Tensor) -> list[memoryview]:
    """The bytes of CPU tensor ``kv`` (5 dimensions) in C order, as one flat memoryview per
    index of its first three dimensions (views of its memory: writable, and what is written
    into them lands in ``kv``). A ``kv`` whose last two dimensions are not dense is copied
    first (then writes into the views do not reach it)."""
    if kv.stride(4) != 1 or kv.stride(3) != kv.shape[4]:
        kv = kv.contiguous()
    array = kv.view(torch.uint8).numpy()
    layers, pair, heads = array.shape[:3]
    return [
        memoryview(array[i, j, k]).cast("B")
        for i in range(layers)
        for j in range(pair)
        for k in range(heads)
    ]


def write_all(fd: int, buffers: Sequence[bytes | memoryview]) -> None:
    """Write ``buffers`` in order at ``fd``'s position (partial writes resumed). Raises
    OSError."""
    pending: deque[memoryview] = deque(memoryview(b).cast("B") for b in buffers)
    while pending:
        group = [pending.popleft() for _ in range(min(len(pending), IOV_MAX))]
        done = os.writev(fd, group)
        for index, buffer in enumerate(group):
            if done >= len(buffer):
                done -= len(buffer)
                continue
            pending.extendleft(reversed([buffer[done:], *group[index + 1 :]]))
            break


def read_all(fd: int, buffers: Sequence[memoryview], offset: int) -> bool:
    """Fill ``buffers`` in order from ``fd`` at ``offset``; False if the file ended first.
    Raises OSError."""
    pending: deque[memoryview] = deque(buffers)
    while pending:
        group = [pending.popleft() for _ in range(min(len(pending), IOV_MAX))]
        done = os.preadv(fd, group, offset)
        if done == 0:
            return False
        offset += done
        for index, buffer in enumerate(group):
            if done >= len(buffer):
                done -= len(buffer)
                continue
            pending.extendleft(reversed([buffer[done:], *group[index + 1 :]]))
            break
    return True
