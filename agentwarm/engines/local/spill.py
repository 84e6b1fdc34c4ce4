"""Spilling the radix cache's KV to the tiers below it (issue 25): on eviction, and at a clean stop.

The tree's eviction hook (``RadixCache(on_evict=...)``) hands :meth:`Spiller.spill` each node just
before it leaves the tree. The tier stores whole blocks of ``block_tokens`` tokens keyed from the
start of the prompt, so a node's blocks are those from the block boundary at or below its start
to the last boundary at or below its end; the part of the first block above the node comes from
the values of the path above it (still in the tree). Blocks the tier already holds are skipped
(:meth:`~agentwarm.engines.kvtier.stack.TierStack.stored_everywhere`, in-memory lookups), the
rest is gathered into one compact tensor and handed to
:meth:`~agentwarm.engines.kvtier.stack.TierStack.write`: the host tier (on CUDA) copies it into
pinned memory without waiting, the disk tier only enqueues it for its writer thread: the worker
copies memory (device to host on CUDA) and never waits on disk.

:meth:`Spiller.spill_all` writes every node still cached (a clean stop: ``LocalEngine.aclose``
after the worker stopped); there, a write the tier's full queue dropped is retried after
waiting for the queue (``flush``), and only the disk tier is written (the host tier dies with
the process). Nodes dropped by a flush (``RadixCache.reset``) are not
spilled. A failure while spilling is logged once and never reaches the caller.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from agentwarm.engines.local.kv import KV, SEQ_DIM, slice_kv

if TYPE_CHECKING:
    from agentwarm.engines.kvtier.stack import TierStack
    from agentwarm.engines.radix import RadixCache, RadixNode

__all__ = ("Spiller",)

log = logging.getLogger(__name__)


class Spiller:
    """Writes evicted (or, at a stop, all) cached KV to the tiers of ``tier``.

    ``spilled_blocks`` counts the blocks handed to the tier; ``failures`` the spills that
    raised (logged once).
    """

    def __init__(self, tier: TierStack) -> None:
        self.tier = tier
        self.spilled_blocks = 0
        self.failures = 0

    def spill(self, node: RadixNode[KV]) -> None:
        """Hand ``node``'s blocks not yet stored to the tier (the eviction hook)."""
        self._spill(node, wait=False)

    def spill_all(self, cache: RadixCache[KV]) -> None:
        """Hand every cached node's blocks not yet stored to the tier, waiting for room in its
        queue when it is full (the tree must not change meanwhile: the worker has stopped)."""
        with torch.inference_mode():
            for node in list(cache.nodes()):
                self._spill(node, wait=True)

    def _spill(self, node: RadixNode[KV], *, wait: bool) -> None:
        try:
            self._write(node, wait=wait)
        except Exception as exc:
            self.failures += 1
            if self.failures == 1:
                log.warning(
                    "kv tier: spilling evicted KV failed (%r); the engine keeps serving, "
                    "what is not spilled is recomputed when needed",
                    exc,
                )

    def _write(self, node: RadixNode[KV], *, wait: bool) -> None:
        tier = self.tier
        if not tier.enabled:
            return
        block = tier.block_tokens
        end = node.depth // block * block
        start = (node.depth - len(node.key)) // block * block
        if end <= start:
            return  # no whole block ends inside this node
        ids = node.prefix_ids()[:end]
        stored = tier.stored_everywhere(node.namespace, ids, start)
        if stored >= end:
            return
        start = max(start, stored)
        kv = _gather(node, start, end)
        if kv is None:
            return
        disk = tier.disk
        dropped = disk.stats().writes_dropped if wait else 0
        tier.write(node.namespace, ids, kv, start, durable=wait)
        if wait and disk.stats().writes_dropped > dropped:
            disk.flush()
            tier.write(node.namespace, ids, kv, start, durable=True)
        self.spilled_blocks += (end - start) // block


def _gather(node: RadixNode[KV], start: int, stop: int) -> KV | None:
    """The KV of tokens ``[start, stop)`` of ``node``'s path (``stop`` at most its depth), as
    one new tensor on the cache's device; None when a node on the way holds no payload."""
    pieces: list[KV] = []
    cur: RadixNode[KV] | None = node
    while cur is not None and cur.parent is not None:
        lo, hi = cur.depth - len(cur.key), cur.depth
        if lo < stop:
            if cur.value is None:
                return None
            pieces.append(slice_kv(cur.value, max(start, lo) - lo, min(stop, hi) - lo))
        if lo <= start:
            break
        cur = cur.parent
    pieces.reverse()
    return torch.cat(pieces, dim=SEQ_DIM)
