"""A plain first-order frequency predictor, the baseline the default is measured against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from agentwarm.predictors import _merge, _serial
from agentwarm.predictors.base import START, rank, support

__all__ = ("FirstOrderPredictor",)


class FirstOrderPredictor:
    """``P(x | current node) = (count(current -> x) + pseudo_count) / normalizer``.

    The current node is ``path[-1]`` (:data:`START` for an empty path). No backoff to shorter
    contexts, no decay, ``state`` ignored: with ``pseudo_count > 0`` an unseen node gets the
    uniform distribution over the support.
    """

    kind: ClassVar[str] = "first_order"

    def __init__(self, *, pseudo_count: float = 0.1) -> None:
        if not 0 <= pseudo_count <= _serial.MAX_COUNT:
            raise ValueError(f"pseudo_count must be in [0, 2**53], got {pseudo_count!r}")
        _serial.normal(pseudo_count)  # what the saved state must hold
        self.pseudo_count = float(pseudo_count)
        self._counts: dict[str, dict[str, float]] = {}
        self._known: dict[str, None] = {}

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """Successor frequencies of the current node, smoothed by ``pseudo_count``."""
        names = support(candidates, self._known)
        table = self._counts.get(path[-1] if path else START, {})
        return rank(names, [table.get(name, 0.0) + self.pseudo_count for name in names])

    def observe(self, path: Sequence[str], next_node: str) -> None:
        """Count one ``current -> next_node`` transition."""
        table = self._counts.setdefault(path[-1] if path else START, {})
        table[next_node] = table.get(next_node, 0.0) + 1.0
        self._known.setdefault(next_node, None)

    def merged(self, latest: Self, base: Self | None) -> Self:
        """``latest`` plus the counts this model added since ``base`` (``None``: since it was
        made); exact. ``ValueError`` if ``pseudo_count`` differs."""
        for other in (latest, base):
            if other is not None and other.pseudo_count != self.pseudo_count:
                raise ValueError(f"cannot merge {self!r} with {other!r}: another pseudo_count")
        out = type(self)(pseudo_count=self.pseudo_count)
        out._known = dict.fromkeys([*latest._known, *self._known])
        before = base._counts if base is not None else {}
        out._counts = _merge.tables(
            latest._counts, self._counts, before, min_count=0.0, max_contexts=None
        )
        return out

    def to_dict(self) -> dict[str, Any]:
        """Counts as JSON-serializable data (``kind`` ``"first_order"``)."""
        return {
            "kind": self.kind,
            "pseudo_count": self.pseudo_count,
            "known": list(self._known),
            "counts": {node: dict(table) for node, table in self._counts.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` names the first bad field."""
        state = _serial.parse(_serial.FirstOrderState, data)
        model = cls(pseudo_count=state.pseudo_count)
        model._known = dict.fromkeys(state.known)
        model._counts = {node: dict(table) for node, table in state.counts.items()}
        return model

    def __repr__(self) -> str:
        return f"FirstOrderPredictor(pseudo_count={self.pseudo_count})"
