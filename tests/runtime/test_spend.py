"""Spend by expected value (agentwarm.runtime.prefetch.spend): which candidates are worth their
tokens, given the idle window; the estimator that learns the window; the policy's knobs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agentwarm import END, PrefetchPolicy
from agentwarm.runtime.guardrail import Guardrail, Limits
from agentwarm.runtime.policy import choose_candidates
from agentwarm.runtime.prefetch.spend import (
    IdleClock,
    SentPrefixes,
    SpendEstimator,
    choose,
    choose_by_value,
    common_prefix_len,
    threshold,
)

IDLE = threshold(0.1)  # 0.1 / 1.1
BUSY = threshold(1.0)  # 0.5


def _names(chosen: list[tuple[int, str, float]]) -> list[str]:
    return [name for _, name, _ in chosen]


def _value(
    preds: list[tuple[str, float]],
    tokens: dict[str, int] | int = 100,
    *,
    free: float = math.inf,
    top_n: int = 16,
    min_p: float = 0.0,
    top_p: float = 1.0,
    overtaken: bool = False,
    priced: dict[str, float] | None = None,
) -> list[tuple[int, str, float]]:
    def new_tokens(name: str) -> int:
        return tokens if isinstance(tokens, int) else tokens[name]

    return choose_by_value(
        preds,
        new_tokens=new_tokens,
        free_tokens=free,
        top_n=top_n,
        min_p=min_p,
        top_p=top_p,
        overtaken=overtaken,
        priced=priced,
    )


def test_thresholds_are_price_over_one_plus_price():
    assert threshold(0.1) == 0.1 / 1.1
    assert threshold(1.0) == 0.5
    assert threshold(0.0) == 0.0
    assert threshold(3.0) == 0.75


def test_the_boundary_probability_is_sent_and_the_next_float_below_is_not():
    below_idle = math.nextafter(IDLE, 0.0)
    assert _names(_value([("a", IDLE)])) == ["a"]
    assert _names(_value([("a", below_idle)])) == []
    # Past the window (none free), the busy price applies: exactly 0.5 is worth it.
    assert _names(_value([("a", 0.5)], free=0.0)) == ["a"]
    assert _names(_value([("a", math.nextafter(0.5, 0.0))], free=0.0)) == []


def test_the_idle_window_splits_the_candidates():
    # 1000 tokens free. a fits whole (p 0.4 >= 0.0909): sent, 600 tokens spent. b would be
    # 400 idle + 400 busy: price (400 * 0.1 + 400 * 1.0) / 800 = 0.55, threshold 0.55 / 1.55
    # = 0.3548 > 0.3: not sent, and takes no room. c (300 tokens) still fits whole: sent.
    tokens = {"a": 600, "b": 800, "c": 300, "d": 200}
    preds = [("a", 0.4), ("b", 0.3), ("c", 0.2), ("d", 0.1)]
    # d: 900 spent, 100 idle + 100 busy: price 0.55 again, 0.1 < 0.3548: not sent.
    assert _names(_value(preds, tokens, free=1000)) == ["a", "c"]
    # With b at 0.36 (>= 0.3548) it is sent, and the window is spent before c: busy price,
    # c's 0.2 < 0.5.
    preds[1] = ("b", 0.36)
    assert _names(_value(preds, tokens, free=1000)) == ["a", "b"]


def test_a_cheap_candidate_that_fits_is_sent_one_past_the_window_needs_one_half():
    tokens = {"a": 500, "b": 100, "c": 100}
    # a fills the 500 free tokens exactly; b and c come after the window: p >= 0.5 needed.
    assert _names(_value([("a", 0.3), ("b", 0.2), ("c", 0.1)], tokens, free=500)) == ["a"]
    # A window of 600 leaves b's 100 tokens idle: b (0.2 >= 0.0909) is sent, c is not.
    assert _names(_value([("a", 0.3), ("b", 0.2), ("c", 0.1)], tokens, free=600)) == ["a", "b"]
    # No window at all: only a coin flip or better.
    assert _names(_value([("a", 0.5), ("b", 0.49)], tokens, free=0)) == ["a"]


def test_on_an_engine_that_overtakes_speculation_a_candidate_inside_the_window_is_idle():
    tokens = {"a": 3000, "b": 100, "c": 100}
    preds = [("a", 0.2), ("b", 0.3), ("c", 0.15)]
    # Blended: a is 1000 idle + 2000 busy, price 0.7, threshold 0.4118 > 0.2: refused; b and c
    # fit whole in the window a did not take: sent.
    assert _names(_value(preds, tokens, free=1000)) == ["b", "c"]
    # Overtaken: a starts inside the window, so its tokens past it are computed only if the
    # idle time lasts: idle price, sent. b and c would start past the window (3000 spent):
    # busy price, threshold 0.5: held back (for the fill).
    assert _names(_value(preds, tokens, free=1000, overtaken=True)) == ["a"]
    priced: dict[str, float] = {}
    _value(preds, tokens, free=1000, overtaken=True, priced=priced)
    assert priced == {"b": 1.0, "c": 1.0}
    # No window at all: the same rule either way.
    assert _names(_value(preds, tokens, free=0, overtaken=True)) == []
    assert _names(_value(preds, tokens, free=math.inf, overtaken=True)) == ["a", "b", "c"]


def test_a_candidate_with_nothing_new_costs_the_price_of_the_next_token():
    tokens = {"a": 100, "b": 0}
    assert _names(_value([("a", 0.6), ("b", 0.1)], tokens, free=150)) == ["a", "b"]
    assert _names(_value([("a", 0.6), ("b", 0.1)], tokens, free=100)) == ["a"]


def test_end_is_never_sent_but_its_mass_leaves_less_to_the_others():
    preds = [(END, 0.6), ("a", 0.3), ("b", 0.1)]
    # Ranks are positions in the prediction, END's included.
    assert _value(preds) == [(1, "a", 0.3), (2, "b", 0.1)]
    assert _names(_value(preds, free=0)) == []
    # END counts toward top_p: END + a cover 0.9.
    assert _names(_value(preds, top_p=0.9)) == ["a"]
    # An END of 1.0 leaves nothing, and new_tokens is asked of no one.
    asked: list[str] = []
    chosen = choose_by_value(
        [(END, 1.0)],
        new_tokens=lambda n: asked.append(n) or 1,
        free_tokens=math.inf,
        top_n=6,
        min_p=0.0,
    )
    assert chosen == [] and asked == []


def test_top_n_caps_and_rejected_candidates_take_no_place():
    preds = [(f"n{i}", 0.15) for i in range(6)] + [("z", 0.1)]
    assert _names(_value(preds, top_n=3)) == ["n0", "n1", "n2"]
    tokens = {**{f"n{i}": 100 for i in range(6)}, "n0": 1000, "z": 100}
    # n0 does not fit (busy, 0.15 < 0.5): the cap of 2 goes to n1 and n2.
    assert _names(_value(preds, tokens, free=500, top_n=2)) == ["n1", "n2"]


def test_min_p_is_a_floor_even_for_free_tokens():
    preds = [("a", 0.5), ("b", 0.2), ("c", 0.1)]
    assert _names(_value(preds, min_p=0.15)) == ["a", "b"]
    asked: list[str] = []
    choose_by_value(
        preds,
        new_tokens=lambda n: asked.append(n) or 10,
        free_tokens=math.inf,
        top_n=6,
        min_p=0.15,
    )
    assert asked == ["a", "b"]  # candidates under the floor are not even rendered


def test_choose_follows_the_policy_mode_and_the_guardrail_limits():
    preds = [("a", 0.5), ("b", 0.2), ("c", 0.05), (END, 0.25)]
    value = PrefetchPolicy()
    assert value.spend == "value" and (value.idle_price, value.busy_price) == (0.1, 1.0)
    g = Guardrail()
    kw = {"new_tokens": lambda n: 100, "free_tokens": 150.0}
    # a (100 tokens, idle); b: 50 idle + 50 busy, price 0.55, 0.2 < 0.3548; c under 0.0909.
    assert _names(choose(preds, policy=value, limits=g.limits(value), **kw)) == ["a"]
    top_n = PrefetchPolicy(spend="top_n")
    assert _names(choose(preds, policy=top_n, limits=g.limits(top_n), **kw)) == ["a", "b", "c"]
    # Cautious: one candidate, min_p raised to 0.3; paused: none.
    cautious = Limits(top_n=1, min_p=0.3, paused=False)
    assert _names(
        choose(preds, policy=value, limits=cautious, free_tokens=0.0, new_tokens=len)
    ) == ["a"]
    paused = Limits(top_n=0, min_p=1.0, paused=True)
    assert choose(preds, policy=value, limits=paused, **kw) == []


@given(
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=8),
    st.integers(0, 8),
    st.floats(0.0, 1.0),
    st.floats(0.01, 1.0),
    st.integers(0, 7),
    st.floats(0.0, 1e4, allow_nan=False),
)
def test_top_n_mode_is_exactly_choose_candidates(weights, top_n, min_p, top_p, end_at, free):
    total = sum(weights) or 1.0
    preds = sorted(((f"n{i}", w / total) for i, w in enumerate(weights)), key=lambda x: -x[1])
    if end_at < len(preds):
        preds[end_at] = (END, preds[end_at][1])
    limits = Limits(top_n=top_n, min_p=min_p, paused=False, top_p=top_p)
    got = choose(
        preds,
        policy=PrefetchPolicy(spend="top_n"),
        limits=limits,
        new_tokens=lambda n: 1000,
        free_tokens=free,
    )
    assert got == choose_candidates(preds, top_n=top_n, min_p=min_p, top_p=top_p)
    # With every token free (price 0), value mode sends the same candidates too.
    free_policy = PrefetchPolicy(idle_price=0.0)
    same = choose(
        preds, policy=free_policy, limits=limits, new_tokens=lambda n: 10, free_tokens=math.inf
    )
    assert same == got


def test_policy_validates_the_prices():
    price_error = r"idle_price \(2.0\) must not exceed busy_price \(1.0\)"
    with pytest.raises(ValidationError, match=price_error):
        PrefetchPolicy(idle_price=2.0, busy_price=1.0)
    with pytest.raises(ValidationError):
        PrefetchPolicy(busy_price=-1.0)
    with pytest.raises(ValidationError):
        PrefetchPolicy(busy_price=math.inf)
    with pytest.raises(ValidationError):
        PrefetchPolicy(spend="all")  # type: ignore[arg-type]


def test_estimator_starts_with_an_infinite_window():
    est = SpendEstimator()
    assert est.throughput_tok_s == math.inf
    assert est.idle_s("a") == math.inf
    assert est.free_tokens("a", queued_tokens=1e9) == math.inf
    est.observe_idle("a", 0.0)
    assert est.free_tokens("a") == 0.0  # no idle time: no window, throughput unknown or not


def test_estimator_ewma_arithmetic():
    est = SpendEstimator(alpha=0.25)
    est.observe_prefill(1000, 0.5)
    assert est.throughput_tok_s == 2000.0
    # tokens 1000 + 0.25 * (3000 - 1000) = 1500; seconds 0.5 + 0.25 * (0.5 - 0.5) = 0.5.
    est.observe_prefill(3000, 0.5)
    assert est.throughput_tok_s == 3000.0
    # Nothing computed, or no duration: not a measurement.
    est.observe_prefill(0, 0.1)
    est.observe_prefill(100, 0.0)
    assert est.throughput_tok_s == 3000.0
    est.observe_idle("a", 2.0)
    est.observe_idle("a", 4.0)  # 2 + 0.25 * (4 - 2)
    assert est.idle_s("a") == 2.5
    assert est.idle_s("b") == math.inf
    # 3000 tok/s * 2.5 s = 7500 tokens, less 500 queued.
    assert est.free_tokens("a", queued_tokens=500) == 7000.0
    assert est.free_tokens("a", queued_tokens=10_000) == 0.0
    with pytest.raises(ValueError, match="alpha"):
        SpendEstimator(alpha=0.0)


def test_idle_clock_measures_from_speculation_to_the_next_live_call():
    now = [10.0]
    est = SpendEstimator(alpha=0.5)
    clock = IdleClock(est, clock=lambda: now[0])
    clock.live()  # nothing speculated yet: nothing observed
    assert est.idle_s("a") == math.inf
    clock.speculated("a")
    now[0] = 11.5
    clock.live()
    assert est.idle_s("a") == 1.5
    now[0] = 20.0
    clock.live()  # measured once only
    assert est.idle_s("a") == 1.5
    clock.speculated("a")
    clock.speculated("b")  # the later speculation is the one measured
    now[0] = 20.5
    clock.live()
    assert (est.idle_s("a"), est.idle_s("b")) == (1.5, 0.5)


def test_a_re_ranking_of_the_same_step_keeps_its_first_mark():
    """LLM -> a slow tool -> the result re-ranks the step -> the next step's LLM call: the
    idle time runs from the step's first speculation, not from the re-ranking."""
    now = [0.0]
    est = SpendEstimator(alpha=1.0)
    clock = IdleClock(est, clock=lambda: now[0])
    step, other = object(), object()
    assert clock.speculated("a", step) == 0.0
    now[0] = 3.0  # the tool ran
    assert clock.speculated("a", step) == 3.0  # re-ranked: 3 s into the window
    now[0] = 3.25
    clock.live()
    assert est.idle_s("a") == 3.25
    # After the live call, the same step's next speculation is a new mark; another step's
    # replaces an unmeasured one.
    assert clock.speculated("a", step) == 0.0
    assert clock.speculated("b", other) == 0.0
    now[0] = 4.0
    clock.live()
    assert (est.idle_s("a"), est.idle_s("b")) == (3.25, 0.75)


