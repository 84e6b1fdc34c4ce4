"""What a run returns: the path taken and one record per step, with its prefetches.

Definitions (shared with ``agentwarm stats`` and the benchmark):

* *branch hit*: a step (other than the first of a run) whose node was speculatively prefetched
  during the previous step of its branch. ``branch_hit_rate`` = branch hits / steps that have a
  previous step.
* *acceptance ratio*: speculative prefetches whose target was taken / speculative prefetches
  issued. With top-N it is at most 1/N per step by construction.
* *wasted tokens*: tokens computed by speculative prefetches whose target was not taken.

"Confirmed" warm-ups (the actual next node's prefix, sent once it is known) are not
speculation: they are recorded but excluded from the prefetch counts.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ("Outcome", "PrefetchRecord", "RunResult", "StepRecord", "summarize")


class Outcome:
    HIT = "hit"
    WASTED = "wasted"
    CANCELLED = "cancelled"
    FAILED = "failed"


SPECULATIVE = "speculative"
CONFIRMED = "confirmed"


@dataclass(slots=True)
class PrefetchRecord:
    """One prefetch issued during a step, for one target node."""

    target: str
    probability: float
    rank: int
    kind: str
    tokens: int
    computed_tokens: int = 0
    outcome: str | None = None
    issued_after_s: float = 0.0
    requests: int = 0

    @property
    def speculative(self) -> bool:
        return self.kind == SPECULATIVE


@dataclass(slots=True)
class StepRecord:
    """One executed step. TTFT and token counts are of the step's first LLM call."""

    index: int
    node: str
    from_node: str
    path: list[str]
    next: list[str] = field(default_factory=list)
    prefetched: bool = False
    ttft_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    llm_calls: int = 0
    duration_s: float = 0.0
    prefetches: list[PrefetchRecord] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        """``hit``/``miss`` for steps with a previous step, ``none`` for the first."""
        if self.from_node.startswith("__"):
            return "none"
        return "hit" if self.prefetched else "miss"


@dataclass(slots=True)
class RunResult:
    """Result of one workflow run."""

    workflow: str
    run_id: str
    input: str
    path: list[str]
    steps: list[StepRecord]
    state: dict[str, Any]
    duration_s: float
    guardrail_level: str = "normal"

    @property
    def speculative_prefetches(self) -> list[PrefetchRecord]:
        return [p for s in self.steps for p in s.prefetches if p.speculative]

    def summary(self) -> dict[str, Any]:
        return summarize([self])

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(self.summary())
        return out


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def summarize(results: list[RunResult]) -> dict[str, Any]:
    """Aggregate figures over runs, by the definitions in this module's docstring."""
    steps = [s for r in results for s in r.steps]
    with_prev = [s for s in steps if s.outcome != "none"]
    spec = [p for r in results for p in r.speculative_prefetches]
    hits = sum(1 for p in spec if p.outcome == Outcome.HIT)
    ttfts = [s.ttft_s for s in steps if s.ttft_s is not None]
    return {
        "runs": len(results),
        "steps": len(steps),
        "branch_hit_rate": (
            sum(1 for s in with_prev if s.prefetched) / len(with_prev) if with_prev else 0.0
        ),
        "acceptance_ratio": hits / len(spec) if spec else 0.0,
        "prefetches_issued": len(spec),
        "prefetch_hits": hits,
        "wasted_tokens": sum(p.computed_tokens for p in spec if p.outcome != Outcome.HIT),
        "prompt_tokens": sum(s.prompt_tokens for s in steps),
        "cached_tokens": sum(s.cached_tokens for s in steps),
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else None,
        "ttft_p50_s": _percentile(ttfts, 50),
        "ttft_p95_s": _percentile(ttfts, 95),
    }
