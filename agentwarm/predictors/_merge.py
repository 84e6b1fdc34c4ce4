"""Merge-on-save: add what one process learned to the state others saved meanwhile.

Every count merges as ``latest + (mine - base)``: ``latest`` is the state on disk now, ``mine``
the state of this process, ``base`` the state this process loaded or last saved. Where
``latest`` still equals ``base`` (nobody else changed that count) the result is ``mine``
exactly, so a lone writer saves exactly what it learned. Where both changed a count, the two
deltas add.

For plain (undecayed) counts that is exact: the saved counts are the sum of what every process
observed. For decayed counts it is the first-order approximation of interleaving the two
processes' observations: each process's decay of the shared ``base`` is applied once, and
neither decays the other's fresh counts. The error is of order ``(1 - decay)`` per observation
of a context, far below the noise of counts that forget on purpose. Counts that end below
``min_count`` (or at or below 0, or subnormal) are dropped, as decay drops them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

from agentwarm.predictors._serial import MIN_NORMAL

__all__ = ("counts", "tables")

K = TypeVar("K", bound=Hashable)
Table = dict[str, float]


def counts(
    latest: Mapping[str, float], mine: Table, base: Mapping[str, float], min_count: float
) -> Table:
    """One count table: ``latest`` plus the change from ``base`` to ``mine``."""
    out = dict(latest)
    for name in dict.fromkeys([*base, *mine]):
        before = base.get(name, 0.0)
        after = mine.get(name, 0.0)
        if after == before:
            continue
        now = latest.get(name, 0.0)
        value = after if now == before else now + after - before
        if value < MIN_NORMAL or value < min_count:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def tables(
    latest: Mapping[K, Table],
    mine: Mapping[K, Table],
    base: Mapping[K, Table],
    *,
    min_count: float,
    max_contexts: int | None,
) -> dict[K, Table]:
    """Count tables by context, kept in least-recently-observed-first order.

    Contexts this process changed move to the end in its own order (it observed them last);
    emptied contexts are dropped; past ``max_contexts`` the least recent ones go.
    """
    out = {key: dict(table) for key, table in latest.items()}
    empty: Table = {}
    for key in dict.fromkeys([*(k for k in base if k not in mine), *mine]):
        before = base.get(key, empty)
        after = mine.get(key, empty)
        if after == before:
            continue
        merged = counts(out.pop(key, empty), after, before, min_count)
        if merged:
            out[key] = merged
    if max_contexts is not None:
        for key in list(out)[: max(0, len(out) - max_contexts)]:
            del out[key]
    return out
