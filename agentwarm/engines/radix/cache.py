"""The radix tree itself: :class:`RadixCache` (lookup, insert, locks, pins, LRU eviction and
its integrity check). The rules callers keep are in :mod:`agentwarm.engines.radix`."""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from agentwarm.engines.radix.node import (
    InsertResult,
    MatchResult,
    PayloadOps,
    RadixNode,
    check_subtree,
    common_len,
    subtree,
)

__all__ = ("RadixCache",)

V = TypeVar("V")


class RadixCache(Generic[V]):
    """Token-level radix tree with namespaces, locks, TTL pins and LRU eviction.

    ``max_tokens`` is the token budget (``None``: unbounded). ``clock`` drives pin expiry and LRU
    order (inject a fake one in tests). ``ops`` measures and slices payloads; without it the tree
    stores no payloads and ``values`` hold ``None``. ``on_evict`` is called with each node that
    :meth:`evict` removes, just before it leaves the tree (a leaf, still attached: its payload
    and the path above it are intact); not for nodes dropped by :meth:`reset`. The hook must not
    change the tree; what it raises propagates out of the eviction.

    Counters: ``total_tokens`` (cached now), ``locked_tokens`` (on locked paths),
    ``active_locks`` (outstanding :meth:`lock` calls), ``evicted_tokens`` (dropped by eviction or
    :meth:`reset`, cumulative) and the computed ``evictable_tokens``.
    """

    def __init__(
        self,
        max_tokens: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        ops: PayloadOps[V] | None = None,
        on_evict: Callable[[RadixNode[V]], None] | None = None,
    ) -> None:
        if max_tokens is not None and max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self.clock = clock
        self.ops = ops
        self.on_evict = on_evict
        self._roots: dict[str, RadixNode[V]] = {}
        self._ticks = itertools.count()
        self.total_tokens = 0
        self.locked_tokens = 0
        self.evicted_tokens = 0
        self.active_locks = 0

    # ----------------------------------------------------------------- lookup

    def match_prefix(self, namespace: str, ids: Sequence[int]) -> MatchResult[V]:
        """Longest cached prefix of ``ids`` in ``namespace``; touches the path's LRU time."""
        node, length = self._walk(namespace, ids, create=False)
        self._touch(node)
        path = node.path()
        return MatchResult(length, node, tuple(n.value for n in path))

    def _walk(
        self, namespace: str, ids: Sequence[int], *, create: bool
    ) -> tuple[RadixNode[V], int]:
        node = self._roots.get(namespace)
        if node is None:
            node = RadixNode[V](namespace, (), None, None)
            if create:
                self._roots[namespace] = node
            return node, 0
        pos = 0
        n = len(ids)
        while pos < n:
            child = node.children.get(ids[pos])
            if child is None:
                break
            key = child.key
            k = common_len(key, ids, pos)
            if k < len(key):
                node = self._split(child, k)
                pos += k
                break
            node = child
            pos += k
        return node, pos

    # ----------------------------------------------------------------- insert

    def insert(
        self,
        namespace: str,
        ids: Sequence[int],
        value: V | None = None,
        *,
        value_offset: int = 0,
    ) -> InsertResult[V]:
        """Cache ``ids``; ``value`` covers ``ids[value_offset:]``.

        Only the part not already present is stored (sliced out of ``value``). If the cached
        part is shorter than ``value_offset`` there is a gap the tree cannot fill, so nothing is
        stored. Evicts to stay within the budget and stores only what fits.
        """
        if self.ops is not None and value is not None:
            have = self.ops.length(value)
            if have != len(ids) - value_offset:
                raise ValueError(
                    f"value covers {have} tokens, ids[{value_offset}:] has "
                    f"{len(ids) - value_offset}"
                )
        node, cached = self._walk(namespace, ids, create=True)
        want = len(ids) - cached
        if want == 0 or cached < value_offset:
            self._touch(node)
            self._drop_if_empty(node)
            return InsertResult(cached, node, cached)
        room = want
        if self.max_tokens is not None:
            free = self.max_tokens - self.total_tokens
            if free < want:
                self.lock(node)
                try:
                    self.evict(want - free)
                finally:
                    self._unlock(node)
                room = min(want, self.max_tokens - self.total_tokens)
        if room <= 0:
            self._touch(node)
            self._drop_if_empty(node)
            return InsertResult(cached, node, cached)
        stop = cached + room
        piece: V | None = None
        if value is not None and self.ops is not None:
            start, end = cached - value_offset, stop - value_offset
            piece = (
                value
                if (start, end) == (0, self.ops.length(value))
                else (self.ops.slice(value, start, end))
            )
        child = RadixNode(namespace, tuple(ids[cached:stop]), piece, node)
        node.children[child.key[0]] = child
        self.total_tokens += room
        self._touch(child)
        return InsertResult(cached, child, stop)

    # ------------------------------------------------------------ lock / pin

    def lock(self, node: RadixNode[V]) -> None:
        """Protect the path root→``node`` from eviction (reference counted)."""
        if node.parent is None and node.namespace not in self._roots:
            self._roots[node.namespace] = node  # the root of a miss in a new namespace
        node.own_locks += 1
        self.active_locks += 1
        cur: RadixNode[V] | None = node
        while cur is not None:
            if cur.lock_ref == 0:
                self.locked_tokens += len(cur.key)
            cur.lock_ref += 1
            cur = cur.parent

    def unlock(self, node: RadixNode[V]) -> None:
        """Release one :meth:`lock` of ``node``. Raises ValueError if it holds none."""
        self._drop_if_empty(self._unlock(node))

    def _unlock(self, node: RadixNode[V]) -> RadixNode[V]:
        """:meth:`unlock` without dropping an emptied root; returns the root of ``node``."""
        if node.own_locks <= 0:
            raise ValueError(f"unlock of a node that is not locked: {node!r}")
        node.own_locks -= 1
        self.active_locks -= 1
        cur = node
        while True:
            cur.lock_ref -= 1
            if cur.lock_ref == 0:
                self.locked_tokens -= len(cur.key)
            if cur.parent is None:
                return cur
            cur = cur.parent

    def pin(self, node: RadixNode[V], ttl_s: float) -> None:
        """Protect ``node`` and its ancestors for ``ttl_s`` seconds (or until :meth:`unpin`)."""
        now = self.clock()
        if not self.is_pinned(node):
            node.pin_count = 0
        node.pin_count += 1
        node.pin_until = max(node.pin_until, now + ttl_s)

    def unpin(self, node: RadixNode[V]) -> None:
        """Drop one pin of ``node``; no-op if it has none."""
        if node.pin_count > 0:
            node.pin_count -= 1
        if node.pin_count == 0:
            node.pin_until = 0.0

    def is_pinned(self, node: RadixNode[V]) -> bool:
        """True while ``node`` holds an unexpired pin."""
        return node.pin_count > 0 and self.clock() < node.pin_until

    def is_attached(self, node: RadixNode[V]) -> bool:
        """True while ``node`` is still in the tree (not evicted or flushed)."""
        cur = node
        while cur.parent is not None:
            if cur.parent.children.get(cur.key[0]) is not cur:
                return False
            cur = cur.parent
        return self._roots.get(cur.namespace) is cur

    # --------------------------------------------------------------- eviction

    def evict(self, num_tokens: int) -> int:
        """Evict least-recently-used unprotected leaves until ``num_tokens`` are freed.

        Returns the number of tokens freed (less when everything left is locked or pinned,
        possibly more because whole nodes go).
        """
        if num_tokens <= 0:
            return 0
        now = self.clock()
        heap = [
            (n.last_access, n.access_tick, id(n), n)
            for n in self.nodes()
            if self._evictable_leaf(n, now)
        ]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < num_tokens:
            *_, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            if self.on_evict is not None:
                self.on_evict(node)
            self._remove(node)
            freed += len(node.key)
            if not parent.is_root and self._evictable_leaf(parent, now):
                heapq.heappush(heap, (parent.last_access, parent.access_tick, id(parent), parent))
        self.evicted_tokens += freed
        self._drop_empty_roots()
        return freed

    def reset(self) -> int:
        """Drop every unlocked node (pins included); returns the tokens dropped."""
        dropped = 0
        for root in list(self._roots.values()):
            for child in list(root.children.values()):
                dropped += self._drop_unlocked(child)
        self.evicted_tokens += dropped
        self._drop_empty_roots()
        return dropped

    def _drop_unlocked(self, node: RadixNode[V]) -> int:
        if node.lock_ref > 0:
            return sum(self._drop_unlocked(c) for c in list(node.children.values()))
        dropped = 0
        for sub in subtree(node):
            dropped += len(sub.key)
            sub.value = None
            sub.pin_count = 0
            sub.pin_until = 0.0
        parent = node.parent
        assert parent is not None
        del parent.children[node.key[0]]
        node.parent = None
        self.total_tokens -= dropped
        return dropped

    def _evictable_leaf(self, node: RadixNode[V], now: float) -> bool:
        return (
            not node.children
            and node.parent is not None
            and node.lock_ref == 0
            and not (node.pin_count > 0 and now < node.pin_until)
        )

    def _remove(self, node: RadixNode[V]) -> None:
        parent = node.parent
        assert parent is not None and not node.children
        del parent.children[node.key[0]]
        node.parent = None
        node.value = None
        node.pin_count = 0
        node.pin_until = 0.0
        self.total_tokens -= len(node.key)

    def _drop_empty_roots(self) -> None:
        for ns, root in list(self._roots.items()):
            if not root.children and root.lock_ref == 0:
                del self._roots[ns]

    def _drop_if_empty(self, node: RadixNode[V]) -> None:
        """Forget ``node``'s namespace if ``node`` is its root and holds no node and no lock."""
        if (
            node.parent is None
            and not node.children
            and node.lock_ref == 0
            and self._roots.get(node.namespace) is node
        ):
            del self._roots[node.namespace]

    # --------------------------------------------------------------- counters

    @property
    def evictable_tokens(self) -> int:
        """Tokens that eviction could free now (not locked, no unexpired pin below them)."""
        now = self.clock()
        total = 0
        for root in self._roots.values():
            for child in root.children.values():
                total += self._evictable_in(child, now)[0]
        return total

    def _evictable_in(self, node: RadixNode[V], now: float) -> tuple[int, bool]:
        """(evictable tokens in the subtree, whether the subtree holds a protected node)."""
        total = 0
        protected = node.lock_ref > 0 or (node.pin_count > 0 and now < node.pin_until)
        for child in node.children.values():
            sub, sub_protected = self._evictable_in(child, now)
            total += sub
            protected = protected or sub_protected
        if not protected:
            total += len(node.key)
        return total, protected

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Namespaces that hold a cached prefix or a lock now."""
        return tuple(self._roots)

    def nodes(self) -> Iterator[RadixNode[V]]:
        """Every cached node of every namespace, each parent before its children; the tree must
        not change while the iterator is used."""
        for root in self._roots.values():
            for child in root.children.values():
                yield from subtree(child)

    def _touch(self, node: RadixNode[V]) -> None:
        now = self.clock()
        tick = next(self._ticks)
        cur: RadixNode[V] | None = node
        while cur is not None:
            cur.last_access = now
            cur.access_tick = tick
            cur = cur.parent

    def _split(self, node: RadixNode[V], at: int) -> RadixNode[V]:
        """Cut ``node`` after ``at`` tokens; the new upper part is returned, ``node`` keeps the
        rest and its identity (locks, pins, children)."""
        parent = node.parent
        assert parent is not None and 0 < at < len(node.key)
        head_value: V | None = None
        if node.value is not None and self.ops is not None:
            head_value = self.ops.slice(node.value, 0, at)
            node.value = self.ops.slice(node.value, at, len(node.key))
        head = RadixNode(node.namespace, node.key[:at], head_value, parent)
        head.lock_ref = node.lock_ref
        head.last_access = node.last_access
        head.access_tick = node.access_tick
        parent.children[head.key[0]] = head
        node.key = node.key[at:]
        node.parent = head
        head.children[node.key[0]] = node
        return head

    # -------------------------------------------------------------- integrity

    def check_integrity(self) -> None:
        """Recount everything; raise RuntimeError naming the counts that disagree."""
        problems: list[str] = []
        total = locked = locks = 0
        for ns, root in self._roots.items():
            if root.parent is not None or root.key or root.namespace != ns:
                problems.append(f"root of namespace {ns!r} is malformed: {root!r}")
            if not root.children and root.lock_ref == 0:
                problems.append(f"namespace {ns!r} is kept with no node and no lock")
            total_ns, locked_ns, locks_ns = check_subtree(root, self.ops, problems)
            total += total_ns
            locked += locked_ns
            locks += locks_ns
        if total != self.total_tokens:
            problems.append(f"total_tokens={self.total_tokens} but nodes hold {total}")
        if locked != self.locked_tokens:
            problems.append(f"locked_tokens={self.locked_tokens} but locked nodes hold {locked}")
        if locks != self.active_locks:
            problems.append(f"active_locks={self.active_locks} but nodes hold {locks} locks")
        if self.max_tokens is not None and self.total_tokens > self.max_tokens:
            problems.append(f"total_tokens={self.total_tokens} > max_tokens={self.max_tokens}")
        if problems:
            raise RuntimeError("radix cache integrity: " + "; ".join(problems))
