"""The default learned predictor: a variable-order Markov model with decay, optionally mixed
with experts that see more of the run than its last few nodes.

**Markov expert.** For a path ``(..., a, b, c)`` the model keeps counts of what followed each
recent context ``()``, ``(c,)``, ``(b, c)``, ``(a, b, c)`` up to ``max_order`` nodes. Paths are
padded on the left with :data:`START`, so ``(START, a)`` means "``a`` was the first step", which
lets the model learn how runs begin apart from how they continue.

A prediction blends the contexts from short to long, PPM-C / Witten-Bell style: starting from a
uniform prior over the support (the declared successors when given), each context with counts
``c(x)`` replaces the estimate ``P`` by ``(c(x) + e * P(x)) / (sum(c) + e)``, where the escape
mass ``e = backoff * (number of distinct successors seen)``. A context seen often with few
distinct successors is trusted; a fresh or diverse context defers to the shorter ones. The
counts are restricted to the support before blending, so the result is exactly a distribution
over the candidates.

**Feature experts** (``features``, see :mod:`agentwarm.predictors._features`): ``run`` (how many
times in a row the current node has run), ``count`` (how many times it has run in this run) and
``visited`` (which nodes the run has visited). Each continues the Markov expert's ``()``,
``(c,)`` blend with one more context, ``(c, feature value)``, in the same escape framework.
**Recent expert** (``recent_half_life``): a second Markov expert whose counts forget fast, for
workloads whose behaviour clusters or drifts in time.

**Mixture.** With more than one expert the prediction is ``sum_e w_e * P_e``. The weights are a
Bayesian mixture learned online (each observation multiplies ``w_e`` by ``P_e(actual next)``,
i.e. by the expert's likelihood, over the nodes seen so far) with fixed share: after each update
a fraction ``share`` of the weight is spread evenly, so an expert that was poor for a while can
take over again. The mixture loses at most about ``log(number of experts)`` nats in total to the
best single expert, so extra experts cost little where they do not help.

Drift: every time a context is observed, its counts are first multiplied by
``0.5 ** (1 / half_life)``, so evidence in that context loses half its weight after
``half_life`` further observations of it. After a change of behaviour, a context that had
saturated (seen many half-lives) switches its most likely successor within ``half_life``
observations. Counts that decay below ``min_count`` are dropped.

``state`` is accepted for the protocol and ignored: the model conditions on the path only.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from agentwarm.predictors import _features, _merge, _serial
from agentwarm.predictors.base import START, rank, support

__all__ = ("DEFAULT_FEATURES", "DEFAULT_RECENT_HALF_LIFE", "MarkovPredictor", "default_predictor")

Context = tuple[str, ...]
Table = dict[str, float]
#: How a table enters the Witten-Bell blend over some support: ``(sum(c) + e, keep)`` with
#: ``c`` its counts of the support's names, ``e = backoff * sum(min(c, 1))`` their escape mass
#: and ``keep = e / (sum(c) + e)``; ``None`` if it counts none of them. Along an expert's chain
#: of tables, each step ``P <- (c + e * P) / (sum(c) + e)`` scales what came before by
#: ``keep``; unrolled, ``P(x) = a * uniform + sum_j coef_j * c_j(x)`` with ``a`` the product
#: of all ``keep`` and ``coef_j = 1 / (sum(c_j) + e_j)`` times the ``keep`` of the more
#: specific tables.
Blend = tuple[float, float] | None

#: Feature experts of :func:`default_predictor`.
DEFAULT_FEATURES: tuple[str, ...] = ("run", "count", "visited")
#: Half-life of the recent expert of :func:`default_predictor`, in observations of a context.
DEFAULT_RECENT_HALF_LIFE = 10.0
#: Most paths predicted since the last observe whose :class:`_Step` is kept.
_MAX_STEPS = 64


@dataclass(slots=True)
class _Step:
    """What predicting for one path reads from the counts, in the form the estimates use.

    Valid while the counts do not change: :meth:`MarkovPredictor.observe` drops every step it
    kept (and a model made by ``merged`` / ``from_dict`` starts with none)."""

    #: :meth:`MarkovPredictor.contexts` of the path.
    contexts: list[Context]
    #: The path's key of each feature, in :attr:`MarkovPredictor.features` order.
    keys: list[_features.FeatureKey | None]
    #: The distinct non-empty tables of the path's contexts, in the order they mix in.
    tables: list[Table]
    #: Each expert's tables (indexes into ``tables``), most specific first.
    chains: list[list[int]]
    #: The blend of each table over every node seen so far, once made.
    blends: list[Blend] | None = None


class MarkovPredictor:
    """Variable-order Markov predictor with Witten-Bell blending, a uniform prior, decay and
    optional feature / recent experts mixed by online Bayesian weights.

    ``MarkovPredictor()`` is the plain Markov model (one expert); :func:`default_predictor`
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
        self._steps: dict[tuple[str, ...], _Step] = {}

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
        blends = self._all_blends(step) if candidates is None else self._blends(step, mixed)
        # P(x) = sum over experts e of w_e * (a_e / len(names) + sum_j coef_ej * c_j(x)): add up
        # each table's coefficients over the experts, then its counts once.
        coefs = [0.0] * len(step.tables)
        uniform = 0.0
        for w, chain in zip(self._weights, step.chains, strict=True):
            a = 1.0
            for i in chain:
                blend = blends[i]
                if blend is not None:
                    total, keep = blend
                    coefs[i] += w * (a / total)
                    a *= keep
            uniform += w * a
        for table, coef in zip(step.tables, coefs, strict=True):
            if not coef:
                continue
            # Scan the smaller of the two: each name still adds the tables in the same order.
            if len(table) <= len(mixed):
                for name, c in table.items():
                    if name in mixed:
                        mixed[name] += coef * c
            else:
                for name in mixed:
                    count = table.get(name)
                    if count is not None:
                        mixed[name] += coef * count
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
            self._update_weights(step, next_node)
        self._count(self._counts, step.contexts, next_node, self._decay)
        if self.recent_half_life is not None:
            self._count(self._recent, step.contexts, next_node, self._recent_decay)
        for feature, feature_key in zip(self.features, step.keys, strict=True):
            if feature_key is not None:
                self._count(self._feature_counts[feature], (feature_key,), next_node, self._decay)
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

    # --- estimation -------------------------------------------------------------------------

    def _step(self, path: Sequence[str]) -> _Step:
        """:meth:`_prepare` of ``path``, kept for the :meth:`observe` that follows."""
        key = tuple(path)
        step = self._steps.get(key)
        if step is None:
            if len(self._steps) >= _MAX_STEPS:
                self._steps.clear()
            step = self._steps[key] = self._prepare(key)
        return step

    def _prepare(self, path: tuple[str, ...]) -> _Step:
        """The contexts, feature keys and tables of ``path`` under the current counts.

        The experts' chains of tables, most specific first, skipping contexts never seen:
        Markov ``(a, b, c), (b, c), (c,), ()``; recent the same in its own tables; each
        feature its ``(c, value)`` then Markov's ``(c,), ()``, shared.
        """
        contexts = self.contexts(path)
        keys = _features.keys(self.features, path)
        tables: list[Table] = []
        shared: list[int] = []  # the tables of () and (c,)
        for order in range(len(contexts) - 1, -1, -1):
            table = self._counts.get(contexts[order])
            if table:  # not a context never seen (or emptied)
                if order < 2:
                    shared.append(len(tables))
                tables.append(table)
        chains = [list(range(len(tables)))]
        if self.recent_half_life is not None:
            start = len(tables)
            tables += [table for table in map(self._recent.get, reversed(contexts)) if table]
            chains.append(list(range(start, len(tables))))
        for feature, key in zip(self.features, keys, strict=True):
            table = None if key is None else self._feature_counts[feature].get(key)
            if table:
                chains.append([len(tables), *shared])
                tables.append(table)
            else:
                chains.append(shared)
        return _Step(contexts, keys, tables, chains)

    def _all_blends(self, step: _Step) -> list[Blend]:
        """The blends of ``step``'s tables over every node seen so far: all their counts, as
        every name in a table is in :attr:`_known` (:meth:`observe`, :meth:`merged` and
        :meth:`from_dict` keep that)."""
        if step.blends is None:
            backoff = self.backoff
            blends: list[Blend] = []
            for table in step.tables:
                total = escape = 0.0
                for c in table.values():
                    total += c
                    escape += c if c < 1.0 else 1.0
                if total > 0.0:
                    escape = backoff * escape
                    blends.append((total + escape, escape / (total + escape)))
                else:
                    blends.append(None)
            step.blends = blends
        return step.blends

    def _blends(self, step: _Step, allowed: Mapping[str, Any]) -> list[Blend]:
        """The blends of ``step``'s tables over the names in ``allowed``: those of
        :meth:`_all_blends` for a table whose names are all allowed, else summed again."""
        backoff = self.backoff
        keys = allowed.keys()
        blends: list[Blend] = []
        for table, every in zip(step.tables, self._all_blends(step), strict=True):
            if table.keys() <= keys:
                blends.append(every)
                continue
            total = escape = 0.0
            for name, c in table.items():
                if name in allowed:
                    total += c
                    escape += c if c < 1.0 else 1.0
            if total > 0.0:
                escape = backoff * escape
                blends.append((total + escape, escape / (total + escape)))
            else:
                blends.append(None)
        return blends

    def _update_weights(self, step: _Step, next_node: str) -> None:
        """Multiply each expert's weight by its probability of ``next_node`` over the nodes
        seen so far (and ``next_node``), then share."""
        n = len(self._known) + (next_node not in self._known)
        blends = self._all_blends(step)
        counts = [table.get(next_node, 0.0) for table in step.tables]
        likelihoods = []
        for chain in step.chains:
            a = 1.0
            terms = []
            for i in chain:
                blend = blends[i]
                if blend is not None:
                    total, keep = blend
                    if counts[i]:  # a zero term leaves the sum (and its rounding) as it is
                        terms.append(a / total * counts[i])
                    a *= keep
            likelihoods.append(a / n + sum(terms))
        posterior = [w * p for w, p in zip(self._weights, likelihoods, strict=True)]
        total = sum(posterior)
        k = len(posterior)
        if total > 0.0:
            self._weights = [(1 - self.share) * p / total + self.share / k for p in posterior]

    def _count(
        self, tables: dict[Any, Table], contexts: Iterable[Any], next_node: str, decay: float
    ) -> None:
        """Count ``next_node`` after each of ``contexts``, decaying its counts first (those
        below :attr:`min_count` go); the context moves to the end of ``tables`` (most recently
        observed last) and the least recently observed one goes past :attr:`max_contexts`."""
        floor = self.min_count
        bound = self.max_contexts
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
            if bound is not None and len(tables) > bound:
                del tables[next(iter(tables))]

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
            "contexts": _entries(self._counts),
            "recent_contexts": _entries(self._recent),
            "feature_contexts": {
                feature: _entries(tables) for feature, tables in self._feature_counts.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` names the first bad field.

        Data without the expert fields (``features``, ``recent_half_life``, ``share``,
        ``max_contexts``, ``weights``, ``recent_contexts``, ``feature_contexts``), as written
        before they existed, is a plain Markov model without a context bound.
        """
        state = _serial.parse(_serial.MarkovState, data)
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
            model._weights = _weights(state.weights, len(model.experts))
        model._counts = model._tables(state.contexts, "contexts", model.max_order)
        model._recent = model._tables(state.recent_contexts, "recent_contexts", None)
        if model._recent and model.recent_half_life is None:
            raise ValueError("predictor state has recent_contexts but no recent_half_life")
        if set(state.feature_contexts) - set(model.features):
            raise ValueError(
                "predictor state field 'feature_contexts' must be an object keyed by features "
                f"{list(model.features)}"
            )
        for feature, entries in state.feature_contexts.items():
            model._feature_counts[feature] = model._tables(
                entries, f"feature_contexts[{feature!r}]", None, feature=feature
            )
        return model

    def _tables(
        self,
        entries: Sequence[tuple[list[Any], Table]],
        field: str,
        max_len: int | None,
        feature: str | None = None,
    ) -> dict[Any, Table]:
        """Count tables by context from validated entries; checks what the schema cannot:
        the context bound and length, repeats, feature keys, counts of unknown nodes."""
        if self.max_contexts is not None and len(entries) > self.max_contexts:
            raise ValueError(
                f"predictor state field {field!r} has {len(entries)} contexts, "
                f"more than max_contexts={self.max_contexts}"
            )
        tables: dict[Any, Table] = {}
        for i, (names, table) in enumerate(entries):
            where = f"{field}[{i}]"
            if feature is None:
                context: Any = tuple(names)
            else:
                context = _features.decode(feature, names, f"{where}[0]")
            if max_len is not None and len(context) > max_len:
                raise ValueError(f"predictor state {where} is longer than max_order={max_len}")
            if context in tables:
                raise ValueError(f"predictor state {where} repeats context {list(context)}")
            unknown = [name for name in table if name not in self._known]
            if unknown:
                raise ValueError(f"predictor state {where} counts unknown nodes {unknown}")
            tables[context] = dict(table)
        return tables

    def __repr__(self) -> str:
        return (
            f"MarkovPredictor(max_order={self.max_order}, half_life={self.half_life}, "
            f"backoff={self.backoff}, features={list(self.features)}, "
            f"recent_half_life={self.recent_half_life}, observations={self._observations})"
        )


def _entries(tables: Mapping[Any, Table]) -> list[list[Any]]:
    return [[list(context), dict(table)] for context, table in tables.items()]


def _weights(value: Sequence[float], k: int) -> list[float]:
    if len(value) != k or abs(sum(value) - 1.0) > 1e-6:
        raise ValueError(
            f"predictor state field 'weights' must be {k} numbers in [0, 1] summing to 1, "
            f"got {list(value)!r}"
        )
    return list(value)


def default_predictor() -> MarkovPredictor:
    """The predictor a workflow session uses when none is given: the order-3 Markov model
    mixed with the recent expert and the ``run``, ``count`` and ``visited`` feature experts."""
    return MarkovPredictor(features=DEFAULT_FEATURES, recent_half_life=DEFAULT_RECENT_HALF_LIFE)
