"""Back off speculation when the branch hit rate is poor (DESIGN §5).

The guardrail watches the *branch hit rate*, not the per-prefetch acceptance ratio, which top-N
caps at 1/N. A step is a branch hit when one of the nodes it chose (END aside) was among the
targets it chose to prefetch speculatively, by any ranking or mid-decode hint during the step
(whether admission let them through or not: the prediction is judged, not the engine's room),
or that the policy's own limits would have chosen but a cautious or paused guardrail held back
(so a tightened guardrail is not judged by its own narrower choice); a step that chose nothing
(all priced out) is scored on its first predictions, with the candidates the policy would take
from them (:func:`~agentwarm.runtime.prefetch.rules.scored_branch`; not the step-end
re-ranking, which has seen the output). So every transition with a prediction is scored,
whether or not speculation was running, and a paused workflow notices when its predictions
recover. Runs and the gateway use :class:`CalibratedGuardrail`, which compares the hits with
the probability the choice promised; :class:`Guardrail` compares them with 1.

The guardrail holds only what it learned (the EWMA and the level, shared by a workflow's runs);
the policy is the caller's, passed where it is used, so concurrent runs with different policies
never change each other's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agentwarm.runtime.policy import PrefetchPolicy

__all__ = ("CalibratedGuardrail", "Guardrail", "Level", "Limits")


class Level(StrEnum):
    NORMAL = "normal"
    CAUTIOUS = "cautious"
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class Limits:
    """What the guardrail allows right now."""

    top_n: int
    min_p: float
    paused: bool
    top_p: float = 1.0


class Guardrail:
    """EWMA of branch hits per workflow, with hysteresis between levels.

    The EWMA starts at 1.0 (optimistic: a new workflow speculates with the full policy) and the
    level moves down as soon as the EWMA crosses a bound, and back up only once it is
    ``policy.hysteresis`` above it.
    """

    def __init__(self) -> None:
        self.ewma = 1.0
        self.level = Level.NORMAL
        self.observations = 0

    @property
    def score(self) -> float:
        """What the levels' bounds are compared with: the EWMA of branch hits."""
        return self.ewma

    def observe(self, hit: bool, policy: PrefetchPolicy, promised: float = 1.0) -> Level:
        """Score one transition (``hit``: the actual next node was among the candidates) with
        ``policy``'s EWMA weight and bounds; the new level. ``promised`` (what the candidates
        promised) is :class:`CalibratedGuardrail`'s: this one compares the hits with 1."""
        p = policy
        self.observations += 1
        self.ewma += p.ewma_alpha * ((1.0 if hit else 0.0) - self.ewma)
        return self._move(p)

    def _move(self, p: PrefetchPolicy) -> Level:
        score = self.score
        if score < p.pause_below:
            self.level = Level.PAUSED
        elif score < p.guardrail_threshold:
            if self.level is Level.NORMAL or score >= p.pause_below + p.hysteresis:
                self.level = Level.CAUTIOUS
        elif score >= p.guardrail_threshold + p.hysteresis or self.level is Level.NORMAL:
            self.level = Level.NORMAL
        elif self.level is Level.PAUSED:
            self.level = Level.CAUTIOUS
        return self.level

    def limits(self, policy: PrefetchPolicy) -> Limits:
        """What ``policy`` allows at the current level."""
        p = policy
        if not p.enabled or self.level is Level.PAUSED:
            return Limits(top_n=0, min_p=1.0, paused=True)
        if self.level is Level.CAUTIOUS:
            return Limits(top_n=1, min_p=max(p.min_p, p.cautious_min_p), paused=False)
        return Limits(top_n=p.top_n, min_p=p.min_p, paused=False, top_p=p.top_p)


class CalibratedGuardrail(Guardrail):
    """A guardrail for candidates chosen by expected value: it compares the branch hits with
    the probability the choice promised (the mass of the candidates it took), not with 1.

    A choice by value refuses unlikely candidates on purpose, so a well-calibrated predictor's
    branch hit rate is the mass it took, often below ``guardrail_threshold``; backing off then
    throws away candidates worth their cost. What speculation must be protected from is
    predictions more confident than they turn out (the spend rule trusts their ``p``): the
    levels compare ``score = EWMA(hits) / EWMA(promised)`` (at most 1) with the policy's
    bounds. Both EWMAs start at 1.0 (optimistic, as the base's).
    """

    def __init__(self) -> None:
        super().__init__()
        self.promised = 1.0

    @property
    def score(self) -> float:
        """``EWMA(hits) / EWMA(promised)``, at most 1 (1 when nothing was promised)."""
        return min(1.0, self.ewma / self.promised) if self.promised > 0 else 1.0

    def observe(self, hit: bool, policy: PrefetchPolicy, promised: float = 1.0) -> Level:
        """Score one transition: ``hit`` as the base's, ``promised`` the probability (in [0,
        1]) that the candidates it was scored on held the actual next node."""
        self.promised += policy.ewma_alpha * (min(1.0, max(0.0, promised)) - self.promised)
        return super().observe(hit, policy, promised)
