"""The experts' count tables: for each context, the (decayed) counts of the nodes that
followed it.

A table set maps a context (a tuple of node names for the Markov and recent experts, a
feature key for a feature expert) to its counts, least recently observed context first.
:func:`count` is the only writer while a model learns; :func:`entries` and
:func:`from_entries` are their saved form (lists of ``[context, counts]``, validated before by
:class:`~agentwarm.predictors._serial.MarkovState`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentwarm.predictors._serial import MIN_NORMAL

__all__ = ("Context", "Table", "count", "entries", "from_entries")

Context = tuple[str, ...]
Table = dict[str, float]


def count(
    tables: dict[Any, Table],
    contexts: Iterable[Any],
    next_node: str,
    decay: float,
    min_count: float,
    max_contexts: int | None,
) -> None:
    """Count ``next_node`` after each of ``contexts``, decaying its counts first (those below
    ``min_count`` go, and so do those decayed below the smallest normal float, whatever
    ``min_count``: a subnormal count is never kept, saved or divided by); the context moves
    to the end of ``tables`` (most recently observed last) and the least recently observed
    one goes past ``max_contexts``."""
    floor = max(min_count, MIN_NORMAL)
    for context in contexts:
        table = tables.pop(context, None)
        if table is None:
            table = {}
        elif decay < 1.0:
            for name in table:
                table[name] *= decay
            if table and min(table.values()) < floor:
                for name in [name for name, c in table.items() if c < floor]:
                    del table[name]
        table[next_node] = table.get(next_node, 0.0) + 1.0
        tables[context] = table
        if max_contexts is not None and len(tables) > max_contexts:
            del tables[next(iter(tables))]


def entries(tables: Mapping[Any, Table]) -> list[list[Any]]:
    """``tables`` as JSON data: ``[[context as a list, counts], ...]`` in their order."""
    return [[list(context), dict(table)] for context, table in tables.items()]


def from_entries(items: Sequence[tuple[Sequence[Any], Mapping[str, float]]]) -> dict[Any, Table]:
    """The tables of validated :func:`entries` (contexts back to tuples, counts copied)."""
    return {tuple(context): dict(table) for context, table in items}
