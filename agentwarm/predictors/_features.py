"""Context features of a path beyond its last few nodes, used by the feature experts of
:class:`~agentwarm.predictors.markov.MarkovPredictor`.

Each feature refines the current node ``c = path[-1]`` with one more fact about the run, as a
hashable key whose first element is ``c``:

* ``run``: ``(c, r)``, ``r`` = how many times in a row ``c`` has just run (capped at
  :data:`CAP`). Agents repeat a tool once per item (one lookup per order, one page per hit).
* ``count``: ``(c, k)``, ``k`` = how many times ``c`` has run so far in this run (capped at
  :data:`CAP`). Retries and rounds: the third ``run_tests`` is followed by other steps than the
  first.
* ``visited``: ``(c, *names)``, the sorted set of nodes run so far (``c`` included). Progress
  through a task: a supervisor sends work to the workers not yet visited; a run ends after its
  write actions.

An empty path (the entry prediction) has no feature key. Keys go to JSON as lists and come back
through :func:`decode`, which raises ``ValueError`` on anything :func:`key` cannot produce.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ("CAP", "FEATURES", "FeatureKey", "decode", "key", "keys")

FeatureKey = tuple[Any, ...]

#: Run lengths and counts above this share one key (longer loops look alike).
CAP = 8


def _run(path: Sequence[str]) -> FeatureKey:
    current = path[-1]
    r = 0
    for name in reversed(path):
        if name != current or r == CAP:
            break
        r += 1
    return (current, r)


def _count(path: Sequence[str]) -> FeatureKey:
    return (path[-1], min(CAP, path.count(path[-1])))


def _visited(path: Sequence[str]) -> FeatureKey:
    return (path[-1], *sorted(set(path)))


_KEYS: dict[str, Callable[[Sequence[str]], FeatureKey]] = {
    "run": _run,
    "count": _count,
    "visited": _visited,
}

#: The feature names, in the order experts are listed.
FEATURES: tuple[str, ...] = tuple(_KEYS)


def key(feature: str, path: Sequence[str]) -> FeatureKey | None:
    """The key of ``feature`` for ``path``; ``None`` for the empty path."""
    return _KEYS[feature](path) if path else None


def keys(features: Sequence[str], path: Sequence[str]) -> list[FeatureKey | None]:
    """The :func:`key` of each of ``features`` for ``path``, in order."""
    if not path:
        return [None] * len(features)
    return [_KEYS[feature](path) for feature in features]


def decode(feature: str, value: Any, where: str) -> FeatureKey:
    """The key a JSON list stands for; ``ValueError`` naming ``where`` if ``key`` cannot make it."""
    ok = isinstance(value, list) and len(value) >= 2 and isinstance(value[0], str)
    if ok and feature in ("run", "count"):
        n = value[1]
        ok = len(value) == 2 and type(n) is int and 1 <= n <= CAP
    elif ok:
        names = value[1:]
        ok = (
            all(isinstance(v, str) for v in names)
            and value[0] in names
            and names == sorted(set(names))
        )
    if not ok:
        raise ValueError(f"{where}: not a {feature!r} context: {value!r}")
    return tuple(value)
