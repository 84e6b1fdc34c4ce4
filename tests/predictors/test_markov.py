from __future__ import annotations

import math
import random

import pytest

from agentwarm.predictors import (
    END,
    START,
    FirstOrderPredictor,
    MarkovPredictor,
    Predictor,
)

# A first-order source: each node's successors with their true probabilities.
TRUE = {
    "a": {"b": 0.6, "c": 0.3, "d": 0.1},
    "b": {"c": 0.5, "a": 0.3, END: 0.2},
    "c": {"d": 0.7, "b": 0.2, END: 0.1},
    "d": {END: 0.55, "a": 0.45},
}


def sample_runs(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    runs = []
    for _ in range(n):
        path = ["a"]
        while True:
            succ = TRUE[path[-1]]
            nxt = rng.choices(list(succ), weights=list(succ.values()))[0]
            if nxt == END or len(path) >= 50:
                break
            path.append(nxt)
        runs.append(path)
    return runs


def train(predictor: Predictor, runs: list[list[str]]) -> None:
    for run in runs:
        seq = [*run, END]
        for i in range(1, len(seq)):
            predictor.observe(seq[:i], seq[i])


def test_sentinels_are_the_shared_ones() -> None:
    from agentwarm import _spec

    assert (END, START) == (_spec.END, _spec.START)


def test_top1_matches_the_true_most_likely_successor() -> None:
    model = MarkovPredictor()
    runs = sample_runs(1500, seed=7)
    train(model, runs)
    for node, succ in TRUE.items():
        best = max(succ, key=lambda x: succ[x])
        ranked = model.predict([node], candidates=list(succ))
        assert ranked[0][0] == best
        assert math.isclose(sum(p for _, p in ranked), 1.0)
        assert sorted(n for n, _ in ranked) == sorted(succ)
    # Every well-observed longer context agrees with the source too.
    checked = 0
    for run in runs[:300]:
        for i in range(1, len(run) + 1):
            path = run[:i]
            if sum(model.counts(model.contexts(path)[-1]).values()) < 30:
                continue
            succ = TRUE[path[-1]]
            assert model.predict(path, candidates=list(succ))[0][0] == max(
                succ, key=succ.__getitem__
            )
            checked += 1
    assert checked > 500


def test_learned_probabilities_approach_the_source() -> None:
    model = MarkovPredictor(half_life=None)
    train(model, sample_runs(3000, seed=3))
    probs = dict(model.predict(["a"], candidates=["b", "c", "d"]))
    assert probs["b"] == pytest.approx(0.6, abs=0.05)
    assert probs["c"] == pytest.approx(0.3, abs=0.05)


def test_candidates_restrict_and_deduplicate() -> None:
    model = MarkovPredictor()
    for _ in range(5):
        model.observe(["a"], "b")
        model.observe(["a"], "z")
    ranked = model.predict(["a"], candidates=["c", "b", "c"])
    assert [n for n, _ in ranked] == ["b", "c"]
    # A successor that was never observed keeps a share from the prior.
    assert ranked[1][1] > 0.0


def test_empty_path_predicts_the_entry() -> None:
    model = MarkovPredictor()
    for _ in range(3):
        model.observe([], "start_here")
        model.observe(["start_here"], "next")
    assert model.predict([])[0][0] == "start_here"
    assert model.contexts([]) == [(), (START,)]


def test_contexts_pad_with_start_and_stop_at_max_order() -> None:
    model = MarkovPredictor(max_order=2)
    assert model.contexts(["a"]) == [(), ("a",), (START, "a")]
    assert model.contexts(["a", "b", "c"]) == [(), ("c",), ("b", "c")]
    assert MarkovPredictor(max_order=0).contexts(["a", "b"]) == [()]


def deterministic_second_order_runs(n: int) -> list[list[str]]:
    # After (b, a) comes c; after (c, a) comes b: the successor of "a" depends on two nodes.
    return [["s", *(["a", "b", "a", "c"] * 3)] for _ in range(n)]


def test_captures_second_order_structure_first_order_cannot() -> None:
    markov, first = MarkovPredictor(), FirstOrderPredictor()
    train(markov, deterministic_second_order_runs(30))
    train(first, deterministic_second_order_runs(30))
    run = deterministic_second_order_runs(1)[0]
    at_a = [i for i, node in enumerate(run[:-1]) if node == "a"]
    markov_right = first_right = 0
    for i in at_a:
        path, truth = run[: i + 1], run[i + 1]
        top, p = markov.predict(path, candidates=["b", "c"])[0]
        markov_right += top == truth and p > 0.9
        first_right += first.predict(path, candidates=["b", "c"])[0][0] == truth
    assert len(at_a) == 6
    assert markov_right == 6
    assert (
        first_right == 3
    )  # b and c follow "a" equally often: one fixed guess is right half the time


def takeover(model: MarkovPredictor, old: int) -> int:
    """Observe a->b ``old`` times, then a->c until c ranks first; return how many a->c it took."""
    for _ in range(old):
        model.observe(["a"], "b")
    n = 0
    while model.predict(["a"], candidates=["b", "c"])[0][0] != "c":
        model.observe(["a"], "c")
        n += 1
    return n


def test_decay_follows_drift_within_one_half_life() -> None:
    # A context saturated with a->b switches to c after exactly half_life observations.
    assert takeover(MarkovPredictor(half_life=20), old=300) == 20
    assert takeover(MarkovPredictor(half_life=50), old=1000) == 50
    # Less old evidence switches sooner.
    assert takeover(MarkovPredictor(half_life=20), old=5) < 20


def test_without_decay_old_counts_must_be_outnumbered() -> None:
    assert takeover(MarkovPredictor(half_life=None), old=300) in (300, 301)


def test_decayed_counts_are_pruned() -> None:
    model = MarkovPredictor(half_life=1.0, min_count=0.01)
    model.observe(["a"], "b")
    for _ in range(10):
        model.observe(["a"], "c")
    assert model.counts(["a"]) == {"c": pytest.approx(2.0 - 2.0**-9)}


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"kind": "first_order"}, "kind"),
        ({"max_order": "3"}, "max_order"),
        ({"half_life": -1}, "half_life"),
        ({"observations": -2}, "observations"),
        ({"known": "abc"}, "known"),
        ({"contexts": {}}, "contexts"),
        ({"contexts": [[["a", "b", "c", "d"], {"b": 1.0}]]}, "longer than max_order"),
        ({"contexts": [[["a"], {"b": -1.0}]]}, r"'contexts\.0\.1\.b': .*greater than or equal"),
        ({"contexts": [[["a"], {"b": True}]]}, r"'contexts\.0\.1\.b': .*valid number"),
        ({"contexts": [[["a"], {"zz": 1.0}]]}, "unknown nodes"),
        ({"contexts": [[["a"], {"b": 1.0}], [["a"], {"b": 2.0}]]}, "repeats"),
        ({"contexts": [["a"]]}, r"'contexts\.0\.0': Input should be a valid list"),
    ],
)
def test_from_dict_rejects_bad_state(patch: dict[str, object], message: str) -> None:
    model = MarkovPredictor()
    model.observe(["a"], "b")
    data = {**model.to_dict(), **patch}
    with pytest.raises(ValueError, match=message):
        MarkovPredictor.from_dict(data)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_order": -1}, {"half_life": 0}, {"backoff": 0.0}, {"min_count": 1.0}],
)
def test_bad_configuration_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        MarkovPredictor(**kwargs)  # type: ignore[arg-type]
