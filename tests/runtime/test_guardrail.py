from __future__ import annotations

from agentwarm.runtime.guardrail import Guardrail, Level
from agentwarm.runtime.policy import PrefetchPolicy


def test_starts_normal_with_full_policy():
    g = Guardrail(PrefetchPolicy(top_n=3, min_p=0.05))
    lim = g.limits()
    assert (lim.top_n, lim.min_p, lim.paused) == (3, 0.05, False)


def test_backs_off_then_pauses_then_recovers():
    policy = PrefetchPolicy(top_n=3, ewma_alpha=0.2)
    g = Guardrail(policy)
    levels = [g.observe(False) for _ in range(10)]
    assert Level.CAUTIOUS in levels
    assert levels[-1] is Level.PAUSED
    assert g.limits().paused and g.limits().top_n == 0
    # Predictions keep being scored while paused; good ones restore speculation.
    ups = [g.observe(True) for _ in range(20)]
    assert ups[-1] is Level.NORMAL
    first_cautious = ups.index(Level.CAUTIOUS)
    assert first_cautious < ups.index(Level.NORMAL)
    assert g.limits().top_n == 3


def test_cautious_limits_raise_min_p_and_keep_one():
    policy = PrefetchPolicy(top_n=4, min_p=0.01, cautious_min_p=0.4)
    g = Guardrail(policy)
    g.level = Level.CAUTIOUS
    lim = g.limits()
    assert (lim.top_n, lim.min_p) == (1, 0.4)


def test_hysteresis_prevents_flapping():
    g = Guardrail(PrefetchPolicy(guardrail_threshold=0.7, hysteresis=0.05, ewma_alpha=0.1))
    g.level, g.ewma = Level.CAUTIOUS, 0.68
    assert g.observe(True) is Level.CAUTIOUS  # 0.712: above the threshold, not above 0.75
    assert abs(g.ewma - 0.712) < 1e-9
    while g.ewma < 0.75:
        assert g.observe(True) is (Level.NORMAL if g.ewma >= 0.75 else Level.CAUTIOUS)
    assert g.level is Level.NORMAL
    g.ewma = 0.72
    assert g.observe(False) is Level.CAUTIOUS  # 0.648: going down is immediate


def test_threshold_not_on_acceptance_ratio():
    # Top-3 with one hit per step has acceptance 1/3 but branch hit rate 1: stays normal.
    g = Guardrail(PrefetchPolicy(top_n=3))
    for _ in range(50):
        g.observe(True)
    assert g.level is Level.NORMAL


def test_disabled_policy_pauses():
    g = Guardrail(PrefetchPolicy.disabled())
    assert g.limits().paused
