"""The predictor protocol (``agentwarm/predictors/base.py``), checked on every predictor the
package offers: each kind below draws its configurations from a Hypothesis strategy, and every
property runs on every kind. Tests of one class's own behaviour (what it learns, how fast it
forgets, what its saved state looks like) stay in that class's test file.

Through public APIs only: ``predict``, ``observe``, ``to_dict``/``from_dict``, ``merged`` and the
documented attributes a kind names in its table row.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentwarm.predictors as predictors
from agentwarm.predictors import (
    END,
    ContentPredictor,
    FirstOrderPredictor,
    MarkovPredictor,
    Mergeable,
    Predictor,
    default_predictor,
)

Factory = Callable[[], Any]
History = list[tuple[list[str], str]]


@dataclass(frozen=True)
class Kind:
    """One predictor under test: how to make it, and what it promises beyond the protocol."""

    name: str
    #: Configurations: each example draws a factory of fresh, untrained predictors.
    configs: st.SearchStrategy[Factory]
    #: One of them, for the tests that need no drawing.
    example: Factory
    #: Merging adds plain counts exactly (no decay, no mixture, no context bound): two
    #: processes' merged learning predicts exactly as one process that saw both.
    exact_merge: bool
    #: A configuration ``merged`` must refuse, given a predictor of this kind.
    other_config: Callable[[Any], Any]
    #: Bounded memory, where the class promises it: the most contexts a predictor may hold,
    #: from its documented attributes (``None``: this configuration has no bound), and how
    #: many it holds.
    bound: Callable[[Any], int | None] | None = None
    size: Callable[[Any], int] = lambda p: 0
    #: A predictor of the same configuration without the bound: it holds more contexts than
    #: the bounded one after the same observations exactly when the bound made it forget.
    unbounded: Callable[[Any], Any] | None = None


def _markov(**fixed: Any) -> st.SearchStrategy[Factory]:
    """Factories of ``MarkovPredictor`` over its options (``fixed`` ones held)."""
    options: dict[str, st.SearchStrategy[Any]] = {
        "max_order": st.integers(0, 4),
        "half_life": st.one_of(st.none(), st.floats(0.5, 300.0)),
        "backoff": st.floats(0.1, 5.0),
        "min_count": st.sampled_from([0.0, 1e-3, 0.1]),
        "features": st.lists(st.sampled_from(["run", "count", "visited"]), unique=True),
        "recent_half_life": st.one_of(st.none(), st.floats(0.5, 50.0)),
        "share": st.sampled_from([0.0, 0.01, 0.2]),
        "max_contexts": st.one_of(st.none(), st.integers(1, 8)),
    }
    options.update({key: st.just(value) for key, value in fixed.items()})

    def factory(kwargs: dict[str, Any]) -> Factory:
        return lambda: MarkovPredictor(**kwargs)

    return st.fixed_dictionaries(options).map(factory)


def _markov_bound(p: MarkovPredictor) -> int | None:
    return None if p.max_contexts is None else p.max_contexts * len(p.experts)


def _unbounded_markov(p: MarkovPredictor) -> MarkovPredictor:
    return MarkovPredictor(
        p.max_order,
        half_life=p.half_life,
        backoff=p.backoff,
        min_count=p.min_count,
        features=p.features,
        recent_half_life=p.recent_half_life,
        share=p.share,
        max_contexts=None,
    )


def _other_markov(p: MarkovPredictor) -> MarkovPredictor:
    return MarkovPredictor(p.max_order + 1, half_life=p.half_life, features=p.features)


KINDS = [
    Kind(
        "first_order",
        st.sampled_from([0.0, 0.1, 2.5]).map(lambda c: lambda: FirstOrderPredictor(pseudo_count=c)),
        FirstOrderPredictor,
        exact_merge=True,
        other_config=lambda p: FirstOrderPredictor(pseudo_count=p.pseudo_count + 1),
    ),
    Kind(
        "markov",
        _markov(),
        MarkovPredictor,
        exact_merge=False,
        other_config=_other_markov,
        bound=_markov_bound,
        size=lambda p: p.num_contexts,
        unbounded=_unbounded_markov,
    ),
    Kind(
        "markov_plain_counts",
        _markov(half_life=None, features=[], recent_half_life=None, max_contexts=None),
        lambda: MarkovPredictor(half_life=None, max_contexts=None),
        exact_merge=True,
        other_config=_other_markov,
    ),
    Kind(
        "default",
        st.just(default_predictor),
        default_predictor,
        exact_merge=False,
        other_config=lambda p: ContentPredictor(buckets=p.buckets + 1),
        bound=lambda p: _markov_bound(p.path),
        size=lambda p: p.path.num_contexts,
        unbounded=lambda p: ContentPredictor(path=_unbounded_markov(p.path)),
    ),
]

NODES = ["a", "b", "c", "d", "e"]
nodes = st.sampled_from(NODES)
successors = st.sampled_from([*NODES, END])
paths = st.lists(nodes, max_size=7)
histories = st.lists(st.tuples(paths, successors), max_size=30)
candidate_lists = st.one_of(st.none(), st.lists(successors, max_size=6))

EXAMPLES = settings(max_examples=40, deadline=None)


def mergeable(model: Any) -> bool:
    """Whether ``model``'s saves merge (:class:`Mergeable`); else they replace the file."""
    return isinstance(model, Mergeable)


