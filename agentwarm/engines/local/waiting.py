"""The requests waiting for a step of the embedded engine's scheduler, in the order they run."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from agentwarm.engines.local.request import Request

__all__ = ("Waiting",)


class Waiting:
    """Waiting requests: the next is the one of highest priority, then earliest arrival.

    A heap of ``(-priority, arrival)`` finds it in O(log n) however many wait; entries of
    requests that left are dropped when they reach the top. Worker only.
    """

    def __init__(self) -> None:
        self._by_arrival: dict[int, Request] = {}
        self._order: list[tuple[int, int]] = []
        self._by_rid: dict[str, list[Request]] = {}
        self._arrivals = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._by_arrival)

    def __iter__(self) -> Iterator[Request]:
        return iter(list(self._by_arrival.values()))

    def add(self, req: Request) -> None:
        """Admit ``req``: it arrives now (``req.arrival`` is set)."""
        req.arrival = arrival = next(self._arrivals)
        self._by_arrival[arrival] = req
        heapq.heappush(self._order, (-req.priority, arrival))
        self._by_rid.setdefault(req.rid, []).append(req)

    def next(self) -> Request | None:
        """The request that runs next (it stays waiting), or ``None``."""
        order = self._order
        while order:
            req = self._by_arrival.get(order[0][1])
            if req is not None:
                return req
            heapq.heappop(order)
        return None

    def first_with(self, rid: str) -> Request | None:
        """The earliest waiting request with id ``rid``."""
        same = self._by_rid.get(rid)
        return same[0] if same else None

    def remove(self, req: Request) -> None:
        """Drop ``req`` (a no-op if it is not waiting)."""
        if self._by_arrival.get(req.arrival) is not req:
            return
        del self._by_arrival[req.arrival]
        if not self._by_arrival:
            self._order.clear()  # only stale entries left
        same = self._by_rid[req.rid]
        same.remove(req)
        if not same:
            del self._by_rid[req.rid]
