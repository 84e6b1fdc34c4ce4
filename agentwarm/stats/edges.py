"""Branch statistics of traced runs: the :class:`~agentwarm.stats.definitions.Summary` of
the runs (defined once, for traces and the runtime's own records alike) and per-edge counts.

Read from traces (:mod:`agentwarm.stats.traces`):

* Each step counts as taken on its edge ``agentwarm.step.from`` → ``agentwarm.step.node``. A
  completed run's steps that moved to END (those in ``agentwarm.run.end_steps``, its last step
  when the list is empty) each count once as taken on the edge ``{node} → __end__``. A failed
  or cancelled run (or one whose workflow span is missing) has no END edge.
* Per edge: *taken* = steps on the edge, *prefetched* = prefetches on the edge, *hits* = taken
  steps that were branch hits, *hit rate* = hits / taken (``None`` when never taken, and for
  edges out of ``__start__`` or into ``__end__``, which are not branches; and for every edge
  of a workflow whose runs prefetched nothing, like the summary's branch hit rate). Its wasted
  tokens are those of :func:`~agentwarm.stats.definitions.wasted_tokens`. Edges into END are
  never prefetched (END has no prompt): their prefetched and hits are 0 and their TTFT means
  ``None``. TTFT means are over the edge's steps that report ``agentwarm.step.ttft_s``, split by
  hit / not hit.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentwarm._spec import END, START, PrefetchKind
from agentwarm.stats.definitions import (
    Summary,
    anything_prefetched,
    disk_cached_tokens,
    summarize_steps,
    wasted_tokens,
)
from agentwarm.stats.hints import HintFigures, hint_figures, next_in_runs
from agentwarm.stats.traces import PrefillSpan, RunSpan, StepSpan
from agentwarm.stats.warmups import WarmUpStats, is_warm_up, warm_up_stats

__all__ = ("EdgeStats", "TraceStats", "compute_stats")


@dataclass
class EdgeStats:
    """Counts for one edge ``from_node → to_node`` of one workflow."""

    workflow: str
    from_node: str
    to_node: str
    taken: int = 0
    prefetched: int = 0
    hits: int = 0
    wasted_tokens: int = 0
    ttft_hit_mean_s: float | None = None
    ttft_miss_mean_s: float | None = None
    prefetching: bool = True
    """Whether anything was prefetched in the workflow's traced runs (a speculative prefill or
    a branch hit); without it no edge has a hit rate."""

    @property
    def hit_rate(self) -> float | None:
        """hits / taken; ``None`` for an edge never taken, for an edge out of ``__start__`` or
        into ``__end__`` (a run's first step has no previous step to prefetch it, END has no
        prompt: not branches), and when nothing was prefetched (prefetching off)."""
        if not self.taken or self.from_node == START or self.to_node == END:
            return None
        if not self.prefetching:
            return None
        return self.hits / self.taken

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "from": self.from_node,
            "to": self.to_node,
            "taken": self.taken,
            "prefetched": self.prefetched,
            "hits": self.hits,
            "hit_rate": self.hit_rate,
            "wasted_tokens": self.wasted_tokens,
            "ttft_hit_mean_s": self.ttft_hit_mean_s,
            "ttft_miss_mean_s": self.ttft_miss_mean_s,
        }


@dataclass
class TraceStats(Summary):
    """The :class:`~agentwarm.stats.definitions.Summary` of the traced runs, plus per-edge counts.

    ``workflow`` is ``None`` when the traces mix several workflows; ``workflows`` lists them.
    ``warm_ups`` are the warm-up prefills per kind (:mod:`~agentwarm.stats.warmups`): they
    belong to no workflow run and count in nothing else. ``hints`` are the steps' mid-decode
    hint figures (:mod:`~agentwarm.stats.hints`).
    """

    edges: list[EdgeStats] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)
    warm_ups: list[WarmUpStats] = field(default_factory=list)
    hints: HintFigures = field(default_factory=HintFigures)
    disk_cached_tokens: int | None = None
    """Of ``cached_tokens``, those the engines loaded from their disk tier (``LocalEngine`` with
    ``kv_dir``); ``None`` when no step span says (engines that do not split by source)."""

    def edge(self, from_node: str, to_node: str, workflow: str | None = None) -> EdgeStats | None:
        for e in self.edges:
            if (e.from_node, e.to_node) == (from_node, to_node) and workflow in (None, e.workflow):
                return e
        return None

    def to_dict(self) -> dict[str, Any]:
        """The summary's keys (the same as ``agentwarm run --json``'s), the hint keys
        (:data:`~agentwarm.stats.hints.HINT_KEYS`), ``edges``, ``warm_ups`` when the traces
        hold any, and ``disk_cached_tokens`` when a step span carries it."""
        out = {
            **super().to_dict(),
            **self.hints.to_dict(),
            "edges": [e.to_dict() for e in self.edges],
        }
        if self.disk_cached_tokens is not None:
            out["disk_cached_tokens"] = self.disk_cached_tokens
        if self.warm_ups:
            out["warm_ups"] = [w.to_dict() for w in self.warm_ups]
        return out


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _end_steps(steps: Sequence[StepSpan], runs: Sequence[RunSpan]) -> list[StepSpan]:
    """The steps of completed runs that moved to END (module docstring), each once."""
    by_run: dict[tuple[str, str], dict[int, StepSpan]] = defaultdict(dict)
    for s in steps:
        by_run[(s.workflow, s.run_id)][s.index] = s
    ends: dict[tuple[str, str], set[int]] = {}
    for r in runs:
        mine = by_run.get((r.workflow, r.run_id))
        if r.completed and mine:
            ends.setdefault((r.workflow, r.run_id), set()).update(r.end_steps or (max(mine),))
    return [by_run[k][i] for k, idx in ends.items() for i in sorted(idx) if i in by_run[k]]


def compute_stats(
    steps: Sequence[StepSpan],
    prefills: Sequence[PrefillSpan],
    *,
    workflow: str | None = None,
    runs: Sequence[RunSpan] = (),
) -> TraceStats:
    """Per-edge and overall statistics; restricted to one workflow when ``workflow`` is given.
    ``runs`` (the workflow spans) give the edges into END. Warm-up prefills (of any workflow)
    are reported apart, per kind, and nowhere else."""
    warm_ups = warm_up_stats(prefills)
    prefills = [p for p in prefills if not is_warm_up(p)]
    if workflow is not None:
        steps = [s for s in steps if s.workflow == workflow]
        prefills = [p for p in prefills if p.workflow == workflow]
        runs = [r for r in runs if r.workflow == workflow]
    edges: dict[tuple[str, str, str], EdgeStats] = {}

    def edge(wf: str, a: str, b: str) -> EdgeStats:
        key = (wf, a, b)
        if key not in edges:
            edges[key] = EdgeStats(wf, a, b)
        return edges[key]

    ttft_hit: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    ttft_miss: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for s in steps:
        e = edge(s.workflow, s.from_node, s.node)
        e.taken += 1
        e.hits += s.prefetched
        if s.ttft_s is not None:
            key = (s.workflow, s.from_node, s.node)
            (ttft_hit if s.prefetched else ttft_miss)[key].append(s.ttft_s)
    for s in _end_steps(steps, runs):
        edge(s.workflow, s.node, END).taken += 1
    for p in prefills:
        if p.kind == PrefetchKind.SPECULATIVE:
            e = edge(p.workflow, p.source, p.target)
            e.prefetched += 1
            e.wasted_tokens += wasted_tokens((p,))
    steps_of: dict[str, list[StepSpan]] = defaultdict(list)
    prefills_of: dict[str, list[PrefillSpan]] = defaultdict(list)
    for s in steps:
        steps_of[s.workflow].append(s)
    for p in prefills:
        prefills_of[p.workflow].append(p)
    speculated = {
        wf
        for wf in steps_of.keys() | prefills_of.keys()
        if anything_prefetched(steps_of[wf], prefills_of[wf])
    }
    for key, e in edges.items():
        e.prefetching = e.workflow in speculated
        e.ttft_hit_mean_s = _mean(ttft_hit.get(key, []))
        e.ttft_miss_mean_s = _mean(ttft_miss.get(key, []))

    ordered = sorted(
        edges.values(),
        key=lambda e: (e.workflow, e.from_node != START, e.from_node, -e.taken, e.to_node),
    )
    workflows = sorted({s.workflow for s in steps} | {p.workflow for p in prefills})
    summary = summarize_steps(
        steps,
        prefills,
        workflow=workflows[0] if len(workflows) == 1 else None,
        runs=len({(s.workflow, s.run_id) for s in steps}),
        node_key=lambda s: (s.workflow, s.node),
    )
    return TraceStats(
        **summary.to_dict(),
        edges=ordered,
        workflows=workflows,
        warm_ups=warm_ups,
        hints=hint_figures(steps, next_in_runs(steps)),
        disk_cached_tokens=disk_cached_tokens(steps),
    )