def kinds(*, where: Callable[[Kind], bool] = lambda k: True) -> Any:
    return pytest.mark.parametrize("kind", [k for k in KINDS if where(k)], ids=lambda k: k.name)


def trained(factory: Factory, history: History) -> Any:
    model = factory()
    for path, nxt in history:
        model.observe(path, nxt)
    return model


def reloaded(model: Any) -> Any:
    """``model`` saved as JSON text and loaded back, as the store does."""
    return type(model).from_dict(json.loads(json.dumps(model.to_dict())))


def check_distribution(
    ranked: list[tuple[str, float]], candidates: Sequence[str] | None, history: History
) -> None:
    """The rules of ``predict``'s result (module docstring of ``predictors/base.py``)."""
    if candidates is not None:
        support = list(dict.fromkeys(candidates))
    else:
        support = list(dict.fromkeys(nxt for _, nxt in history))  # first observed first
    assert sorted(name for name, _ in ranked) == sorted(support)
    if not ranked:
        return
    probs = [p for _, p in ranked]
    assert all(p >= 0.0 for p in probs)
    assert math.fsum(probs) == pytest.approx(1.0, abs=1e-9)
    # Most likely first; ties in the order of the support.
    in_support_order = sorted(ranked, key=lambda item: support.index(item[0]))
    assert ranked == sorted(in_support_order, key=lambda item: -item[1])


# --- the package's predictors ------------------------------------------------------------------


def test_every_predictor_the_package_exports_is_under_test() -> None:
    exported = {
        obj
        for name in predictors.__all__
        if isinstance(obj := getattr(predictors, name), type)
        and obj is not Predictor
        and all(hasattr(obj, m) for m in ("predict", "observe", "to_dict", "from_dict"))
    }
    tested = {type(kind.example()) for kind in KINDS}
    assert exported == tested == {ContentPredictor, FirstOrderPredictor, MarkovPredictor}
    assert type(default_predictor()) in tested


@kinds()
def test_is_a_predictor_that_names_its_kind(kind: Kind) -> None:
    model = kind.example()
    assert isinstance(model, Predictor)
    assert isinstance(model.to_dict()["kind"], str)
    json.dumps(model.to_dict(), allow_nan=False)


# --- predict -----------------------------------------------------------------------------------


@kinds()
@EXAMPLES
@given(data=st.data(), history=histories, path=paths, candidates=candidate_lists)
def test_predict_returns_a_distribution_over_the_support(
    kind: Kind, data: st.DataObject, history: History, path: list[str], candidates: list[str] | None
) -> None:
    model = trained(data.draw(kind.configs), history)
    check_distribution(model.predict(path, candidates=candidates), candidates, history)


@kinds()
@EXAMPLES
@given(data=st.data(), path=paths, candidates=st.lists(successors, min_size=1, max_size=6))
def test_an_untrained_predictor_is_uniform_over_the_candidates(
    kind: Kind, data: st.DataObject, path: list[str], candidates: list[str]
) -> None:
    model = data.draw(kind.configs)()
    support = list(dict.fromkeys(candidates))
    ranked = model.predict(path, candidates=candidates)
    assert [name for name, _ in ranked] == support
    assert [p for _, p in ranked] == pytest.approx([1 / len(support)] * len(support), abs=1e-12)
    assert model.predict(path) == []
    assert model.predict(path, candidates=[]) == []


@kinds()
@EXAMPLES
@given(data=st.data(), history=histories, path=paths, candidates=candidate_lists)
def test_predict_does_not_learn(
    kind: Kind, data: st.DataObject, history: History, path: list[str], candidates: list[str] | None
) -> None:
    model = trained(data.draw(kind.configs), history)
    before = model.to_dict()
    first = model.predict(path, candidates=candidates)
    model.predict(["z", *path], candidates=["new", *(candidates or [])])
    model.predict([])
    assert model.to_dict() == before
    assert model.predict(path, candidates=candidates) == first


