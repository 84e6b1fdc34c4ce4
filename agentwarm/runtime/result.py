"""What a run returns: the path taken and one record per step (:mod:`agentwarm.runtime.records`),
with its prefetches.

The figures over runs (branch hit rate, acceptance ratio, wasted tokens, TTFT percentiles...)
are defined once, in :mod:`agentwarm.stats.definitions`, shared with ``agentwarm stats`` and the
benchmark. With top-N the acceptance ratio is at most 1/N per step by construction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agentwarm.runtime.records import PrefetchRecord, StepRecord
from agentwarm.stats.definitions import summarize_steps

__all__ = ("RunResult", "summarize")


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

    @property
    def hint_leads_s(self) -> list[float]:
        """The lead time (s) each mid-decode hint gave before its step ended, in step order
        (:attr:`StepRecord.hint_lead_s <agentwarm.runtime.records.StepRecord.hint_lead_s>`)."""
        return [s.hint_lead_s for s in self.steps if s.hint_lead_s is not None]

    def summary(self) -> dict[str, Any]:
        return summarize([self])

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(self.summary())
        return out


def summarize(results: list[RunResult], *, workflow: str | None = None) -> dict[str, Any]:
    """Aggregate figures over runs (:class:`agentwarm.stats.Summary` as a dict, the keys of
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
