"""Issue 23, item 11: learned state is finite and usable, on load, in predictions and on save.

A count of ``1e-320`` (a subnormal float) once passed validation and made the predictor answer
NaN; the saver then wrote the NaN, and the next start set the file aside (all learning lost).
Now: a state file with a subnormal, NaN or infinite count is refused on load with a message
naming the field; predictions from any state the loader accepts are finite and sum to 1; and
a predictor that somehow holds a non-finite value is not saved (the old file stays as it was).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwarm.errors import PredictorStateError
from agentwarm.predictors import (
    END,
    FirstOrderPredictor,
    MarkovPredictor,
    PredictorStateWarning,
    PredictorStore,
    default_predictor,
    path_predictor,
)

NODES = ["triage", "billing", "refund", END]


def trained_store(tmp_path: Path) -> tuple[PredictorStore, Path, dict[str, Any]]:
    store = PredictorStore(tmp_path)
    model = store.load("support", NODES)
    for _ in range(3):
        model.observe(["triage"], "billing")
        model.observe(["triage", "billing"], END)
    path = store.save("support", model, NODES)
    return store, path, json.loads(path.read_text())


def with_count(doc: dict[str, Any], value: Any) -> str:
    """``doc`` with the first count of the path experts' first context set to ``value``."""
    contexts = doc["predictor"]["path"]["contexts"]
    name = next(iter(contexts[0][1]))
    contexts[0][1][name] = value
    return json.dumps(doc)  # NaN and Infinity as Python writes them


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (1e-320, "subnormal"),
        (5e-324, "subnormal"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (1e300, "at most"),
    ],
)
def test_a_state_file_with_an_unusable_count_is_refused_naming_the_field(
    tmp_path: Path, value: float, problem: str
) -> None:
    _, path, doc = trained_store(tmp_path)
    path.write_text(with_count(doc, value))
    with pytest.warns(PredictorStateWarning) as caught:
        fresh = PredictorStore(tmp_path).load("support", NODES)
    (message,) = [str(w.message) for w in caught]
    assert "field 'path.contexts.0.1." in message, message
    assert problem in message, message
    assert fresh.to_dict() == default_predictor().to_dict()  # learning restarts
    assert len(list(tmp_path.glob("support.corrupt-*.json"))) == 1


def test_tiny_counts_from_decay_never_reach_the_file_or_the_predictions() -> None:
    """A model without a count floor decays its counts towards zero: they are dropped before
    they turn subnormal (the loader would refuse them), and predictions stay finite."""
    model = MarkovPredictor(2, half_life=1.0, min_count=0.0, max_contexts=None)
    model.observe(["a"], "b")
    for _ in range(1050):  # 0.5 ** 1050 is subnormal: far below the smallest normal float
        model.observe(["x"], "c")
    assert all(
        c == 0.0 or c >= 2.2250738585072014e-308
        for _, table in model.to_dict()["contexts"]
        for c in table.values()
    )
    again = MarkovPredictor.from_dict(model.to_dict())
    probs = [p for _, p in again.predict(["a"], candidates=["b", "c"])]
    assert all(math.isfinite(p) for p in probs) and math.isclose(sum(probs), 1.0)


def test_a_predictor_holding_a_non_finite_value_is_not_saved(tmp_path: Path) -> None:
    store, path, _ = trained_store(tmp_path)
    before = path.read_bytes()
    model = store.load("support", NODES)
    model.observe(["triage"], "refund")
    # Something went wrong in memory: a NaN count (no code path should make one).
    table = next(iter(model.path._counts.values()))
    table[next(iter(table))] = float("nan")
    with pytest.raises(PredictorStateError, match=r"not finite|finite number") as raised:
        store.save("support", model, NODES)
    assert "path.contexts" in str(raised.value)
    assert "kept" in str(raised.value)
    assert path.read_bytes() == before  # the previous good file, byte for byte
    assert not list(tmp_path.glob("support.corrupt-*.json"))