# --- observe -----------------------------------------------------------------------------------


@kinds()
@EXAMPLES
@given(data=st.data(), path=paths, nxt=successors, others=st.lists(successors, max_size=5))
def test_observe_then_predict_favours_the_observed_successor(
    kind: Kind, data: st.DataObject, path: list[str], nxt: str, others: list[str]
) -> None:
    model = data.draw(kind.configs)()
    model.observe(path, nxt)
    assert model.predict(path) == [(nxt, 1.0)]
    ranked = model.predict(path, candidates=[*others, nxt])
    assert ranked[0][0] == nxt
    assert all(p < ranked[0][1] for _, p in ranked[1:])


@kinds()
@EXAMPLES
@given(data=st.data(), history=histories, path=paths, nxt=successors)
def test_a_successor_observed_most_often_ranks_first(
    kind: Kind, data: st.DataObject, history: History, path: list[str], nxt: str
) -> None:
    """Whatever came before, observing ``path -> nxt`` more often than all earlier observations
    together makes ``nxt`` the strict favourite after ``path``."""
    model = trained(data.draw(kind.configs), history)
    for _ in range(len(history) + 1):
        model.observe(path, nxt)
    ranked = model.predict(path, candidates=[*NODES, END])
    assert ranked[0][0] == nxt
    assert all(p < ranked[0][1] for _, p in ranked[1:])


# --- to_dict / from_dict -----------------------------------------------------------------------


@kinds()
@EXAMPLES
@given(
    data=st.data(),
    history=histories,
    queries=st.lists(st.tuples(paths, candidate_lists), min_size=1, max_size=6),
    more=histories,
)
def test_round_trip_predicts_and_learns_identically(
    kind: Kind,
    data: st.DataObject,
    history: History,
    queries: list[tuple[list[str], list[str] | None]],
    more: History,
) -> None:
    model = trained(data.draw(kind.configs), history)
    copy = reloaded(model)
    assert type(copy) is type(model)
    assert copy.to_dict() == json.loads(json.dumps(model.to_dict()))
    for path, candidates in queries:
        assert copy.predict(path, candidates=candidates) == model.predict(
            path, candidates=candidates
        )
    for path, nxt in more:
        copy.observe(path, nxt)
        model.observe(path, nxt)
    assert copy.to_dict() == model.to_dict()
    for path, candidates in queries:
        assert copy.predict(path, candidates=candidates) == model.predict(
            path, candidates=candidates
        )


@kinds()
def test_from_dict_refuses_data_it_cannot_use(kind: Kind) -> None:
    model = kind.example()
    model.observe(["a"], "b")
    cls = type(model)
    for bad in ({}, {**model.to_dict(), "kind": "no-such-kind"}):
        with pytest.raises((ValueError, TypeError)):
            cls.from_dict(bad)
    with pytest.raises((ValueError, TypeError)):
        cls.from_dict([])  # type: ignore[arg-type]


# --- merge on save -----------------------------------------------------------------------------


def forgot(kind: Kind, factory: Factory, history: History, model: Any) -> bool:
    """Whether ``model``, trained on ``history``, dropped contexts to keep within its bound."""
    unbounded = kind.unbounded
    if unbounded is None:
        return False
    return bool(kind.size(trained(lambda: unbounded(factory()), history)) > kind.size(model))


def same_predictions(a: Any, b: Any, queries: Sequence[list[str]], *, exact: bool = True) -> None:
    """``a`` and ``b`` predict the same after each of ``queries``: exactly, or (``exact``
    False: counts added up in another order) to rounding."""
    for path in queries:
        for candidates in (None, [*NODES, END]):
            mine, theirs = (
                a.predict(path, candidates=candidates),
                b.predict(path, candidates=candidates),
            )
            if exact:
                assert mine == theirs
            else:
                assert dict(mine) == pytest.approx(dict(theirs), rel=1e-12, abs=1e-15)


QUERIES = [[], ["a"], ["b", "a"], ["c", "d", "e"], ["e", "e", "e", "e"]]


