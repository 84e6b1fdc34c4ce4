from __future__ import annotations

import pytest

from agentwarm.predictors import END, FirstOrderPredictor


def test_smoothed_frequencies_of_the_current_node() -> None:
    model = FirstOrderPredictor(pseudo_count=0.1)
    for _ in range(3):
        model.observe(["x", "a"], "b")
    model.observe(["a"], "c")
    ranked = model.predict(["y", "a"], candidates=["c", "b", END])
    assert [n for n, _ in ranked] == ["b", "c", END]
    assert [p for _, p in ranked] == pytest.approx([3.1 / 4.3, 1.1 / 4.3, 0.1 / 4.3])


def test_bad_state_and_configuration_are_refused() -> None:
    model = FirstOrderPredictor(pseudo_count=0.5)
    model.observe(["a"], "b")
    model.observe(["b"], END)
    with pytest.raises(ValueError, match="kind"):
        FirstOrderPredictor.from_dict({**model.to_dict(), "kind": "markov"})
    with pytest.raises(ValueError, match="unknown nodes"):
        FirstOrderPredictor.from_dict({**model.to_dict(), "counts": {"a": {"zz": 1}}})
    with pytest.raises(ValueError):
        FirstOrderPredictor(pseudo_count=-1)
