"""The disk tier of the embedded engine's KV: blocks of computed K/V kept in files, found again
by token prefix after they left the radix cache or the process restarted.

:class:`DiskTier` is the store (independent of the scheduler): ``stored_prefix`` (how far a
prefix is stored, from memory), ``read`` (verified, synchronous), ``write`` (queued to one
writer thread, never waits), LRU within a byte budget. :func:`model_fingerprint` names what
produced a KV; a block is read back only under the same fingerprint and namespace.

Layout on disk: ``<path>/fp-<digest of fingerprint>-b<block_tokens>/<namespace dir>/<key>.kv``
plus ``meta.json`` (the measured read throughput and the engine's figures) in the fingerprint
directory; keys are a hash chain over blocks of ids (:mod:`~agentwarm.engines.kvtier.keys`); a
file is a versioned header, the tensor's bytes and a crc32
(:mod:`~agentwarm.engines.kvtier.blockfile`). On CPU the host tier is the radix cache itself.
"""

from __future__ import annotations

from agentwarm.engines.kvtier.defaults import (
    DEFAULT_BLOCK_TOKENS,
    DEFAULT_KV_DISK_BYTES,
    DEFAULT_QUEUE_BYTES,
)
from agentwarm.engines.kvtier.fingerprint import model_fingerprint
from agentwarm.engines.kvtier.tier import DiskTier, TierStats

__all__ = (
    "DEFAULT_BLOCK_TOKENS",
    "DEFAULT_KV_DISK_BYTES",
    "DEFAULT_QUEUE_BYTES",
    "DiskTier",
    "TierStats",
    "model_fingerprint",
)
