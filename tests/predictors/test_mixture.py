"""The default predictor's experts: run length, count, visited set, recent counts, and their
online mixture weights; persistence of the expert state."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from agentwarm.predictors import END, MarkovPredictor, path_predictor
from agentwarm.predictors._features import CAP, FEATURES, key


def train(model: MarkovPredictor, runs: list[list[str]]) -> None:
    for run in runs:
        seq = [*run, END]
        for i in range(1, len(seq)):
            model.observe(seq[:i], seq[i])


def right_steps(model: MarkovPredictor, run: list[str]) -> list[bool]:
    """For each target of ``run`` (its steps after the first, then END): top-1 was right."""
    seq = [*run, END]
    candidates = [*sorted(set(run)), END]
    return [
        model.predict(seq[:i], candidates=candidates)[0][0] == seq[i] for i in range(1, len(seq))
    ]


def test_default_mixes_the_markov_model_with_four_experts() -> None:
    model = path_predictor()
    assert isinstance(model, MarkovPredictor)
    assert model.experts == ("markov", "recent", "run", "count", "visited")
    assert model.weights == dict.fromkeys(model.experts, 0.2)
    assert MarkovPredictor().experts == ("markov",)
    assert FEATURES == ("run", "count", "visited")


def test_feature_keys() -> None:
    path = ["a", "b", "b", "a", "b", "b", "b"]
    assert key("run", path) == ("b", 3)
    assert key("count", path) == ("b", 5)
    assert key("visited", path) == ("b", "a", "b")
    assert key("run", ["x"] * 50) == ("x", CAP)
    assert key("count", ["x", "y"] * 50) == ("y", CAP)
    assert [key(f, []) for f in FEATURES] == [None, None, None]


# A loop over exactly five items: after the fifth read comes the write. Order-3 contexts see
# (read, read, read) after the third, fourth and fifth read alike.
FIVE_READS = ["list", *["read"] * 5, "write"]


def test_run_length_decides_when_a_per_item_loop_ends() -> None:
    old, new = MarkovPredictor(), path_predictor()
    train(old, [FIVE_READS] * 20)
    train(new, [FIVE_READS] * 20)
    # Targets: read x5, write, END. The old model says "read" after the fifth read.
    assert right_steps(old, FIVE_READS) == [True] * 5 + [False, True]
    assert right_steps(new, FIVE_READS) == [True] * 7
    top, p = new.predict(FIVE_READS[:6], candidates=["read", "write", END])[0]
    assert top == "write" and p > 0.9
    weights = new.weights
    assert weights["run"] > 0.4 and weights["count"] > 0.4  # both see the fifth read
    assert weights["markov"] < 0.05


# Three rounds of edit / test, then submit: the third "test" looks like the second to any
# order-k context (k <= 3) and to the run length; only the count of "test" tells them apart.
THREE_TESTS = ["plan", "edit", "test", "edit", "test", "edit", "test", "submit"]


def test_count_decides_when_retries_end() -> None:
    old, new = MarkovPredictor(), path_predictor()
    train(old, [THREE_TESTS] * 20)
    train(new, [THREE_TESTS] * 20)
    assert right_steps(old, THREE_TESTS) == [True] * 6 + [False, True]
    assert right_steps(new, THREE_TESTS) == [True] * 8
    assert max(new.weights, key=new.weights.__getitem__) == "count"
    assert new.weights["count"] > 0.9


def supervisor_runs(n: int, seed: int) -> list[list[str]]:
    """A supervisor sends the task to workers a, b, c once each, in a random order."""
    rng = random.Random(seed)
    runs = []
    for _ in range(n):
        x, y, z = rng.sample(["a", "b", "c"], 3)
        runs.append(["sup", x, "sup", y, "sup", z, "sup", "finish"])
    return runs


def test_visited_set_routes_to_the_worker_not_yet_called() -> None:
    old, new = MarkovPredictor(), path_predictor()
    train(old, supervisor_runs(60, seed=0))
    train(new, supervisor_runs(60, seed=0))
    old_right = new_right = 0
    for x, y, z in itertools.permutations(["a", "b", "c"]):
        candidates = ["a", "b", "c", "finish"]
        third = ["sup", x, "sup", y, "sup"]
        last = [*third, z, "sup"]
        top, p = new.predict(third, candidates=candidates)[0]
        assert (top, p > 0.8) == (z, True)
        top, p = new.predict(last, candidates=candidates)[0]
        assert (top, p > 0.9) == ("finish", True)
        new_right += 2
        old_right += old.predict(third, candidates=candidates)[0][0] == z
        old_right += old.predict(last, candidates=candidates)[0][0] == "finish"
    assert new_right == 12
    # Order 3 sees (sup, y, sup): which worker came first is lost, and so is "all three done".
    assert old_right < 9
    assert max(new.weights, key=new.weights.__getitem__) == "visited"


def takeover(model: MarkovPredictor, old: int) -> int:
    for _ in range(old):
        model.observe(["a"], "b")
    n = 0
    while model.predict(["a"], candidates=["b", "c"])[0][0] != "c":
        model.observe(["a"], "c")
        n += 1
    return n


def test_recent_expert_follows_a_change_sooner() -> None:
    assert takeover(MarkovPredictor(), old=1000) == 196
    assert takeover(path_predictor(), old=1000) == 11
    assert takeover(MarkovPredictor(recent_half_life=10.0), old=1000) < 196


def test_fixed_share_keeps_every_weight_above_its_floor() -> None:
    model = MarkovPredictor(features=["run"], share=0.1)
    train(model, [FIVE_READS] * 50)
    assert math.isclose(sum(model.weights.values()), 1.0)
    assert min(model.weights.values()) >= 0.1 / 2 - 1e-12
    frozen = MarkovPredictor(features=["run"], share=0.0)
    train(frozen, [FIVE_READS] * 50)
    assert frozen.weights["markov"] < 1e-6


def test_data_without_expert_fields_is_a_plain_markov_model() -> None:
    plain = MarkovPredictor()
    train(plain, [THREE_TESTS] * 3)
    data = plain.to_dict()
    for field in ("features", "recent_half_life", "share", "max_contexts", "weights"):
        del data[field]
    del data["recent_contexts"], data["feature_contexts"]
    loaded = MarkovPredictor.from_dict(data)
    assert loaded.experts == ("markov",)
    assert loaded.max_contexts is None
    assert loaded.predict(["plan", "edit"]) == plain.predict(["plan", "edit"])


def test_contexts_beyond_max_contexts_drop_the_least_recently_observed() -> None:
    model = MarkovPredictor(0, features=["run"], max_contexts=2)
    for node in ["a", "b", "c"]:
        model.observe([node], "x")
    assert model.to_dict()["feature_contexts"]["run"] == [
        [["b", 1], {"x": 1.0}],
        [["c", 1], {"x": 1.0}],
    ]
    model.observe(["b"], "y")  # b becomes the most recent; then d evicts c
    model.observe(["d"], "y")
    assert [entry[0] for entry in model.to_dict()["feature_contexts"]["run"]] == [
        ["b", 1],
        ["d", 1],
    ]
    assert model.num_contexts == 1 + 2
    bounded = path_predictor()
    bounded.max_contexts = 20
    train(bounded, supervisor_runs(50, seed=4))
    assert bounded.num_contexts <= 20 * len(bounded.experts)


def test_first_order_view_is_the_order_one_model() -> None:
    runs = supervisor_runs(30, seed=5) + [THREE_TESTS] * 3
    model, order1 = path_predictor(), MarkovPredictor(1)
    train(model, runs)
    train(order1, runs)
    view = model.first_order_view()
    assert view.experts == ("markov",)
    assert view.to_dict() == order1.to_dict()


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"features": ["run", "gait"]}, "features"),
        ({"features": ["run", "run"]}, "features"),
        ({"features": "run"}, "features"),
        ({"recent_half_life": 0}, "recent_half_life"),
        ({"share": 1.0}, "share"),
        ({"max_contexts": 0}, "max_contexts"),
        ({"max_contexts": 1}, "more than max_contexts"),
        ({"weights": [0.5, 0.5]}, "weights"),
        ({"weights": [1.0, 0.0, 0.0, 0.0, 0.1]}, "weights"),
        ({"weights": [1.2, -0.2, 0.0, 0.0, 0.0]}, "weights"),
        ({"weights": "uniform"}, "weights"),
        (
            {"recent_half_life": None, "weights": [0.25] * 4},
            "recent_contexts but no recent_half_life",
        ),
        ({"recent_contexts": {}}, "recent_contexts"),
        ({"feature_contexts": {"gait": []}}, "feature_contexts"),
        ({"feature_contexts": {"run": [[["read", 0], {"write": 1.0}]]}}, "not a 'run' context"),
        ({"feature_contexts": {"count": [[["read", CAP + 1], {"write": 1}]]}}, "not a 'count'"),
        ({"feature_contexts": {"run": [[["read", "2"], {"write": 1.0}]]}}, "not a 'run' context"),
        ({"feature_contexts": {"visited": [[["read", "list"], {"write": 1}]]}}, "visited"),
        ({"feature_contexts": {"visited": [[["b", "b", "a"], {"write": 1}]]}}, "visited"),
        ({"feature_contexts": {"run": [[["read", 1], {"zz": 1.0}]]}}, "unknown nodes"),
        (
            {"feature_contexts": {"run": [[["read", 1], {"write": -1.0}]]}},
            r"'feature_contexts\.run\.0\.1\.write': .*greater than or equal to 0",
        ),
    ],
)
def test_from_dict_rejects_bad_expert_state(patch: dict[str, object], message: str) -> None:
    model = path_predictor()
    train(model, [FIVE_READS])
    with pytest.raises(ValueError, match=message):
        MarkovPredictor.from_dict({**model.to_dict(), **patch})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"features": ["colour"]},
        {"features": ["run", "run"]},
        {"recent_half_life": -1.0},
        {"share": -0.1},
        {"max_contexts": 0},
        {"max_contexts": True},
    ],
)
def test_bad_expert_configuration_is_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        MarkovPredictor(**kwargs)  # type: ignore[arg-type]
