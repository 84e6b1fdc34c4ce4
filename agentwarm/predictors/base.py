"""The predictor protocol: P(next node | path so far, state), learned online.

Rules every implementation keeps:

* ``path`` is the sequence of node names executed so far in this run, ending with the current
  node (the runtime's ``StepScope.path``). It never contains :data:`START`; an empty path asks
  for the entry step.
* ``predict`` returns ``[(node, p), ...]`` sorted by ``p`` descending (ties keep the order of
  ``candidates``, else the order in which nodes were first observed), with ``p`` summing to 1.
  With ``candidates`` (the current node's declared successors, which may include :data:`END`)
  the distribution is over exactly those names, each listed once, even if never observed, so
  an untrained predictor still answers (uniformly). Without ``candidates`` it is over the nodes
  observed as successors so far, and empty when nothing has been observed.
* ``predict`` never changes learned state; ``observe(path, next_node)`` is the only update. The
  runtime calls it once per actual transition (once per branch after a fan-out), after it asked
  ``predict`` for the same ``path``.
* ``to_dict()`` returns JSON-serializable data with a ``"kind"`` key naming the implementation;
  ``type(p).from_dict(p.to_dict())`` predicts exactly as ``p`` does. ``from_dict`` raises
  ``ValueError`` (or ``TypeError``) on data it cannot use; :class:`~agentwarm.predictors.store.
  PredictorStore` treats that as a corrupt file.
* A predictor is owned by one workflow session and is not thread-safe. Processes that share
  a state directory share learning through the store: a predictor that is
  :class:`Mergeable` has what it learned added to the state saved meanwhile; any other
  predictor's save replaces the file (last writer wins).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, Self, runtime_checkable

# The shared words (defined in agentwarm._spec): END is the successor meaning "the run ends
# here"; START is the entry node's virtual predecessor, which predictors pad paths with to learn
# how runs start. Part of the predictor vocabulary, so listed in __all__.
from agentwarm._spec import END, START

__all__ = ("END", "START", "Mergeable", "Predictor", "rank", "support")


@runtime_checkable
class Predictor(Protocol):
    """Predicts the next node of a workflow run from the path so far; learns from outcomes."""

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """Next-node distribution, most likely first (see the module docstring for the rules)."""
        ...

    def observe(self, path: Sequence[str], next_node: str) -> None:
        """Learn that the run at ``path`` continued with ``next_node`` (possibly :data:`END`)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable learned state and configuration, with a ``"kind"`` key."""
        ...

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild a predictor from :meth:`to_dict` output; ``ValueError`` if it is unusable."""
        ...


@runtime_checkable
class Mergeable(Protocol):
    """A predictor whose learning from concurrent processes can be added together."""

    def merged(self, latest: Self, base: Self | None) -> Self:
        """A new predictor: ``latest`` (the state saved by others meanwhile) plus what ``self``
        learned since ``base`` (the state it was loaded from or last saved as; ``None``: since
        it was created). Counts nobody else changed since ``base`` are ``self``'s exactly.
        ``ValueError`` if the configurations differ and cannot be merged."""
        ...


def support(candidates: Sequence[str] | None, known: Iterable[str]) -> list[str]:
    """The names a prediction ranges over: ``candidates`` deduplicated in order, else ``known``."""
    if candidates is None:
        return list(known)
    return list(dict.fromkeys(candidates))


def rank(names: Sequence[str], weights: Sequence[float]) -> list[tuple[str, float]]:
    """Normalize ``weights`` to sum to 1 and sort descending, ties in ``names`` order.

    Non-positive totals give the uniform distribution, and so do weights that are not all
    finite and non-negative or whose total is not finite (no prediction is ever NaN).
    ``names`` must be distinct.
    """
    if not names:
        return []
    total = sum(weights)
    uniform = [1.0 / len(names)] * len(names)
    usable = 0.0 < total < math.inf and all(0.0 <= w < math.inf for w in weights)
    probs = [w / total for w in weights] if usable else uniform
    order = sorted(range(len(names)), key=lambda i: -probs[i])
    return [(names[i], probs[i]) for i in order]
