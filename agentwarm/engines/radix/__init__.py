"""A token-level radix tree: the prefix cache shared by the fake and the embedded engine.

:mod:`~agentwarm.engines.radix.node` holds a node and the results of a lookup,
:mod:`~agentwarm.engines.radix.cache` the tree (:class:`RadixCache`).

Keys are token-id sequences; each node stores the ids of one edge (``key``) and an optional
payload covering exactly those tokens (per-layer K/V for the :class:`LocalEngine`, ``None`` for
the :class:`FakeEngine`). The namespace is part of the key: every namespace has its own root,
so two namespaces never share a node.

Rules callers keep:

* One owner. The tree is not thread-safe; the engine that owns it mutates it from one thread.
* Node handles (:class:`RadixNode`) stay valid across splits: a split inserts a new parent above
  the node, which keeps its identity, children, locks and pins. An evicted or flushed node is
  detached and loses its payload and pins (a stale handle keeps no memory alive).
* ``match_prefix`` and ``insert`` split a node when the match ends inside it, so the returned
  node always covers exactly the matched ids and ``values`` are whole node payloads.
* ``lock(node)`` protects the path root→node until the matching ``unlock(node)``; locked nodes
  are never evicted. Every ``lock`` needs exactly one ``unlock`` on the same handle.
* Namespace bookkeeping is bounded by the cache: a namespace's root exists only while it holds
  a node or a lock. ``match_prefix`` in an unknown namespace returns a root that is not kept
  until it is locked; the operation that leaves a root empty and unlocked (``unlock``,
  ``insert`` with no room, ``evict``, ``reset``) drops it, so ``namespaces`` never keeps a
  namespace whose prefixes are gone.
* ``pin(node, ttl_s)`` protects node (and, because eviction is leaf-first, its ancestors) until
  ``unpin(node)`` or until the TTL runs out; an expired pin counts as no pin. Pins on a node are
  counted; ``unpin`` drops one and is a no-op on an unpinned or evicted node.
* With ``max_tokens`` set, ``total_tokens <= max_tokens`` always holds. ``insert`` evicts LRU
  leaves to make room; if locked or pinned nodes leave too little room it stores only the first
  part of the new ids that fits (possibly nothing) and reports the stored length.
"""

from agentwarm.engines.radix.cache import RadixCache
from agentwarm.engines.radix.node import InsertResult, MatchResult, PayloadOps, RadixNode

__all__ = ("InsertResult", "MatchResult", "PayloadOps", "RadixCache", "RadixNode")
