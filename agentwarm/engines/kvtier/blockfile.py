"""One block file: the K/V of ``block_tokens`` consecutive tokens, with a header saying what
produced it and a checksum.

Format (version 1), little-endian::

    magic b"AWKV" | version u16 | header length u32 | header (UTF-8 JSON) | zero padding to a
    multiple of 64 bytes | payload (the tensor's bytes, C order) | crc32 u32 of every byte before it

The header (:class:`BlockHeader`) holds the fingerprint of what produced the KV, the namespace
directory, the block's index and key, its token ids, the dtype and the shape
(``[num_layers, 2, num_kv_heads, block_tokens, head_dim]``). Reading never unpickles: the header is
JSON checked field by field against what the reader expects, and the payload's bytes are read
into the caller's tensor (:mod:`~agentwarm.engines.kvtier.vectored`), used once the checksum
matches.

Why crc32: it guards against torn writes and storage faults, not against an attacker (whoever can
write the directory can write any KV, checksum included; they still cannot run code). zlib's crc32
runs at several GB/s (3.3 GB/s measured here), faster than the disk, so checking every read
costs little; blake2b runs at 0.6 GB/s here. Any burst of up to 32 flipped bits is caught, and
a random garbling passes with probability 2^-32.

Writes go to a temporary file in the same directory (``.<key>.<pid>.tmp``, created exclusively)
and are moved into place with :func:`os.replace`, so a reader sees a whole file or none. There is
no fsync: a file torn by a crash fails its checksum and is dropped, which is cheaper than syncing
every block.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentwarm._jsonfile import JSONTextError
from agentwarm._jsonfile import loads as json_loads
from agentwarm.engines.kvtier.vectored import read_all, tensor_rows, write_all

__all__ = (
    "DTYPES",
    "FORMAT_VERSION",
    "MAGIC",
    "BlockError",
    "BlockHeader",
    "Expected",
    "check_kv",
    "read_block",
    "tmp_name",
    "write_block",
)

MAGIC = b"AWKV"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<4sHI")
_CRC = struct.Struct("<I")
_ALIGN = 64
MAX_HEADER_BYTES = 1 << 20
"""A header longer than this is garbage (64 ids take ~500 bytes)."""

DTYPES: dict[str, torch.dtype] = {
    str(dt).removeprefix("torch."): dt
    for dt in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.int8,
        torch.uint8,
    )
}
"""The dtypes a block may hold, by the name its header gives."""

_OPEN_READ = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
_OPEN_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC


class BlockError(Exception):
    """A block file that must not be loaded; ``cause`` is one of ``"truncated"``,
    ``"checksum"``, ``"garbled"`` (no header of this format), ``"version"``,
    ``"fingerprint"`` (written by another model), ``"mismatch"`` (another block, tenant or
    layout), ``"not a file"``, ``"unreadable"`` (the OS refused) or ``"missing"`` (no such
    file: deleted since it was indexed, not a fault)."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail


@dataclass(frozen=True, slots=True)
class BlockHeader:
    """What a block file says about its payload."""

    fingerprint: str
    namespace: str
    block: int
    key: str
    ids: tuple[int, ...]
    dtype: str
    shape: tuple[int, ...]

    @property
    def payload_bytes(self) -> int:
        count = 1
        for n in self.shape:
            count *= n
        return count * DTYPES[self.dtype].itemsize

    def encode(self) -> bytes:
        """The prefix, the JSON header and the padding (everything before the payload)."""
        doc = {
            "fingerprint": self.fingerprint,
            "namespace": self.namespace,
            "block": self.block,
            "key": self.key,
            "ids": list(self.ids),
            "dtype": self.dtype,
            "shape": list(self.shape),
        }
        text = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        head = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(text)) + text
        return head + b"\0" * (-len(head) % _ALIGN)


def tmp_name(key: str) -> str:
    """The temporary name a block is written under by this process."""
    return f".{key}.{os.getpid()}.tmp"


def write_block(path: Path, header: BlockHeader, payload: torch.Tensor) -> int:
    """Write ``payload`` (a CPU tensor of ``header``'s dtype and shape; any strides) to ``path``
    atomically; returns the file's size. Raises OSError (the temporary file is removed)."""
    head = header.encode()
    rows = tensor_rows(payload)
    if sum(len(row) for row in rows) != header.payload_bytes:
        raise ValueError(f"payload of shape {tuple(payload.shape)} is not {header.shape}")
    crc = zlib.crc32(head)
    for row in rows:
        crc = zlib.crc32(row, crc)
    tmp = path.with_name(tmp_name(header.key))
    try:
        fd = os.open(tmp, _OPEN_WRITE, 0o600)
    except FileExistsError:  # left by a crashed process that had our pid
        tmp.unlink()
        fd = os.open(tmp, _OPEN_WRITE, 0o600)
    try:
        try:
            write_all(fd, [head, *rows, _CRC.pack(crc)])
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(head) + header.payload_bytes + _CRC.size


@dataclass(frozen=True, slots=True)
class Expected:
    """What a reader requires of a block's header. ``dtype`` and ``shape`` ``None``: any layout
    whose bytes per token are ``bytes_per_token`` (the first block of a read sets the layout the
    others must have)."""

    fingerprint: str
    namespace: str
    block: int
    key: str
    ids: tuple[int, ...]
    bytes_per_token: int
    dtype: str | None = None
    shape: tuple[int, ...] | None = None


