"""Where a run's branches arrive (:class:`Arrival`), how a fan-out's branches meet at their
joins (:func:`merge`), and running branches together (:func:`all_or_cancel`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, NamedTuple

from agentwarm._spec import Miss
from agentwarm.runtime.prefetch.misses import HitProbe

__all__ = ("Arrival", "Mark", "all_or_cancel", "merge")

#: What the previous step left for a node it chose: the probe of the prefetch that made it a
#: branch hit, the :class:`~agentwarm._spec.Miss` of a miss, ``None`` for the run's first step.
Mark = HitProbe | Miss | None


class Arrival(NamedTuple):
    """Where a branch is about to run ``node``: its path so far, previous node, and what the
    previous step left for it (``mark``: a hit's probe, or why it missed)."""

    node: str
    path: tuple[str, ...]
    from_node: str
    mark: Mark = None

    @property
    def prefetched(self) -> bool:
        """Whether the previous step prefetched ``node`` (a branch hit)."""
        return isinstance(self.mark, HitProbe)


def merge(arrivals: list[list[Arrival]]) -> list[Arrival]:
    """Arrivals of a fan-out's branches, one per join node (in branch order). A join counts as
    prefetched when any branch arriving at it prefetched it (that branch's probe is kept)."""
    by_join: dict[str, list[Arrival]] = {}
    for branch in arrivals:
        for a in branch:
            by_join.setdefault(a.node, []).append(a)
    return [next((a for a in group if a.prefetched), group[0]) for group in by_join.values()]


async def all_or_cancel(coros: list[Coroutine[Any, Any, list[Arrival]]]) -> list[list[Arrival]]:
    """Run branches concurrently; if one fails, cancel the others and raise its exception."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        return [t.result() for t in tasks]
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
