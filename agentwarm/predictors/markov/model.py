"""The :class:`MarkovPredictor` class: configuration, the experts' count tables and mixture
weights it owns, predict / observe, merge on save and persistence (see the package docstring
for the model; :mod:`.experts` and :mod:`.mixture` for the arithmetic)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Self

from agentwarm.predictors import _features, _merge, _serial
from agentwarm.predictors.base import START, rank, support
from agentwarm.predictors.markov import experts, mixture
from agentwarm.predictors.markov.experts import Context, Table

__all__ = ("DEFAULT_FEATURES", "DEFAULT_RECENT_HALF_LIFE", "MarkovPredictor", "path_predictor")

#: Feature experts of :func:`path_predictor`.
DEFAULT_FEATURES: tuple[str, ...] = ("run", "count", "visited")
#: Half-life of the recent expert of :func:`path_predictor`, in observations of a context.
DEFAULT_RECENT_HALF_LIFE = 10.0
#: Most paths predicted since the last observe whose :class:`~.mixture.Step` is kept.
MAX_PREPARED_PATHS = 64


class MarkovPredictor:
    """Variable-order Markov predictor with Witten-Bell blending, a uniform prior, decay and
    optional feature / recent experts mixed by online Bayesian weights.

    ``MarkovPredictor()`` is the plain Markov model (one expert); :func:`path_predictor`
    adds the experts.

    Args:
        max_order: longest context, in nodes (``START`` counts as one), of the Markov and recent
            experts. 0 gives plain successor frequencies; 1 is a first-order model with a
            unigram fallback.
        half_life: observations of a context after which its older counts weigh half;
            ``None`` never forgets.
        backoff: escape weight per distinct successor; larger trusts long contexts less.
        min_count: decayed counts below this are dropped.
        features: feature experts to add, among :data:`~agentwarm.predictors._features.FEATURES`
            (``"run"``, ``"count"``, ``"visited"``), each at most once.
        recent_half_life: half-life of the recent expert's counts; ``None`` for no recent expert.
        share: fraction of the mixture weight spread evenly after each update, in ``[0, 1)``.
        max_contexts: most contexts each expert keeps; past it, the context observed least
            recently is dropped (bounds memory and the saved file). ``None`` for no bound.
    """

    kind: ClassVar[str] = "markov"

    def __init__(
        self,
        max_order: int = 3,
        *,
        half_life: float | None = 200.0,
        backoff: float = 2.0,
        min_count: float = 1e-3,
        features: Iterable[str] = (),
        recent_half_life: float | None = None,
        share: float = 0.01,
        max_contexts: int | None = 4096,
    ) -> None:
        if isinstance(max_order, bool) or not isinstance(max_order, int) or max_order < 0:
            raise ValueError(f"max_order must be an integer >= 0, got {max_order!r}")
        if half_life is not None and not half_life > 0:
            raise ValueError(f"half_life must be > 0 or None, got {half_life!r}")
        if not backoff > 0:
            raise ValueError(f"backoff must be > 0, got {backoff!r}")
        if not 0 <= min_count < 1:
            raise ValueError(f"min_count must be in [0, 1), got {min_count!r}")
        feats = tuple(features) if not isinstance(features, str) else (features,)
        bad = [f for f in feats if f not in _features.FEATURES]
        if bad or len(set(feats)) != len(feats):
            raise ValueError(
                f"features must be distinct names among {list(_features.FEATURES)}, got {feats}"
            )
        if recent_half_life is not None and not recent_half_life > 0:
            raise ValueError(f"recent_half_life must be > 0 or None, got {recent_half_life!r}")
        if not 0 <= share < 1:
            raise ValueError(f"share must be in [0, 1), got {share!r}")
        if max_contexts is not None and (
            isinstance(max_contexts, bool) or not isinstance(max_contexts, int) or max_contexts < 1
        ):
            raise ValueError(f"max_contexts must be an integer >= 1 or None, got {max_contexts!r}")
        self.max_order = max_order
        self.half_life = None if half_life is None else float(half_life)
        self.backoff = float(backoff)
        self.min_count = float(min_count)
        self.features = feats
        self.recent_half_life = None if recent_half_life is None else float(recent_half_life)
        self.share = float(share)
        self.max_contexts = max_contexts
        self._decay = 1.0 if half_life is None else 0.5 ** (1.0 / half_life)
        self._recent_decay = 1.0 if recent_half_life is None else 0.5 ** (1.0 / recent_half_life)
        self._counts: dict[Context, Table] = {}
        self._recent: dict[Context, Table] = {}
        self._feature_counts: dict[str, dict[_features.FeatureKey, Table]] = {f: {} for f in feats}
        self._known: dict[str, None] = {}
        self._observations = 0
        self._weights = [1.0 / len(self.experts)] * len(self.experts)
        # What predict found for a path, reused by the observe of the same path that follows;
        # emptied by every observe, so it never outlives the counts it was read from.
        self._steps: dict[tuple[str, ...], mixture.Step] = {}

    @property
    def experts(self) -> tuple[str, ...]:
        """Names of the mixed experts: ``"markov"``, then ``"recent"`` if on, then features."""
        recent = ("recent",) if self.recent_half_life is not None else ()
        return ("markov", *recent, *self.features)

    @property
    def weights(self) -> dict[str, float]:
        """Current mixture weight of each expert (they sum to 1)."""
        return dict(zip(self.experts, self._weights, strict=True))

    @property
    def observations(self) -> int:
        """Number of transitions observed so far."""
        return self._observations

    @property
    def num_contexts(self) -> int:
        """Number of distinct contexts with counts, over all experts."""
        features = sum(len(tables) for tables in self._feature_counts.values())
        return len(self._counts) + len(self._recent) + features

    @property
    def prepared_paths(self) -> int:
        """How many paths predicted since the last :meth:`observe` keep the work of their
        prediction for the observe that follows (at most :data:`MAX_PREPARED_PATHS`)."""
        return len(self._steps)

    def counts(self, context: Sequence[str]) -> dict[str, float]:
        """A copy of the Markov expert's (decayed) successor counts of ``context``."""
        return dict(self._counts.get(tuple(context), {}))

    def contexts(self, path: Sequence[str]) -> list[Context]:
        """The Markov contexts of ``path`` from order 0 to the longest available, shortest
        first."""
        tail = (START, *path[-self.max_order :]) if self.max_order else ()
        end = len(tail) - min(self.max_order, len(path) + 1)
        return [tail[start:] for start in range(len(tail), end - 1, -1)]

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """Next-node distribution over ``candidates`` (else over observed successors)."""
        names = support(candidates, self._known)
        if len(names) <= 1:  # nothing to rank: a lone name is certain, whatever the counts
            return [(name, 1.0) for name in names]
        step = self._step(path)
        mixed = dict.fromkeys(names, 0.0)
        if candidates is None:
            blends = mixture.all_blends(step, self.backoff)
        else:
            blends = mixture.blends(step, mixed, self.backoff)
        uniform = mixture.mix(step, self._weights, blends, mixed)
        uniform /= len(names)
        return rank(names, [p + uniform for p in mixed.values()])

    def observe(self, path: Sequence[str], next_node: str) -> None:
        """Learn ``path -> next_node``: update the mixture weights by each expert's probability
        of ``next_node`` over the nodes seen so far, then count ``next_node`` after every context
        of ``path``, decaying those contexts first."""
        key = tuple(path)
        step = self._steps.get(key)
        if step is None:
            step = self._prepare(key)
        self._steps.clear()  # the counts change below: every prepared step is out of date
        if len(self._weights) > 1:
            n = len(self._known) + (next_node not in self._known)
            self._weights = mixture.posterior(
                step, self._weights, next_node, n, self.backoff, self.share
            )
        floor, bound = self.min_count, self.max_contexts
        experts.count(self._counts, step.contexts, next_node, self._decay, floor, bound)
        if self.recent_half_life is not None:
            experts.count(self._recent, step.contexts, next_node, self._recent_decay, floor, bound)
        for feature, feature_key in zip(self.features, step.keys, strict=True):
            if feature_key is not None:
                tables = self._feature_counts[feature]
                experts.count(tables, (feature_key,), next_node, self._decay, floor, bound)
        self._known.setdefault(next_node, None)
        self._observations += 1

    def merged(self, latest: Self, base: Self | None) -> Self:
        """``latest`` (what other processes saved meanwhile) plus what this model learned since
        ``base`` (the state it was loaded from or last saved as; ``None``: since it was made).

        Used by :class:`~agentwarm.predictors.store.PredictorStore` to merge on save. The
        counts of every expert and ``observations`` add their deltas (exact without decay,
        first-order with it: see :mod:`agentwarm.predictors._merge`); the known successors are
        the union; the mixture weights are this model's: last writer wins, since a posterior
        has no delta to add.

        Raises:
            ValueError: ``latest`` or ``base`` has another configuration.
        """
        for other in (latest, base):
            if other is not None and other._config() != self._config():
                raise ValueError(f"cannot merge {self!r} with {other!r}: another configuration")
        before = base if base is not None else self._blank()
        out = self._blank()
        out._observations = latest._observations + max(0, self._observations - before._observations)
        out._known = dict.fromkeys([*latest._known, *self._known])
        out._weights = list(self._weights)
        merge = functools.partial(
            _merge.tables, min_count=self.min_count, max_contexts=self.max_contexts
        )
        out._counts = merge(latest._counts, self._counts, before._counts)
        out._recent = merge(latest._recent, self._recent, before._recent)
        out._feature_counts = {
            f: merge(latest._feature_counts[f], self._feature_counts[f], before._feature_counts[f])
            for f in self.features
        }
        return out

    def _config(self) -> dict[str, Any]:
        """The constructor arguments of this model."""
        return {
            "max_order": self.max_order,
            "half_life": self.half_life,
            "backoff": self.backoff,
            "min_count": self.min_count,
            "features": self.features,
            "recent_half_life": self.recent_half_life,
            "share": self.share,
            "max_contexts": self.max_contexts,
        }

    def _blank(self) -> Self:
        """A model with this configuration and nothing learned."""
        return type(self)(**self._config())

    def first_order_view(self) -> MarkovPredictor:
        """A plain order-1 model with this model's order-0 and order-1 Markov counts: the
        marginal ``P(next | current node)`` over all the paths that reached the node."""
        view = MarkovPredictor(
            min(1, self.max_order),
            half_life=self.half_life,
            backoff=self.backoff,
            min_count=self.min_count,
            max_contexts=self.max_contexts,
        )
        view._counts = {c: dict(t) for c, t in self._counts.items() if len(c) <= view.max_order}
        view._known = dict(self._known)
        view._observations = self._observations
        return view

    def _step(self, path: Sequence[str]) -> mixture.Step:
        """:meth:`_prepare` of ``path``, kept for the :meth:`observe` that follows."""
        key = tuple(path)
        step = self._steps.get(key)
        if step is None:
            if len(self._steps) >= MAX_PREPARED_PATHS:
                self._steps.clear()
            step = self._steps[key] = self._prepare(key)
        return step

    def _prepare(self, path: tuple[str, ...]) -> mixture.Step:
        """The contexts, feature keys and tables of ``path`` under the current counts."""
        return mixture.prepare(
            self.contexts(path),
            _features.keys(self.features, path),
            self._counts,
            self._recent if self.recent_half_life is not None else None,
            self._feature_counts,
            self.features,
        )

    # --- persistence ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Configuration, counts and mixture weights as JSON-serializable data (``kind``
        ``"markov"``)."""
        return {
            "kind": self.kind,
            **self._config(),
            "features": list(self.features),
            "observations": self._observations,
            "known": list(self._known),
            "weights": list(self._weights),
            "contexts": experts.entries(self._counts),
            "recent_contexts": experts.entries(self._recent),
            "feature_contexts": {
                feature: experts.entries(tables) for feature, tables in self._feature_counts.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` names the first bad field (the
        data is validated whole by :class:`~agentwarm.predictors._serial.MarkovState`).

        Data without the expert fields (``features``, ``recent_half_life``, ``share``,
        ``max_contexts``, ``weights``, ``recent_contexts``, ``feature_contexts``), as written
        before they existed, is a plain Markov model without a context bound.
        """
        return cls.from_state(_serial.parse(_serial.MarkovState, data))

    @classmethod
    def from_state(cls, state: _serial.MarkovState) -> Self:
        """Rebuild from validated state (:meth:`from_dict` validates it first)."""
        model = cls(
            state.max_order,
            half_life=state.half_life,
            backoff=state.backoff,
            min_count=state.min_count,
            features=state.features,
            recent_half_life=state.recent_half_life,
            share=state.share,
            max_contexts=state.max_contexts,
        )
        model._observations = state.observations
        model._known = dict.fromkeys(state.known)
        if state.weights is not None:
            model._weights = list(state.weights)
        model._counts = experts.from_entries(state.contexts)
        model._recent = experts.from_entries(state.recent_contexts)
        for feature, items in state.feature_contexts.items():
            model._feature_counts[feature] = experts.from_entries(items)
        return model

    def __repr__(self) -> str:
        return (
            f"MarkovPredictor(max_order={self.max_order}, half_life={self.half_life}, "
            f"backoff={self.backoff}, features={list(self.features)}, "
            f"recent_half_life={self.recent_half_life}, observations={self._observations})"
        )


def path_predictor() -> MarkovPredictor:
    """The path experts: the order-3 Markov model mixed with the recent expert and the
    ``run``, ``count`` and ``visited`` feature experts. The default predictor
    (:func:`agentwarm.predictors.default_predictor`) stacks them with the conversation."""
    return MarkovPredictor(features=DEFAULT_FEATURES, recent_half_life=DEFAULT_RECENT_HALF_LIFE)
