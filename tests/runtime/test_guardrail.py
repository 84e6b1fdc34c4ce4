from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentwarm.runtime.guardrail import CalibratedGuardrail, Guardrail, Level
from agentwarm.runtime.policy import PrefetchPolicy


def test_starts_normal_with_full_policy():
    g = Guardrail()
    lim = g.limits(PrefetchPolicy(top_n=3, min_p=0.05))
    assert (lim.top_n, lim.min_p, lim.paused) == (3, 0.05, False)


def test_backs_off_then_pauses_then_recovers():
    policy = PrefetchPolicy(top_n=3, ewma_alpha=0.2)
    g = Guardrail()
    levels = [g.observe(False, policy) for _ in range(10)]
    assert Level.CAUTIOUS in levels
    assert levels[-1] is Level.PAUSED
    assert g.limits(policy).paused and g.limits(policy).top_n == 0
    # Predictions keep being scored while paused; good ones restore speculation.
    ups = [g.observe(True, policy) for _ in range(20)]
    assert ups[-1] is Level.NORMAL
    first_cautious = ups.index(Level.CAUTIOUS)
    assert first_cautious < ups.index(Level.NORMAL)
    assert g.limits(policy).top_n == 3


def test_cautious_limits_raise_min_p_and_keep_one():
    policy = PrefetchPolicy(top_n=4, min_p=0.01, cautious_min_p=0.4)
    g = Guardrail()
    g.level = Level.CAUTIOUS
    lim = g.limits(policy)
    assert (lim.top_n, lim.min_p) == (1, 0.4)


def test_hysteresis_prevents_flapping():
    policy = PrefetchPolicy(guardrail_threshold=0.7, hysteresis=0.05, ewma_alpha=0.1)
    g = Guardrail()
    g.level, g.ewma = Level.CAUTIOUS, 0.68
    assert g.observe(True, policy) is Level.CAUTIOUS  # 0.712: above the threshold, not above 0.75
    assert abs(g.ewma - 0.712) < 1e-9
    while g.ewma < 0.75:
        assert g.observe(True, policy) is (Level.NORMAL if g.ewma >= 0.75 else Level.CAUTIOUS)
    assert g.level is Level.NORMAL
    g.ewma = 0.72
    assert g.observe(False, policy) is Level.CAUTIOUS  # 0.648: going down is immediate


def test_threshold_not_on_acceptance_ratio():
    # Top-3 with one hit per step has acceptance 1/3 but branch hit rate 1: stays normal.
    policy = PrefetchPolicy(top_n=3)
    g = Guardrail()
    for _ in range(50):
        g.observe(True, policy)
    assert g.level is Level.NORMAL


def test_disabled_policy_pauses():
    g = Guardrail()
    assert g.limits(PrefetchPolicy.disabled()).paused


def test_policy_is_the_callers_not_the_guardrails():
    """One guardrail (one learned level) serves runs with different policies: each gets its
    own policy's limits, and scoring with one policy changes no other run's policy."""
    g = Guardrail()
    wide, narrow = PrefetchPolicy(top_n=4, min_p=0.01), PrefetchPolicy(top_n=1, min_p=0.3)
    assert (g.limits(wide).top_n, g.limits(narrow).top_n) == (4, 1)
    g.observe(False, PrefetchPolicy(ewma_alpha=0.5, guardrail_threshold=0.7, pause_below=0.2))
    assert g.level is Level.CAUTIOUS and g.ewma == 0.5
    assert (g.limits(wide).top_n, g.limits(wide).min_p) == (1, wide.cautious_min_p)
    assert g.limits(PrefetchPolicy.disabled()).paused and not g.limits(wide).paused


def test_calibrated_guardrail_stays_normal_when_hits_are_what_was_promised():
    # A choice by value that takes 0.6 of the probability and hits 3 steps in 5 (0.6): the
    # base guardrail backs off (0.6 < 0.7), the calibrated one sees no overconfidence.
    policy = PrefetchPolicy(ewma_alpha=0.1)
    plain, calibrated = Guardrail(), CalibratedGuardrail()
    for hit in [True, True, False, True, False] * 20:
        plain.observe(hit, policy)
        calibrated.observe(hit, policy, promised=0.6)
    assert plain.level is Level.CAUTIOUS
    assert calibrated.level is Level.NORMAL
    assert abs(calibrated.promised - 0.6) < 1e-4
    assert calibrated.score >= 0.7 + policy.hysteresis


def test_calibrated_guardrail_pauses_on_overconfident_predictions_and_recovers():
    policy = PrefetchPolicy(ewma_alpha=0.2)
    g = CalibratedGuardrail()
    levels = [g.observe(False, policy, promised=0.9) for _ in range(10)]
    assert Level.CAUTIOUS in levels and levels[-1] is Level.PAUSED
    ups = [g.observe(True, policy, promised=0.9) for _ in range(20)]
    assert ups.index(Level.CAUTIOUS) < ups.index(Level.NORMAL) and ups[-1] is Level.NORMAL


def test_calibrated_score_exact():
    policy = PrefetchPolicy(ewma_alpha=0.5)
    g = CalibratedGuardrail()
    g.observe(False, policy, promised=0.5)  # hits 0.5, promised 0.75
    assert (g.ewma, g.promised) == (0.5, 0.75)
    assert abs(g.score - 2 / 3) < 1e-12
    assert g.level is Level.CAUTIOUS  # 0.667 < 0.7
    g.observe(True, policy, promised=0.25)  # hits 0.75, promised 0.5: capped at 1
    assert (g.ewma, g.promised, g.score) == (0.75, 0.5, 1.0)
    assert g.level is Level.NORMAL
    g.promised = 0.0
    assert g.score == 1.0  # nothing promised: nothing to fall short of


@given(st.lists(st.tuples(st.booleans(), st.floats(-1.0, 2.0)), max_size=60))
def test_calibrated_score_is_a_fraction(steps: list[tuple[bool, float]]):
    policy = PrefetchPolicy()
    g = CalibratedGuardrail()
    for hit, promised in steps:
        g.observe(hit, policy, promised=promised)
        assert 0.0 <= g.score <= 1.0 and 0.0 <= g.promised <= 1.0
