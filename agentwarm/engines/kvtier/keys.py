"""The names in a disk tier: the hash chain of block keys, and the directories of a fingerprint
and of a namespace.

Keys
----
A sequence of token ids is cut into blocks of ``block_tokens`` ids; only whole blocks have keys.
The key of block ``i`` is ``blake2b(key_{i-1} || ids of block i)`` (128 bits, the ids as
little-endian int64, ``key_{-1}`` empty, a personalisation string of this format), so a block's
key names the whole prefix up to its end: two sequences share the key of block ``i`` only if
they share their first ``(i + 1) * block_tokens`` ids (up to a 2^-128 collision), and a prefix is
found to within one block.

Directories
-----------
``<path>/<fingerprint_dir>/<namespace_dir>/<key>.kv``. The fingerprint directory is a digest of
the fingerprint and the block size (another model, or another block size, never reads these
files); the namespace directory is ``default`` or ``ns-`` + :func:`~agentwarm.engines.namespace.
tenant_tag` of the namespace (a hash: the raw namespace never appears in a path), so tenants
never share a file.
"""

from __future__ import annotations

import hashlib
import re
import sys
from array import array
from collections.abc import Iterator, Sequence
from itertools import islice

from agentwarm.engines.namespace import TAG_CHARS, tenant_tag

__all__ = (
    "BLOCK_SUFFIX",
    "KEY_CHARS",
    "block_keys",
    "fingerprint_dir",
    "is_block_name",
    "is_namespace_dir",
    "iter_block_keys",
    "namespace_dir",
)

KEY_CHARS = 32
"""Length of a block key (hex of a 128-bit blake2b digest)."""

BLOCK_SUFFIX = ".kv"
_PERSON = b"agentwarm.kv.1"
_DEFAULT_NAMESPACE_DIR = "default"
_BLOCK_NAME = re.compile(rf"[0-9a-f]{{{KEY_CHARS}}}{re.escape(BLOCK_SUFFIX)}")
_NAMESPACE_DIR = re.compile(rf"default|ns-[0-9a-f]{{{TAG_CHARS}}}")


def iter_block_keys(ids: Sequence[int], block_tokens: int) -> Iterator[str]:
    """The keys of the whole blocks of ``ids`` in order, hex (computed as they are asked
    for: a caller that stops early hashes no more)."""
    if block_tokens <= 0:
        raise ValueError(f"block_tokens must be positive, got {block_tokens}")
    previous = b""
    for b in range(len(ids) // block_tokens):
        chunk = array("q", ids[b * block_tokens : (b + 1) * block_tokens])
        if sys.byteorder == "big":
            chunk.byteswap()
        digest = hashlib.blake2b(previous, digest_size=KEY_CHARS // 2, person=_PERSON)
        digest.update(chunk.tobytes())
        previous = digest.digest()
        yield previous.hex()


def block_keys(ids: Sequence[int], block_tokens: int, blocks: int | None = None) -> list[str]:
    """Keys of the first ``blocks`` whole blocks of ``ids`` (default: every whole block), hex."""
    return list(islice(iter_block_keys(ids, block_tokens), blocks))


def fingerprint_dir(fingerprint: str, block_tokens: int) -> str:
    """The directory name of a fingerprint's blocks of ``block_tokens`` tokens: a digest (any
    fingerprint text is safe in a path)."""
    digest = hashlib.blake2b(fingerprint.encode("utf-8", "surrogatepass"), digest_size=16)
    return f"fp-{digest.hexdigest()}-b{block_tokens}"


def namespace_dir(namespace: str) -> str:
    """The directory name of ``namespace``: ``default`` for ``""``, else ``ns-`` + its tenant
    tag (never the namespace itself)."""
    return f"ns-{tenant_tag(namespace)}" if namespace else _DEFAULT_NAMESPACE_DIR


def is_namespace_dir(name: str) -> bool:
    """Whether ``name`` is a name :func:`namespace_dir` makes."""
    return _NAMESPACE_DIR.fullmatch(name) is not None


def is_block_name(name: str) -> bool:
    """Whether ``name`` is a block file's name (``<key>.kv``)."""
    return _BLOCK_NAME.fullmatch(name) is not None