def read_block(
    path: Path, expect: Expected, into: Callable[[BlockHeader], list[memoryview]]
) -> BlockHeader:
    """Read the block file at ``path`` into the buffers ``into(header)`` returns (the payload's
    bytes in order, e.g. :func:`~agentwarm.engines.kvtier.vectored.tensor_rows` of the tensor
    it goes to), once its header is what ``expect`` requires; returns the header. Raises
    :class:`BlockError` naming the cause (the buffers then hold garbage)."""
    try:
        fd = os.open(path, _OPEN_READ)
    except FileNotFoundError:
        raise BlockError("missing", f"{path.name} is gone (evicted meanwhile)") from None
    except OSError as exc:
        raise BlockError("unreadable", f"{exc.strerror} ({path.name})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BlockError("not a file", f"{path.name} is not a regular file")
        head, header = _read_header(fd, info.st_size, path.name)
        _check(header, expect, path.name)
        total = len(head) + header.payload_bytes + _CRC.size
        if info.st_size != total:
            cause = "truncated" if info.st_size < total else "garbled"
            raise BlockError(cause, f"{path.name} is {info.st_size} bytes, expected {total}")
        rows = into(header)
        stored = bytearray(_CRC.size)
        if not read_all(fd, [*rows, memoryview(stored)], len(head)):
            raise BlockError("truncated", f"{path.name} ended early")
    except OSError as exc:
        raise BlockError("unreadable", f"{exc.strerror} ({path.name})") from None
    finally:
        os.close(fd)
    crc = zlib.crc32(head)
    for row in rows:
        crc = zlib.crc32(row, crc)
    if crc != _CRC.unpack(stored)[0]:
        raise BlockError("checksum", f"{path.name} fails its crc32")
    return header


def _read_header(fd: int, size: int, name: str) -> tuple[bytes, BlockHeader]:
    prefix = os.pread(fd, _PREFIX.size, 0)
    if len(prefix) < _PREFIX.size:
        raise BlockError("truncated", f"{name} is {size} bytes, shorter than a header")
    magic, version, length = _PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise BlockError("garbled", f"{name} is not a block file (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise BlockError("version", f"{name} has format version {version}, not {FORMAT_VERSION}")
    if length > MAX_HEADER_BYTES:
        raise BlockError("garbled", f"{name} claims a header of {length} bytes")
    padded = length + (-(_PREFIX.size + length) % _ALIGN)
    rest = os.pread(fd, padded, _PREFIX.size)
    if len(rest) < padded:
        raise BlockError("truncated", f"{name} ends inside its header")
    try:
        header = _parse(json_loads(rest[:length]))
    except (JSONTextError, KeyError, TypeError) as exc:
        raise BlockError("garbled", f"{name} has a malformed header ({exc})") from None
    if header.dtype not in DTYPES or len(header.shape) != 5 or min(header.shape) < 1:
        raise BlockError("garbled", f"{name}: dtype {header.dtype!r}, shape {header.shape}")
    return prefix + rest, header


def _parse(doc: Any) -> BlockHeader:
    if not isinstance(doc, dict):
        raise TypeError("the header is not a JSON object")
    return BlockHeader(
        fingerprint=_str(doc["fingerprint"]),
        namespace=_str(doc["namespace"]),
        block=_int(doc["block"]),
        key=_str(doc["key"]),
        ids=_ints(doc["ids"]),
        dtype=_str(doc["dtype"]),
        shape=_ints(doc["shape"]),
    )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    return tuple(_int(v) for v in value)


def _check(header: BlockHeader, expect: Expected, name: str) -> None:
    if header.fingerprint != expect.fingerprint:
        raise BlockError("fingerprint", f"{name} was written by another model or engine setting")
    for field in ("namespace", "block", "key", "ids"):
        if getattr(header, field) != getattr(expect, field):
            raise BlockError("mismatch", f"{name}: its header names another {field}")
    if expect.dtype is not None and (header.dtype, header.shape) != (expect.dtype, expect.shape):
        raise BlockError("mismatch", f"{name}: layout {header.dtype} {header.shape} differs")
    layers, pair, heads, tokens, dim = header.shape
    per_token = layers * pair * heads * dim * DTYPES[header.dtype].itemsize
    if pair != 2 or tokens != len(expect.ids) or per_token != expect.bytes_per_token:
        raise BlockError(
            "mismatch",
            f"{name}: shape {header.shape} of {header.dtype} is {per_token} bytes per token, "
            f"not a block of {len(expect.ids)} tokens of {expect.bytes_per_token}",
        )


def check_kv(kv: torch.Tensor, tokens: int, start: int, block_tokens: int, per_token: int) -> None:
    """Raise ``ValueError`` unless ``kv`` is the KV of tokens ``[start, tokens)`` (``start`` a
    multiple of ``block_tokens``) in a dtype of :data:`DTYPES`, ``per_token`` bytes a token."""
    if start < 0 or start % block_tokens:
        raise ValueError(f"start {start} must be a multiple of {block_tokens} (block_tokens)")
    if kv.dim() != 5 or kv.shape[1] != 2 or kv.shape[3] != tokens - start:
        raise ValueError(
            f"kv of shape {tuple(kv.shape)} must be [layers, 2, heads, {tokens - start}, "
            f"head_dim] (the KV of ids[{start}:])"
        )
    dtype = str(kv.dtype).removeprefix("torch.")
    got = kv.shape[0] * 2 * kv.shape[2] * kv.shape[4] * kv.element_size()
    if dtype not in DTYPES or got != per_token:
        raise ValueError(
            f"kv of {dtype} is {got} bytes per token; this tier stores {per_token} bytes "
            f"per token of {', '.join(DTYPES)}"
        )
