"""The scheduler's bookkeeping in the radix cache: the path each running request holds locked,
the prefix KV it keeps there as it computes it, and the TTL pins of finished speculative
prefills. Worker only (the cache is not thread-safe)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentwarm.engines.local.request import Request
    from agentwarm.engines.radix import InsertResult, MatchResult, RadixCache, RadixNode

__all__ = ("Prefixes",)

#: Remembered pins past which expired ones are swept out all at once.
_SWEEP_MIN = 256


class Prefixes:
    """Locks, inserts and pins for the requests of one scheduler over ``cache``.

    A request holds one lock, on the deepest node of its prompt known to be cached
    (``req.node``), from :meth:`start` until :meth:`release`. A finished prefill's path is
    pinned under its rid for its own TTL, else ``pin_ttl_s`` seconds (no pin when it is not
    positive). Pinning a path already pinned extends its pin (the cache keeps the later expiry).
    """

    def __init__(self, cache: RadixCache[Any], pin_ttl_s: float) -> None:
        self.cache = cache
        self.pin_ttl_s = pin_ttl_s
        #: rid -> (the node it pinned, when that pin expires on the cache's clock).
        self._pins: dict[str, tuple[RadixNode[Any], float]] = {}
        #: node -> the rids whose pins count on it now (its pin count since it was last unpinned).
        self._rids: dict[RadixNode[Any], set[str]] = {}
        self._sweep_at = _SWEEP_MIN

    @property
    def pinned(self) -> int:
        """Finished prefills whose pins are still remembered (expired ones are forgotten as
        new ones come)."""
        return len(self._pins)

    def start(self, req: Request) -> MatchResult[Any]:
        """Match ``req``'s prompt, lock the matched path and count its tokens as cached."""
        match = self.cache.match_prefix(req.namespace, req.ids[: req.match_limit])
        self.cache.lock(match.node)
        req.node = match.node
        req.cached_tokens = match.length
        return match

    def catch_up(self, req: Request) -> MatchResult[Any] | None:
        """The match of ``req``'s prompt if the tree now holds more of it than ``req``'s state
        (another request computed it meanwhile): the lock moves there and the gain counts as
        cached. ``None`` when there is nothing to gain."""
        assert req.state is not None and req.node is not None
        match = self.cache.match_prefix(req.namespace, req.ids[: req.match_limit])
        gained = match.length - req.state.length
        if gained <= 0:
            return None
        self._move_lock(req, match.node)
        req.cached_tokens += gained
        return match

    def keep(self, req: Request, ids: tuple[int, ...]) -> None:
        """Insert the KV ``req`` computed for ``ids`` beyond its locked path; move the lock to
        the end of what was stored."""
        assert req.state is not None and req.node is not None
        offset = req.node.depth
        if len(ids) <= offset or not self.cache.is_attached(req.node):
            return
        self.insert(req, ids, req.state.kv(offset, len(ids)), offset)

    def insert(
        self, req: Request, ids: Sequence[int], value: Any, offset: int
    ) -> InsertResult[Any]:
        """Insert ``value`` (the KV of ``ids[offset:]``, ``offset`` at most the depth of
        ``req``'s locked path) for ``req`` and move its lock to the end of what is stored
        (``result.length``: less than ``len(ids)`` when the budget left no room)."""
        assert req.node is not None and offset <= req.node.depth
        result = self.cache.insert(req.namespace, ids, value, value_offset=offset)
        if result.length > req.node.depth:
            self._move_lock(req, result.node)
        return result

    def rematch(self, req: Request, stop: int | None = None) -> MatchResult[Any]:
        """Match ``req``'s prompt again, up to ``stop`` (default: all it may take from the
        cache), while it loads KV into the tree: the lock moves to the end of the match and the
        tokens gained count as cached."""
        assert req.node is not None
        limit = req.match_limit if stop is None else min(stop, req.match_limit)
        match = self.cache.match_prefix(req.namespace, req.ids[:limit])
        if match.node is not req.node and match.length >= req.node.depth:
            self._move_lock(req, match.node)
        req.cached_tokens = max(req.cached_tokens, match.length)
        return match

    def release(self, req: Request) -> None:
        """Keep what ``req`` computed (best effort: a failure there changes no outcome) and
        unlock its path. A no-op for a request that never started."""
        if req.node is None:
            return
        try:
            if req.state is not None:
                self.keep(req, (*req.ids, *req.output)[: req.state.length])
        except Exception:
            pass  # caching what was computed is best effort; the outcome stands
        finally:
            self.cache.unlock(req.node)

    def pin(self, rid: str, node: RadixNode[Any], ttl_s: float | None = None) -> None:
        """Pin ``node`` for ``rid`` for ``ttl_s`` seconds (``None``: :attr:`pin_ttl_s`); a node
        already pinned keeps the later expiry. Forgets pins that expired."""
        ttl = self.pin_ttl_s if ttl_s is None else ttl_s
        if ttl <= 0:
            return
        self.unpin(rid)
        if not self.cache.is_pinned(node):  # its pins expired: they no longer count on it
            for old in self._rids.pop(node, ()):
                self._pins.pop(old, None)
        self.cache.pin(node, ttl)
        self._pins[rid] = (node, self.cache.clock() + ttl)
        self._rids.setdefault(node, set()).add(rid)
        self._forget_expired()

    def unpin(self, rid: str) -> None:
        """Drop the pin of ``rid``'s finished prefill, if it holds one (the node stays pinned
        while another pin on it lasts)."""
        pinned = self._pins.pop(rid, None)
        if pinned is not None:
            self._forget(rid, pinned[0])
            self.cache.unpin(pinned[0])

    def _forget(self, rid: str, node: RadixNode[Any]) -> None:
        rids = self._rids.get(node)
        if rids is not None:
            rids.discard(rid)
            if not rids:
                del self._rids[node]

    def _forget_expired(self) -> None:
        """Forget expired pins: the oldest ones at once, all of them whenever the dict doubled
        since the last sweep (pins of different TTLs expire out of order); amortized O(1)."""
        now = self.cache.clock()
        expired = []
        for rid, (node, until) in self._pins.items():
            if now < until:
                break
            expired.append((rid, node))
        if len(self._pins) - len(expired) > self._sweep_at:
            expired = [(r, n) for r, (n, until) in self._pins.items() if until <= now]
            self._sweep_at = max(_SWEEP_MIN, 2 * (len(self._pins) - len(expired)))
        for rid, node in expired:
            del self._pins[rid]
            self._forget(rid, node)

    def flush(self) -> int:
        """Drop every unlocked node and pin; returns the tokens dropped."""
        self._pins.clear()
        self._rids.clear()
        dropped = self.cache.reset()
        self.cache.evicted_tokens = 0
        return dropped

    def idle_problem(self) -> RuntimeError | None:
        """What is wrong with the cache when no request runs (a lock still held counts)."""
        try:
            self.cache.check_integrity()
            if self.cache.active_locks:
                raise RuntimeError(
                    f"scheduler idle but {self.cache.active_locks} radix locks are held "
                    f"({self.cache.locked_tokens} tokens)"
                )
        except RuntimeError as exc:
            return exc
        return None

    def _move_lock(self, req: Request, node: RadixNode[Any]) -> None:
        assert req.node is not None
        self.cache.lock(node)
        self.cache.unlock(req.node)
        req.node = node
