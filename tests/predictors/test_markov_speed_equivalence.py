"""The default predictor's faster estimation predicts and learns exactly as the implementation
it replaced; its memory stays bounded.

``Reference`` keeps the pre-change ``predict`` / ``observe`` of :class:`MarkovPredictor`
(commit b83186d) verbatim, helpers prefixed ``_ref_``, with the feature keys of that
commit's ``_features``; it writes its learned state as ``MarkovPredictor.to_dict`` does, so
``to_dict`` compares the learned state."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentwarm.predictors import END, START, MarkovPredictor, path_predictor
from agentwarm.predictors.base import rank, support
from agentwarm.predictors.markov import DEFAULT_FEATURES, DEFAULT_RECENT_HALF_LIFE
from agentwarm.predictors.markov.model import MAX_PREPARED_PATHS

Context = tuple[str, ...]
Table = dict[str, float]
Estimate = tuple[float, list[tuple[Table, float]]]

# --- the pre-change implementation --------------------------------------------------------

CAP = 8


def _run(path: Sequence[str]) -> tuple[Any, ...]:
    current = path[-1]
    r = 0
    for name in reversed(path):
        if name != current or r == CAP:
            break
        r += 1
    return (current, r)


def _count(path: Sequence[str]) -> tuple[Any, ...]:
    return (path[-1], min(CAP, path.count(path[-1])))


def _visited(path: Sequence[str]) -> tuple[Any, ...]:
    return (path[-1], *sorted(set(path)))


_KEYS: dict[str, Callable[[Sequence[str]], tuple[Any, ...]]] = {
    "run": _run,
    "count": _count,
    "visited": _visited,
}


def _ref_key(feature: str, path: Sequence[str]) -> tuple[Any, ...] | None:
    return _KEYS[feature](path) if path else None


class Reference:
    """:class:`MarkovPredictor` as it was before: the same configuration and learned state,
    the estimation and counting it had then, and its ``to_dict`` to compare the state."""

    def __init__(
        self,
        max_order: int = 3,
        *,
        half_life: float | None = 200.0,
        backoff: float = 2.0,
        min_count: float = 1e-3,
        features: Sequence[str] = (),
        recent_half_life: float | None = None,
        share: float = 0.01,
        max_contexts: int | None = 4096,
    ) -> None:
        self.max_order = max_order
        self.half_life = None if half_life is None else float(half_life)
        self.backoff = float(backoff)
        self.min_count = float(min_count)
        self.features = tuple(features)
        self.recent_half_life = None if recent_half_life is None else float(recent_half_life)
        self.share = float(share)
        self.max_contexts = max_contexts
        self._decay = 1.0 if half_life is None else 0.5 ** (1.0 / half_life)
        self._recent_decay = 1.0 if recent_half_life is None else 0.5 ** (1.0 / recent_half_life)
        self._counts: dict[Context, Table] = {}
        self._recent: dict[Context, Table] = {}
        self._feature_counts: dict[str, dict[Any, Table]] = {f: {} for f in self.features}
        self._known: dict[str, None] = {}
        self._observations = 0
        experts = 1 + (recent_half_life is not None) + len(self.features)
        self._weights = [1.0 / experts] * experts

    def to_dict(self) -> dict[str, Any]:
        def entries(tables: Mapping[Any, Table]) -> list[list[Any]]:
            return [[list(context), dict(table)] for context, table in tables.items()]

        return {
            "kind": "markov",
            "max_order": self.max_order,
            "half_life": self.half_life,
            "backoff": self.backoff,
            "min_count": self.min_count,
            "features": list(self.features),
            "recent_half_life": self.recent_half_life,
            "share": self.share,
            "max_contexts": self.max_contexts,
            "observations": self._observations,
            "known": list(self._known),
            "weights": list(self._weights),
            "contexts": entries(self._counts),
            "recent_contexts": entries(self._recent),
            "feature_contexts": {f: entries(t) for f, t in self._feature_counts.items()},
        }

    def _ref_contexts(self, path: Sequence[str]) -> list[Context]:
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
        names = support(candidates, self._known)
        if not names:
            return []
        mixed = dict.fromkeys(names, 0.0)
        uniform = 0.0
        terms: dict[int, tuple[Table, float]] = {}
        for w, (a, chain) in zip(self._weights, self._ref_estimates(path, mixed), strict=True):
            uniform += w * a
            for table, coef in chain:
                _, before = terms.get(id(table), (table, 0.0))
                terms[id(table)] = (table, before + w * coef)
        for table, coef in terms.values():
            for name, c in table.items():
                if name in mixed:
                    mixed[name] += coef * c
        uniform /= len(names)
        return rank(names, [p + uniform for p in mixed.values()])

    def observe(self, path: Sequence[str], next_node: str) -> None:
        if len(self._weights) > 1:
            self._ref_update_weights(path, next_node)
        contexts = self._ref_contexts(path)
        for context in contexts:
            self._ref_count(self._ref_touch(self._counts, context), next_node, self._decay)
        if self.recent_half_life is not None:
            for context in contexts:
                self._ref_count(
                    self._ref_touch(self._recent, context), next_node, self._recent_decay
                )
        for feature in self.features:
            key = _ref_key(feature, path)
            if key is not None:
                table = self._ref_touch(self._feature_counts[feature], key)
                self._ref_count(table, next_node, self._decay)
        self._known.setdefault(next_node, None)
        self._observations += 1

    def _ref_estimates(self, path: Sequence[str], allowed: Mapping[str, Any]) -> list[Estimate]:
        contexts = self._ref_contexts(path)
        slow = [self._counts.get(context) for context in contexts]
        base = slow[:2]
        chains = [slow]
        if self.recent_half_life is not None:
            chains.append([self._recent.get(context) for context in contexts])
        for feature in self.features:
            key = _ref_key(feature, path)
            chains.append([*base, None if key is None else self._feature_counts[feature].get(key)])
        stats: dict[int, tuple[float, float]] = {}
        return [self._ref_chain(chain, allowed, stats) for chain in chains]

    def _ref_chain(
        self,
        tables: Sequence[Table | None],
        allowed: Mapping[str, Any],
        stats: dict[int, tuple[float, float]],
    ) -> Estimate:
        a = 1.0
        chain: list[tuple[Table, float]] = []
        for table in reversed(tables):
            if not table:
                continue
            known = stats.get(id(table))
            if known is None:
                total = escape = 0.0
                for name, c in table.items():
                    if name in allowed:
                        total += c
                        escape += c if c < 1.0 else 1.0
                known = stats[id(table)] = (total, self.backoff * escape)
            total, escape = known
            if total <= 0.0:
                continue
            chain.append((table, a / (total + escape)))
            a *= escape / (total + escape)
        return a, chain

    def _ref_update_weights(self, path: Sequence[str], next_node: str) -> None:
        allowed = dict.fromkeys([*self._known, next_node])
        n = len(allowed)
        likelihoods = [
            a / n + sum(coef * table.get(next_node, 0.0) for table, coef in chain)
            for a, chain in self._ref_estimates(path, allowed)
        ]
        posterior = [w * p for w, p in zip(self._weights, likelihoods, strict=True)]
        total = sum(posterior)
        k = len(posterior)
        if total > 0.0:
            self._weights = [(1 - self.share) * p / total + self.share / k for p in posterior]

    def _ref_touch(self, tables: dict[Any, Table], context: Any) -> Table:
        table = tables.pop(context, None)
        tables[context] = table = {} if table is None else table
        if self.max_contexts is not None and len(tables) > self.max_contexts:
            del tables[next(iter(tables))]
        return table

    def _ref_count(self, table: Table, next_node: str, decay: float) -> None:
        if decay < 1.0:
            for name in list(table):
                value = table[name] * decay
                if value < self.min_count:
                    del table[name]
                else:
                    table[name] = value
        table[next_node] = table.get(next_node, 0.0) + 1.0


# --- equivalence --------------------------------------------------------------------------


def assert_same_prediction(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [name for name, _ in got] == [name for name, _ in want]
    for (_, p), (_, q) in zip(got, want, strict=True):
        assert abs(p - q) <= 1e-12


NAMES = ["a", "b", "c", "d", "e", END]
paths = st.lists(st.sampled_from(NAMES[:-1]), max_size=10)
candidate_lists = st.one_of(st.none(), st.lists(st.sampled_from(NAMES), min_size=1, max_size=6))
#: One step: predict for the path (unless ``None`` candidates are skipped), then observe it.
steps = st.tuples(paths, st.booleans(), candidate_lists, st.sampled_from(NAMES))


@settings(max_examples=150, deadline=None)
@given(
    runs=st.lists(st.lists(steps, max_size=8), max_size=6),
    max_order=st.integers(0, 4),
    half_life=st.one_of(st.none(), st.floats(0.5, 50.0)),
    recent=st.one_of(st.none(), st.floats(0.5, 50.0)),
    features=st.lists(st.sampled_from(DEFAULT_FEATURES), unique=True),
    max_contexts=st.one_of(st.none(), st.integers(1, 6)),
    min_count=st.sampled_from([0.0, 1e-3, 0.3]),
    interleave=st.booleans(),
)
def test_predictions_and_learned_state_equal_the_reference(
    runs: list[list[tuple[list[str], bool, list[str] | None, str]]],
    max_order: int,
    half_life: float | None,
    recent: float | None,
    features: list[str],
    max_contexts: int | None,
    min_count: float,
    interleave: bool,
) -> None:
    config: dict[str, Any] = {
        "half_life": half_life,
        "features": features,
        "recent_half_life": recent,
        "max_contexts": max_contexts,
        "min_count": min_count,
    }
    model = MarkovPredictor(max_order, **config)
    ref = Reference(max_order, **config)
    # Each step predicted then observed; or, interleaved, every step of a run predicted before
    # any is observed (as concurrent runs do).
    batches = runs if interleave else [[step] for run in runs for step in run]
    for batch in batches:
        for path, as_tuple, candidates, _ in batch:
            given_path = tuple(path) if as_tuple else path
            assert_same_prediction(
                model.predict(given_path, candidates=candidates),
                ref.predict(path, candidates=candidates),
            )
        for path, as_tuple, candidates, nxt in batch:
            model.observe(tuple(path) if as_tuple else path, nxt)
            ref.observe(path, nxt)
            assert model.to_dict() == ref.to_dict()
            assert_same_prediction(
                model.predict(path, candidates=candidates), ref.predict(path, candidates=candidates)
            )
    copy = MarkovPredictor.from_dict(json.loads(json.dumps(model.to_dict())))
    for path, _, candidates, _ in (step for run in runs for step in run):
        assert_same_prediction(
            copy.predict(path, candidates=candidates), ref.predict(path, candidates=candidates)
        )


def random_walks(n: int, seed: int, nodes: int, length: int) -> list[list[str]]:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(nodes)]
    return [[rng.choice(names) for _ in range(rng.randint(1, length))] for _ in range(n)]


def test_the_default_predicts_and_learns_as_the_reference_on_long_random_walks() -> None:
    model = path_predictor()
    ref = Reference(features=DEFAULT_FEATURES, recent_half_life=DEFAULT_RECENT_HALF_LIFE)
    candidates = ["n0", "n1", "n2", "n3", END]
    for walk in random_walks(60, seed=3, nodes=8, length=40):
        seq = [*walk, END]
        for i in range(1, len(seq)):
            path = tuple(seq[:i])
            for cands in (candidates, None):
                assert_same_prediction(
                    model.predict(path, candidates=cands), ref.predict(path, candidates=cands)
                )
            model.observe(path, seq[i])
            ref.observe(path, seq[i])
    assert model.to_dict() == ref.to_dict()


def test_a_lone_candidate_is_certain_as_before() -> None:
    model = path_predictor()
    ref = Reference(features=DEFAULT_FEATURES, recent_half_life=DEFAULT_RECENT_HALF_LIFE)
    for walk in random_walks(20, seed=5, nodes=4, length=6):
        model.observe(walk, "n1")
        ref.observe(walk, "n1")
    for candidates in (["n2"], ["n1"], [END, END]):
        got = model.predict(["n0", "n3"], candidates=candidates)
        assert got == ref.predict(["n0", "n3"], candidates=candidates)
        assert got == [(candidates[0], 1.0)]
    assert MarkovPredictor().predict(["a"], candidates=[]) == []


# --- memory -------------------------------------------------------------------------------


def test_the_default_keeps_at_most_max_contexts_per_expert() -> None:
    model = path_predictor()
    assert model.max_contexts == 4096
    for walk in random_walks(20_000, seed=7, nodes=40, length=12):
        model.observe(walk, "n0")
    state = model.to_dict()
    tables = [state["contexts"], state["recent_contexts"], *state["feature_contexts"].values()]
    assert max(len(entries) for entries in tables) == 4096  # the bound was reached
    assert all(len(entries) <= 4096 for entries in tables)
    assert model.num_contexts <= 4096 * len(model.experts)


def test_paths_predicted_without_observing_are_not_all_kept() -> None:
    model = path_predictor()
    model.observe(["a"], "b")
    for walk in random_walks(1_000, seed=1, nodes=10, length=8):
        model.predict(walk, candidates=["a", "b"])
    assert 1 <= model.prepared_paths <= MAX_PREPARED_PATHS
    model.observe(walk, "a")
    assert model.prepared_paths == 0  # what they read is out of date once the counts change


def test_unbounded_state_still_loads_and_merges() -> None:
    base = MarkovPredictor(
        features=DEFAULT_FEATURES, recent_half_life=DEFAULT_RECENT_HALF_LIFE, max_contexts=None
    )
    for walk in random_walks(50, seed=2, nodes=6, length=10):
        base.observe(walk, END)
    saved = json.loads(json.dumps(base.to_dict()))
    assert saved["max_contexts"] is None
    mine = MarkovPredictor.from_dict(saved)
    theirs = MarkovPredictor.from_dict(saved)
    mine.observe(["n1"], "n2")
    theirs.observe(["n3"], "n4")
    merged = mine.merged(theirs, MarkovPredictor.from_dict(saved))
    assert merged.max_contexts is None
    assert merged.counts(["n1"])["n2"] == mine.counts(["n1"])["n2"]
    assert merged.counts(["n3"])["n4"] == theirs.counts(["n3"])["n4"]
    assert merged.observations == base.observations + 2
