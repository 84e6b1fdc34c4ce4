"""P(next node | tool called), blended with the predictor's distribution."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentwarm.gateway.toolhints import PRIOR, ToolHints


def test_a_learned_handoff_outranks_the_predictor() -> None:
    hints = ToolHints()
    predicted = [("supervisor", 0.7), ("refunds", 0.2), ("baggage", 0.1)]
    assert hints.mix("transfer_to_baggage", predicted) == predicted  # nothing learned yet
    for _ in range(4):
        hints.observe("transfer_to_baggage", "baggage")
    mixed = dict(hints.mix("transfer_to_baggage", predicted))
    # 4 observations against PRIOR = 2 pseudo-observations: the counts weigh 2/3.
    assert PRIOR == 2.0
    assert mixed["baggage"] == pytest.approx(0.1 / 3 + 2 / 3)
    assert mixed["supervisor"] == pytest.approx(0.7 / 3)
    assert next(iter(mixed)) == "baggage"
    assert hints.mix("other_tool", predicted) == predicted


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("xyz")), max_size=30),
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=3, max_size=3),
)
def test_the_mix_is_a_distribution_and_round_trips(
    observed: list[tuple[str, str]], weights: list[float]
) -> None:
    hints = ToolHints()
    for tool, node in observed:
        hints.observe(tool, node)
    total = sum(weights) or 1.0
    predicted = sorted(zip("xyw", (w / total for w in weights), strict=True), key=lambda kv: -kv[1])
    for tool in "abc":
        mixed = hints.mix(tool, predicted)
        assert sum(p for _, p in mixed) == pytest.approx(1.0) or not any(weights)
        assert [p for _, p in mixed] == sorted((p for _, p in mixed), reverse=True)
    assert ToolHints.from_dict(hints.to_dict()).to_dict() == hints.to_dict()
