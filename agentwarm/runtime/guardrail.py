"""Back off speculation when the branch hit rate is poor (DESIGN §5).

The guardrail watches the *branch hit rate*, not the per-prefetch acceptance ratio, which top-N
caps at 1/N. A step is a branch hit when one of the nodes it chose (END aside) was among the
targets it chose to prefetch speculatively, by any ranking or mid-decode hint during the step
(whether admission let them through or not: the prediction is judged, not the engine's room);
a step that prefetched nothing (speculation paused, or nothing worth it) is scored on its first
predictions, with the candidates the policy would take from them
(:func:`~agentwarm.runtime.prefetch.rules.prefetched_branch`; not the step-end re-ranking, which
has seen the output). So every transition with a prediction is scored, whether or not
speculation was running, and a paused workflow notices when its predictions recover. The
gateway scores a session's steps the same way.

The guardrail holds only what it learned (the EWMA and the level, shared by a workflow's runs);
the policy is the caller's, passed where it is used, so concurrent runs with different policies
never change each other's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agentwarm.runtime.policy import PrefetchPolicy

__all__ = ("Guardrail", "Level", "Limits")


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

    def observe(self, hit: bool, policy: PrefetchPolicy) -> Level:
        """Score one transition (``hit``: the actual next node was among the candidates) with
        ``policy``'s EWMA weight and bounds; the new level."""
        p = policy
        self.observations += 1
        self.ewma += p.ewma_alpha * ((1.0 if hit else 0.0) - self.ewma)
        if self.ewma < p.pause_below:
            self.level = Level.PAUSED
        elif self.ewma < p.guardrail_threshold:
            if self.level is Level.NORMAL or self.ewma >= p.pause_below + p.hysteresis:
                self.level = Level.CAUTIOUS
        elif self.ewma >= p.guardrail_threshold + p.hysteresis or self.level is Level.NORMAL:
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