@kinds()
@EXAMPLES
@given(data=st.data(), before=histories, mine=histories)
def test_a_lone_writer_merges_to_exactly_its_own_state(
    kind: Kind, data: st.DataObject, before: History, mine: History
) -> None:
    """Nobody else saved since ``base``: the merge is what this process learned, exactly, and
    ``merged`` changes none of the three predictors it reads."""
    factory = data.draw(kind.configs)
    base = trained(factory, before)
    if not mergeable(base):
        pytest.skip(f"{type(base).__name__} is not Mergeable: its save replaces the file")
    model = reloaded(base)
    for path, nxt in mine:
        model.observe(path, nxt)
    latest = reloaded(base)
    states = [p.to_dict() for p in (model, latest, base)]
    out = model.merged(latest, base)
    assert [p.to_dict() for p in (model, latest, base)] == states
    assert out is not model and type(out) is type(model)
    # (Decayed counts merged table by table may sum in another order: equal to rounding.)
    same_predictions(out, model, [*QUERIES, *(path for path, _ in mine)], exact=kind.exact_merge)
    if not forgot(kind, factory, [*before, *mine], model):
        # (With a context bound, a context forgotten and learned again to its old counts
        # keeps its old recency in the merge: same counts, another eviction order.)
        assert out.to_dict() == model.to_dict()
    # Learning since creation (base None) onto an untrained latest: the same.
    fresh = trained(factory, mine)
    onto_blank = fresh.merged(factory(), None)
    assert onto_blank.to_dict() == fresh.to_dict()
    same_predictions(onto_blank, fresh, QUERIES, exact=kind.exact_merge)


@kinds(where=lambda k: k.exact_merge)
@EXAMPLES
@given(data=st.data(), before=histories, mine=histories, theirs=histories)
def test_two_writers_merge_to_the_sum_of_their_learning(
    kind: Kind, data: st.DataObject, before: History, mine: History, theirs: History
) -> None:
    """Two processes load ``base`` and learn; one saves, then the other merges onto it: the
    result predicts exactly as one process that observed everything."""
    factory = data.draw(kind.configs)
    base = trained(factory, before)
    assert mergeable(base)
    a, b = reloaded(base), reloaded(base)
    for path, nxt in theirs:
        a.observe(path, nxt)
    for path, nxt in mine:
        b.observe(path, nxt)
    saved_a = a.merged(reloaded(base), base)
    out = b.merged(reloaded(saved_a), base)
    everything = trained(factory, [*before, *theirs, *mine])
    same_predictions(out, everything, [*QUERIES, *(path for path, _ in mine + theirs)])
    # Onto someone else's state, since creation: the sum too.
    fresh = trained(factory, mine)
    same_predictions(
        fresh.merged(trained(factory, theirs), None), trained(factory, theirs + mine), QUERIES
    )


@kinds()
def test_merge_refuses_another_configuration(kind: Kind) -> None:
    model = kind.example()
    if not mergeable(model):
        pytest.skip(f"{type(model).__name__} is not Mergeable")
    other = kind.other_config(model)
    with pytest.raises(ValueError):
        model.merged(other, None)
    with pytest.raises(ValueError):
        model.merged(reloaded(model), other)


# --- bounded memory ----------------------------------------------------------------------------

MANY_NODES = [f"n{i}" for i in range(200)]


# (Over the Markov options, whose drawn bounds a short history passes; the default's bound is
# shown by the long run below.)
@kinds(where=lambda k: k.name == "markov")
@EXAMPLES
@given(
    data=st.data(),
    history=st.lists(
        st.tuples(st.lists(st.sampled_from(MANY_NODES), max_size=6), st.sampled_from(MANY_NODES)),
        min_size=20,
        max_size=80,
    ),
)
def test_a_bounded_predictor_keeps_at_most_its_bound(
    kind: Kind, data: st.DataObject, history: History
) -> None:
    assert kind.bound is not None
    bound_of = kind.bound
    model = data.draw(kind.configs.filter(lambda factory: bound_of(factory()) is not None))()
    bound = bound_of(model)
    assert bound is not None
    for path, nxt in history:
        model.observe(path, nxt)
        assert kind.size(model) <= bound
    assert kind.size(reloaded(model)) <= bound


@kinds(where=lambda k: k.unbounded is not None)
def test_a_long_run_over_many_nodes_stays_within_the_bound(kind: Kind) -> None:
    """Past the bound, the predictor forgets contexts; without it, the same run would hold more."""
    assert kind.bound is not None and kind.unbounded is not None
    model = kind.example()
    bound = kind.bound(model)
    assert bound is not None
    twin = kind.unbounded(model)
    rng = random.Random(0)
    path: list[str] = []
    while kind.size(twin) <= bound:
        nxt = rng.choice(MANY_NODES)
        model.observe(path, nxt)
        twin.observe(path, nxt)
        path = [*path[-5:], nxt]
        assert kind.size(model) <= bound
