"""The default learned predictor: a variable-order Markov model with decay.

For a path ``(..., a, b, c)`` the model keeps counts of what followed each recent context
``()``, ``(c,)``, ``(b, c)``, ``(a, b, c)`` up to ``max_order`` nodes. Paths are padded on the
left with :data:`START`, so ``(START, a)`` means "``a`` was the first step", which lets the model
learn how runs begin apart from how they continue.

A prediction blends the orders from short to long, PPM-C / Witten-Bell style: starting from a
uniform prior over the support (the declared successors when given), each context with counts
``c(x)`` replaces the estimate ``P`` by ``(c(x) + e * P(x)) / (sum(c) + e)``, where the escape
mass ``e = backoff * (number of distinct successors seen)``. A context seen often with few
distinct successors is trusted; a fresh or diverse context defers to the shorter ones. The
counts are restricted to the support before blending, so the result is exactly a distribution
over the candidates.

Drift: every time a context is observed, its counts are first multiplied by
``0.5 ** (1 / half_life)``, so evidence in that context loses half its weight after
``half_life`` further observations of it. After a change of behaviour, a context that had
saturated (seen many half-lives) switches its most likely successor within ``half_life``
observations. Counts that decay below ``min_count`` are dropped.

``state`` is accepted for the protocol and ignored: the model conditions on the path only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from agentwarm.predictors import _serial
from agentwarm.predictors.base import START, rank, support

__all__ = ("MarkovPredictor", "default_predictor")

Context = tuple[str, ...]


class MarkovPredictor:
    """Variable-order Markov predictor with Witten-Bell blending, a uniform prior, and decay.

    Args:
        max_order: longest context, in nodes (``START`` counts as one). 0 gives plain
            successor frequencies; 1 is a first-order model with a unigram fallback.
        half_life: observations of a context after which its older counts weigh half;
            ``None`` never forgets.
        backoff: escape weight per distinct successor; larger trusts long contexts less.
        min_count: decayed counts below this are dropped.
    """

    kind: ClassVar[str] = "markov"

    def __init__(
        self,
        max_order: int = 3,
        *,
        half_life: float | None = 200.0,
        backoff: float = 2.0,
        min_count: float = 1e-3,
    ) -> None:
        if isinstance(max_order, bool) or not isinstance(max_order, int) or max_order < 0:
            raise ValueError(f"max_order must be an integer >= 0, got {max_order!r}")
        if half_life is not None and not half_life > 0:
            raise ValueError(f"half_life must be > 0 or None, got {half_life!r}")
        if not backoff > 0:
            raise ValueError(f"backoff must be > 0, got {backoff!r}")
        if not 0 <= min_count < 1:
            raise ValueError(f"min_count must be in [0, 1), got {min_count!r}")
        self.max_order = max_order
        self.half_life = None if half_life is None else float(half_life)
        self.backoff = float(backoff)
        self.min_count = float(min_count)
        self._decay = 1.0 if half_life is None else 0.5 ** (1.0 / half_life)
        self._counts: dict[Context, dict[str, float]] = {}
        self._known: dict[str, None] = {}
        self._observations = 0

    @property
    def observations(self) -> int:
        """Number of transitions observed so far."""
        return self._observations

    @property
    def num_contexts(self) -> int:
        """Number of distinct contexts with counts."""
        return len(self._counts)

    def counts(self, context: Sequence[str]) -> dict[str, float]:
        """A copy of the (decayed) successor counts of ``context`` (empty if never seen)."""
        return dict(self._counts.get(tuple(context), {}))

    def contexts(self, path: Sequence[str]) -> list[Context]:
        """The contexts of ``path`` from order 0 to the longest available, shortest first."""
        tail = (START, *path[-self.max_order :]) if self.max_order else ()
        longest = min(self.max_order, len(path) + 1)
        return [(), *(tail[len(tail) - k :] for k in range(1, longest + 1))]

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """Next-node distribution over ``candidates`` (else over observed successors)."""
        names = support(candidates, self._known)
        if not names:
            return []
        probs = [1.0 / len(names)] * len(names)
        for context in self.contexts(path):
            table = self._counts.get(context)
            if table is None:
                break  # longer contexts are observed together with this one: none exist
            seen = [table.get(name, 0.0) for name in names]
            total = sum(seen)
            if total <= 0.0:
                continue
            escape = self.backoff * sum(min(1.0, c) for c in seen)
            probs = [(c + escape * p) / (total + escape) for c, p in zip(seen, probs, strict=True)]
        return rank(names, probs)

    def observe(self, path: Sequence[str], next_node: str) -> None:
        """Count ``next_node`` after every context of ``path``, decaying those contexts first."""
        for context in self.contexts(path):
            table = self._counts.setdefault(context, {})
            if self._decay < 1.0:
                for name in list(table):
                    value = table[name] * self._decay
                    if value < self.min_count:
                        del table[name]
                    else:
                        table[name] = value
            table[next_node] = table.get(next_node, 0.0) + 1.0
        self._known.setdefault(next_node, None)
        self._observations += 1

    def to_dict(self) -> dict[str, Any]:
        """Configuration and counts as JSON-serializable data (``kind`` ``"markov"``)."""
        return {
            "kind": self.kind,
            "max_order": self.max_order,
            "half_life": self.half_life,
            "backoff": self.backoff,
            "min_count": self.min_count,
            "observations": self._observations,
            "known": list(self._known),
            "contexts": [[list(ctx), dict(table)] for ctx, table in self._counts.items()],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` names the first bad field."""
        _serial.check_kind(data, cls.kind)
        model = cls(
            int(_serial.number(data, "max_order", integer=True)),
            half_life=_serial.optional_number(data, "half_life"),
            backoff=_serial.number(data, "backoff"),
            min_count=_serial.number(data, "min_count"),
        )
        observations = int(_serial.number(data, "observations", integer=True))
        if observations < 0:
            raise ValueError(f"predictor state field 'observations' is negative: {observations}")
        model._observations = observations
        model._known = dict.fromkeys(_serial.name_list(data.get("known"), "known"))
        entries = data.get("contexts")
        if not isinstance(entries, list):
            raise ValueError("predictor state field 'contexts' must be a list")
        for i, entry in enumerate(entries):
            if not isinstance(entry, list) or len(entry) != 2:
                raise ValueError(f"predictor state contexts[{i}] must be [context, counts]")
            context = tuple(_serial.name_list(entry[0], f"contexts[{i}][0]"))
            if len(context) > model.max_order:
                raise ValueError(
                    f"predictor state contexts[{i}] is longer than max_order={model.max_order}"
                )
            if context in model._counts:
                raise ValueError(f"predictor state contexts[{i}] repeats context {list(context)}")
            table = _serial.count_table(entry[1], f"contexts[{i}][1]")
            unknown = [name for name in table if name not in model._known]
            if unknown:
                raise ValueError(f"predictor state contexts[{i}] counts unknown nodes {unknown}")
            model._counts[context] = table
        return model

    def __repr__(self) -> str:
        return (
            f"MarkovPredictor(max_order={self.max_order}, half_life={self.half_life}, "
            f"backoff={self.backoff}, observations={self._observations})"
        )


def default_predictor() -> MarkovPredictor:
    """The predictor a workflow session uses when none is given."""
    return MarkovPredictor()