def test_a_re_rankings_window_is_what_is_left_of_the_idle_time():
    est = SpendEstimator()
    est.observe_prefill(1000, 1.0)  # 1000 tok/s
    est.observe_idle("a", 3.0)
    assert est.free_tokens("a") == 3000.0
    assert est.free_tokens("a", queued_tokens=500, elapsed_s=2.0) == 500.0
    assert est.free_tokens("a", elapsed_s=5.0) == 0.0  # past the expected idle time
    assert est.free_tokens("b", elapsed_s=5.0) == math.inf  # never observed: unbounded


@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40))
def test_common_prefix_len(a, b):
    n = common_prefix_len(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


def test_sent_prefixes_count_only_the_tokens_past_what_was_sent():
    sent = SentPrefixes()
    assert sent.new_tokens("a", [1, 2, 3]) == 3
    sent.sent("a", [1, 2, 3])
    assert sent.new_tokens("a", [1, 2, 3, 4, 5]) == 2
    assert sent.new_tokens("a", [1, 9, 3, 4]) == 3
    assert sent.new_tokens("b", [1, 2, 3]) == 3


def test_sent_prefixes_keep_at_most_max_entries_least_recently_used_forgotten():
    sent = SentPrefixes(max_entries=2)
    sent.sent("a", [1, 2])
    sent.sent("b", [3, 4])
    assert sent.new_tokens("a", [1, 2, 5]) == 1  # a used: b is now the least recent
    sent.sent("c", [6])
    assert len(sent) == 2
    assert sent.new_tokens("b", [3, 4]) == 2  # forgotten: its whole prefix counts
    assert (sent.new_tokens("a", [1, 2]), sent.new_tokens("c", [6])) == (0, 0)
    many = SentPrefixes()
    for i in range(5000):
        many.sent(("ns", f"node{i}"), [i], run=f"run{i}")
    assert len(many) == many.max_entries == 1024
    with pytest.raises(ValueError, match="max_entries"):
        SentPrefixes(max_entries=0)


def test_a_runs_own_sent_prefix_is_consulted_before_the_shared_one():
    sent = SentPrefixes()
    sent.sent("b", [1, 2, 3, 4], run="r1")
    sent.sent("b", [1, 9], run="r2")  # another conversation, sent later
    assert sent.new_tokens("b", [1, 2, 3, 4, 5], run="r1") == 1
    assert sent.new_tokens("b", [1, 9, 8], run="r2") == 1
    # A run that sent nothing under "b" (or no run) estimates from the latest shared entry.
    assert sent.new_tokens("b", [1, 9, 8], run="r3") == 1
    assert sent.new_tokens("b", [1, 2, 3, 4, 5]) == 4
