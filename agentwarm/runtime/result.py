"""What a run returns: the path taken and one record per step, with its prefetches.

The figures over runs (branch hit rate, acceptance ratio, wasted tokens, TTFT percentiles...)
are defined once, in :mod:`agentwarm.summary`, shared with ``agentwarm stats`` and the benchmark.
With top-N the acceptance ratio is at most 1/N per step by construction.

"Confirmed" warm-ups (the actual next node's prefix, sent once it is known) are not
speculation: they are recorded but excluded from the prefetch counts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentwarm import telemetry as tm
from agentwarm.summary import summarize_steps

__all__ = ("Outcome", "PrefetchRecord", "RunResult", "StepRecord", "summarize")


class Outcome:
    """A prefetch's outcome (the names are defined once, in :mod:`agentwarm.telemetry`)."""

    HIT = tm.OUTCOME_HIT
    WASTED = tm.OUTCOME_WASTED
    CANCELLED = tm.OUTCOME_CANCELLED
    FAILED = tm.OUTCOME_FAILED
    DROPPED = tm.OUTCOME_DROPPED


SPECULATIVE = tm.KIND_SPECULATIVE
CONFIRMED = tm.KIND_CONFIRMED


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


def summarize(results: list[RunResult], *, workflow: str | None = None) -> dict[str, Any]:
    """Aggregate figures over runs (:class:`agentwarm.summary.Summary` as a dict, the keys of
    ``agentwarm run --json`` and ``agentwarm stats --json``). ``workflow`` defaults to the runs'
    own workflow name (``None`` when they mix several, or there are none)."""
    names = {r.workflow for r in results}
    if workflow is None and len(names) == 1:
        workflow = next(iter(names))
    wf_of = {id(s): r.workflow for r in results for s in r.steps}
    return summarize_steps(
        [s for r in results for s in r.steps],
        [p for r in results for s in r.steps for p in s.prefetches],
        workflow=workflow,
        runs=len(results),
        node_key=lambda s: (wf_of[id(s)], s.node),
    ).to_dict()
