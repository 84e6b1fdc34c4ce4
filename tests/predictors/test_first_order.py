from __future__ import annotations

import json

import pytest

from agentwarm.predictors import END, FirstOrderPredictor, Predictor


def test_smoothed_frequencies_of_the_current_node() -> None:
    model = FirstOrderPredictor(pseudo_count=0.1)
    assert isinstance(model, Predictor)
    for _ in range(3):
        model.observe(["x", "a"], "b")
    model.observe(["a"], "c")
    ranked = model.predict(["y", "a"], candidates=["c", "b", END])
    assert [n for n, _ in ranked] == ["b", "c", END]
    assert [p for _, p in ranked] == pytest.approx([3.1 / 4.3, 1.1 / 4.3, 0.1 / 4.3])


def test_unseen_node_is_uniform_and_untrained_without_candidates_is_empty() -> None:
    model = FirstOrderPredictor()
    assert model.predict(["q"], candidates=["a", "b"]) == [("a", 0.5), ("b", 0.5)]
    assert model.predict(["q"]) == []
    model.observe([], "entry")
    assert model.predict([]) == [("entry", 1.0)]


def test_round_trip_and_bad_state() -> None:
    model = FirstOrderPredictor(pseudo_count=0.5)
    model.observe(["a"], "b")
    model.observe(["b"], END)
    copy = FirstOrderPredictor.from_dict(json.loads(json.dumps(model.to_dict())))
    assert copy.predict(["a"], candidates=["b", END]) == model.predict(["a"], candidates=["b", END])
    assert copy.to_dict() == model.to_dict()
    with pytest.raises(ValueError, match="kind"):
        FirstOrderPredictor.from_dict({**model.to_dict(), "kind": "markov"})
    with pytest.raises(ValueError, match="unknown nodes"):
        FirstOrderPredictor.from_dict({**model.to_dict(), "counts": {"a": {"zz": 1}}})
    with pytest.raises(ValueError):
        FirstOrderPredictor(pseudo_count=-1)
