"""The scheduler's bookkeeping in the radix cache: the path each running request holds locked,
the prefix KV it keeps there as it computes it, and the TTL pins of finished speculative
prefills. Worker only (the cache is not thread-safe)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentwarm.engines.local.request import Request
    from agentwarm.engines.radix import MatchResult, RadixCache, RadixNode

__all__ = ("Prefixes",)


class Prefixes:
    """Locks, inserts and pins for the requests of one scheduler over ``cache``.

    A request holds one lock, on the deepest node of its prompt known to be cached
    (``req.node``), from :meth:`start` until :meth:`release`. A finished prefill's path is
    pinned for ``pin_ttl_s`` seconds (no pin when it is not positive) under its rid.
    """

    def __init__(self, cache: RadixCache[Any], pin_ttl_s: float) -> None:
        self.cache = cache
        self.pin_ttl_s = pin_ttl_s
        self._pins: dict[str, RadixNode[Any]] = {}

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
        kv = req.state.kv(offset, len(ids))
        result = self.cache.insert(req.namespace, ids, kv, value_offset=offset)
        if result.length > offset:
            self._move_lock(req, result.node)

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

    def pin(self, rid: str, node: RadixNode[Any]) -> None:
        """Pin ``node`` for ``rid``; forget pins that expired (oldest first, same TTL for all)."""
        if self.pin_ttl_s <= 0:
            return
        self.cache.pin(node, self.pin_ttl_s)
        self.unpin(rid)
        self._pins[rid] = node
        while self._pins:
            oldest = next(iter(self._pins))
            if self.cache.is_pinned(self._pins[oldest]):
                break
            del self._pins[oldest]

    def unpin(self, rid: str) -> None:
        """Drop the pin of ``rid``'s finished prefill, if it holds one."""
        node = self._pins.pop(rid, None)
        if node is not None:
            self.cache.unpin(node)

    def flush(self) -> int:
        """Drop every unlocked node and pin; returns the tokens dropped."""
        self._pins.clear()
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