def test_the_runtime_warns_once_and_keeps_the_file(tmp_path: Path) -> None:
    from agentwarm.runtime.session import _warn_not_saved

    store, path, _ = trained_store(tmp_path)
    before = path.read_bytes()
    model = store.load("support", NODES)
    model.path._weights = [float("inf"), *model.path._weights[1:]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            store.save("support", model, NODES)
        except PredictorStateError as exc:
            _warn_not_saved(exc)
    (warning,) = caught
    assert "path.weights" in str(warning.message)
    assert path.read_bytes() == before


# --- any state the loader accepts predicts finite probabilities summing to 1 ----------------

NAMES = ["a", "b", "c", END]
counts = st.one_of(
    st.just(0.0),
    st.floats(min_value=2.2250738585072014e-308, max_value=2.0**53),
    st.sampled_from([2.2250738585072014e-308, 1e-300, 1e-30, 1.0, 2.0**53]),
    st.sampled_from([1e-320, 5e-324]),  # subnormal: must be refused, else predict finitely
)
tables = st.dictionaries(st.sampled_from(NAMES), counts, max_size=4)
contexts = st.lists(st.sampled_from(["__start__", "a", "b", "c"]), max_size=3)


@st.composite
def markov_states(draw: st.DrawFn) -> dict[str, Any]:
    features = draw(st.sampled_from([[], ["run", "count", "visited"]]))
    recent = draw(st.sampled_from([None, 10.0]))
    k = 1 + (recent is not None) + len(features)
    entries = draw(st.dictionaries(contexts.map(tuple), tables, max_size=6))
    weights = draw(st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k))
    total = sum(weights)
    return {
        "kind": "markov",
        "max_order": 3,
        "half_life": draw(st.sampled_from([None, 1e-300, 200.0])),
        "backoff": draw(st.sampled_from([2.2250738585072014e-308, 1e-300, 2.0, 1e300, 1e308])),
        "min_count": 0.0,
        "features": features,
        "recent_half_life": recent,
        "share": 0.01,
        "max_contexts": None,
        "observations": 1,
        "known": NAMES,
        "weights": [w / total for w in weights] if total > 0 else [1.0 / k] * k,
        "contexts": [[list(c), t] for c, t in entries.items()],
        "recent_contexts": [[list(c), t] for c, t in entries.items()] if recent else [],
        "feature_contexts": {},
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markov_states(), contexts, st.booleans())
def test_predictions_from_any_accepted_state_are_finite_and_sum_to_one(
    state: dict[str, Any], path: list[str], with_candidates: bool
) -> None:
    try:
        model = MarkovPredictor.from_dict(state)
    except ValueError:
        return  # refused on load: nothing to predict from
    path = [n for n in path if n != "__start__"]
    candidates = NAMES if with_candidates else None
    predicted = model.predict(path, candidates=candidates)
    probs = [p for _, p in predicted]
    assert all(math.isfinite(p) and p >= 0.0 for p in probs), predicted
    assert math.isclose(sum(probs), 1.0, rel_tol=1e-9), predicted
    model.observe(path, "a")  # and learning from it keeps the model finite
    again = model.predict(path, candidates=NAMES)
    assert all(math.isfinite(p) for _, p in again) and math.isclose(sum(p for _, p in again), 1)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES), tables, max_size=4), st.sampled_from(NAMES))
def test_first_order_predictions_from_any_accepted_state_are_finite(
    counts_by_node: dict[str, dict[str, float]], current: str
) -> None:
    state = {"kind": "first_order", "pseudo_count": 0.0, "known": NAMES, "counts": counts_by_node}
    try:
        model = FirstOrderPredictor.from_dict(state)
    except ValueError:
        return
    probs = [p for _, p in model.predict([current], candidates=NAMES)]
    assert all(math.isfinite(p) for p in probs) and math.isclose(sum(probs), 1.0)


def test_the_path_predictor_state_bounds_hold_for_a_saved_model() -> None:
    model = path_predictor()
    model.observe([], "a")
    assert MarkovPredictor.from_dict(model.to_dict()).predict([]) == model.predict([])


@pytest.mark.parametrize("offsets", [[1e308, 1e308], [-1e308, 1e308]])
def test_content_predictions_stay_finite_with_absurd_but_finite_offsets(
    offsets: list[float],
) -> None:
    """Finite offsets the loader accepts, large enough that the scores overflow: the
    prediction falls back to the path experts' scores instead of NaN."""
    from agentwarm.predictors import ContentPredictor, StepContext

    context = StepContext(first_user="my bill", last_user="my bill is wrong")
    model = default_predictor()
    for _ in range(3):
        model.observe_in(["triage"], "billing", context)
        model.observe_in(["triage"], "refund", context)
    state = model.to_dict()
    state["offsets"] = offsets
    loaded = ContentPredictor.from_dict(state)
    names = ["billing", "refund", END]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning either (one per request)
        predicted = dict(loaded.predict_in(["triage"], context, candidates=names))
    path = dict(loaded.path.predict(["triage"], candidates=names))
    assert all(math.isfinite(p) for p in predicted.values()), predicted
    assert predicted == pytest.approx(path, abs=1e-5)  # the path experts', not uniform
