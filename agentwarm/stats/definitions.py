"""The figures of a set of runs: one definition, and one set of key names, for
``agentwarm run --json`` (from the runtime's records), ``agentwarm stats --json`` (from trace
spans) and the benchmark.

Definitions:

* A run's first step comes from ``__start__``; every other step has a previous step.
* *branch hit*: a step with a previous step whose node was speculatively prefetched during that
  previous step. **branch hit rate** = branch hits / steps that have a previous step.
* A *prefetch* is a speculative prefill (kind ``speculative``); "confirmed" warm-ups of the known
  next node are not prefetches. A prefetch is *issued* when admission let it reach the engine;
  one it refused is *dropped* (outcome ``dropped``) and counted apart. **acceptance ratio** =
  prefetches with outcome ``hit`` / prefetches issued.
* A ratio with nothing behind it is ``None`` (``null`` in JSON, :data:`agentwarm._fmt.NA` in
  text), never 0: the acceptance ratio when no prefetch was issued, the branch hit rate when no
  step has a previous step *or* nothing was prefetched (no prefetch issued and no branch hit:
  prefetching off, or nothing speculated, so no step could be a hit and a rate says nothing).
* **wasted tokens**: tokens computed by prefetches whose outcome is not ``hit`` (wasted,
  cancelled, failed, or never resolved).
* A **miss reason** (:class:`~agentwarm._spec.MissReason`) is recorded on every step with a
  previous step that was not a branch hit (one of :data:`~agentwarm._spec.MISS_REASONS`) and
  on every branch hit that did not find its whole prefetched prefix cached, a *short hit*
  (``late`` or ``prefix_mismatch``). **miss reasons** counts them per reason over the steps
  with a previous step; they add up to the branch misses plus the short hits
  (:func:`reasons_add_up`). A step read from a trace written before reasons were recorded
  counts under ``unknown``.
* TTFT mean and percentiles (p50, p95, inclusive method) are over the steps that report a TTFT
  (those that made an LLM call); ``None`` when none did.
* **estimated TTFT saved** = Σ over hit steps with a TTFT of (mean TTFT of the same workflow
  node over its steps that were not hits − that step's TTFT). A hit step whose node has no
  non-hit TTFT contributes nothing (no baseline). It is 0.0 when there were no hit steps and
  ``None`` ("n/a") when there were some but none had a baseline. It can be negative if hits
  were slower.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

from agentwarm._spec import (
    MISS_REASONS,
    SHORT_HIT_REASONS,
    START,
    MissReason,
    PrefetchKind,
    PrefetchOutcome,
    StepOutcome,
)

__all__ = (
    "SUMMARY_KEYS",
    "UNKNOWN_REASON",
    "PrefillLike",
    "StepLike",
    "Summary",
    "acceptance_ratio",
    "anything_prefetched",
    "branch_hit_rate",
    "disk_cached_tokens",
    "dropped",
    "has_previous",
    "miss_reasons",
    "percentile",
    "reasons_add_up",
    "short_hits",
    "step_outcome",
    "summarize_steps",
    "ttft_saved",
    "wasted_tokens",
)


class StepLike(Protocol):
    """What the definitions need of a step (``runtime.records.StepRecord`` and
    ``stats.traces.StepSpan`` qualify)."""

    @property
    def from_node(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def prefetched(self) -> bool: ...
    @property
    def ttft_s(self) -> float | None: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...
    @property
    def miss_reason(self) -> str | None: ...


class PrefillLike(Protocol):
    """What the definitions need of a prefill (``runtime.records.PrefetchRecord`` and
    ``stats.traces.PrefillSpan`` qualify). ``kind`` and ``outcome`` hold the values of
    :class:`~agentwarm._spec.PrefetchKind` and :class:`~agentwarm._spec.PrefetchOutcome` (a
    trace line with any other value is skipped, with a warning, when the trace is read)."""

    @property
    def kind(self) -> str: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def computed_tokens(self) -> int: ...


S = TypeVar("S", bound=StepLike)


def has_previous(step: StepLike) -> bool:
    """Whether the step had a previous step (it is not a run's first step)."""
    return step.from_node != START


def step_outcome(step: StepLike) -> StepOutcome:
    """``none`` for a run's first step, else ``hit`` when its node was prefetched, ``miss``."""
    if not has_previous(step):
        return StepOutcome.NONE
    return StepOutcome.HIT if step.prefetched else StepOutcome.MISS


def anything_prefetched(steps: Iterable[StepLike], prefills: Iterable[PrefillLike]) -> bool:
    """Whether anything was prefetched: a speculative prefill, or a branch hit. Without it
    (prefetching off, or nothing speculated) no step could be a hit and no hit rate is given."""
    return any(p.kind == PrefetchKind.SPECULATIVE for p in prefills) or any(
        s.prefetched and has_previous(s) for s in steps
    )


def branch_hit_rate(
    steps: Iterable[StepLike], prefills: Iterable[PrefillLike] | None = None
) -> float | None:
    """Branch hits / steps that have a previous step; ``None`` when no step has one, or when
    ``prefills`` is given and nothing was prefetched (:func:`anything_prefetched`)."""
    steps = list(steps)
    if prefills is not None and not anything_prefetched(steps, prefills):
        return None
    with_prev = [s for s in steps if has_previous(s)]
    hits = sum(1 for s in with_prev if s.prefetched)
    return hits / len(with_prev) if with_prev else None


def dropped(prefill: PrefillLike) -> bool:
    """Whether admission refused the prefill (nothing of it reached the engine)."""
    return prefill.outcome == PrefetchOutcome.DROPPED


def acceptance_ratio(prefills: Iterable[PrefillLike]) -> float | None:
    """Speculative prefills with outcome ``hit`` / speculative prefills issued (not dropped);
    ``None`` when none was issued."""
    spec = [p for p in prefills if p.kind == PrefetchKind.SPECULATIVE and not dropped(p)]
    return sum(1 for p in spec if p.outcome == PrefetchOutcome.HIT) / len(spec) if spec else None


def wasted_tokens(prefills: Iterable[PrefillLike]) -> int:
    """Tokens computed by speculative prefills whose outcome is not ``hit``."""
    return sum(
        p.computed_tokens
        for p in prefills
        if p.kind == PrefetchKind.SPECULATIVE and p.outcome != PrefetchOutcome.HIT
    )


#: The key of steps whose reason was not recorded (traces older than the reasons).
UNKNOWN_REASON = "unknown"


def miss_reasons(steps: Iterable[StepLike]) -> dict[str, int]:
    """Steps with a previous step, counted by miss reason: every :class:`MissReason` (in its
    order, 0 when none), then ``unknown`` (only when some miss has no recorded reason)."""
    counts = dict.fromkeys(map(str, MissReason), 0)
    for s in steps:
        if not has_previous(s):
            continue
        if s.miss_reason is not None:
            counts[str(s.miss_reason)] = counts.get(str(s.miss_reason), 0) + 1
        elif not s.prefetched:
            counts[UNKNOWN_REASON] = counts.get(UNKNOWN_REASON, 0) + 1
    return counts


def short_hits(steps: Iterable[StepLike]) -> int:
    """Branch hits that did not find their whole prefetched prefix cached (a short-hit reason)."""
    return sum(
        1 for s in steps if has_previous(s) and s.prefetched and s.miss_reason in SHORT_HIT_REASONS
    )


def reasons_add_up(steps: Sequence[StepLike]) -> bool:
    """The invariant of the reasons: each branch miss has one miss reason, each short hit one
    short-hit reason, no other step has any, so the counts add up to misses + short hits."""
    for s in steps:
        reason = s.miss_reason
        if not has_previous(s):
            if reason is not None:
                return False
        elif (not s.prefetched and reason not in MISS_REASONS) or (
            s.prefetched and reason is not None and reason not in SHORT_HIT_REASONS
        ):
            return False
    misses = sum(1 for s in steps if has_previous(s) and not s.prefetched)
    return sum(miss_reasons(steps).values()) == misses + short_hits(steps)


def percentile(values: Sequence[float], q: int) -> float | None:
    """The ``q``-th percentile (1..99, inclusive method); ``None`` for no values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def ttft_saved(steps: Sequence[S], node_key: Callable[[S], Hashable] | None = None) -> float | None:
    """Estimated TTFT saved by hits (module docstring); ``node_key`` names a step's workflow
    node (default: ``step.node``, right when all steps are of one workflow)."""
    key: Callable[[S], Hashable] = node_key or (lambda s: s.node)
    misses: dict[Hashable, list[float]] = defaultdict(list)
    for s in steps:
        if not s.prefetched and s.ttft_s is not None:
            misses[key(s)].append(s.ttft_s)
    hits = [s for s in steps if s.prefetched and s.ttft_s is not None]
    if not hits:
        return 0.0
    gains = [
        statistics.fmean(misses[key(s)]) - s.ttft_s
        for s in hits
        if s.ttft_s is not None and misses.get(key(s))
    ]
    return math.fsum(gains) if gains else None


@dataclass
class Summary:
    """Overall figures of a set of runs; its field names are the JSON keys of both
    ``agentwarm run --json`` and ``agentwarm stats --json``."""

    workflow: str | None
    """The workflow's name; ``None`` when the figures mix several workflows (or none)."""
    runs: int
    steps: int
    branch_steps: int
    branch_hits: int
    branch_hit_rate: float | None
    """``None`` without a step after a run's first, or without any prefetch (module docstring)."""
    short_hits: int
    """Branch hits that did not find their whole prefetched prefix cached."""
    miss_reasons: dict[str, int]
    """Branch misses and short hits by reason (:func:`miss_reasons`)."""
    acceptance_ratio: float | None
    """``None`` when no prefetch was issued."""
    prefetches_issued: int
    """Speculative prefetches admitted (sent to the engine)."""
    prefetches_dropped: int
    """Speculative prefetches admission refused (never sent)."""
    prefetch_hits: int
    wasted_tokens: int
    prompt_tokens: int
    cached_tokens: int
    ttft_mean_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_saved_s: float | None

    def to_dict(self) -> dict[str, Any]:
        """The summary's figures under :data:`SUMMARY_KEYS` (a subclass's extra fields are not
        included)."""
        return {k: getattr(self, k) for k in SUMMARY_KEYS}


SUMMARY_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Summary))


def summarize_steps(
    steps: Sequence[S],
    prefills: Sequence[PrefillLike],
    *,
    workflow: str | None,
    runs: int,
    node_key: Callable[[S], Hashable] | None = None,
) -> Summary:
    """The :class:`Summary` of ``runs`` runs made of ``steps`` and the ``prefills`` issued
    during them (confirmed warm-ups included or not: only speculative ones count)."""
    with_prev = [s for s in steps if has_previous(s)]
    spec = [p for p in prefills if p.kind == PrefetchKind.SPECULATIVE]
    ttfts = [s.ttft_s for s in steps if s.ttft_s is not None]
    return Summary(
        workflow=workflow,
        runs=runs,
        steps=len(steps),
        branch_steps=len(with_prev),
        branch_hits=sum(1 for s in with_prev if s.prefetched),
        branch_hit_rate=branch_hit_rate(steps, spec),
        short_hits=short_hits(steps),
        miss_reasons=miss_reasons(steps),
        acceptance_ratio=acceptance_ratio(spec),
        prefetches_issued=sum(1 for p in spec if not dropped(p)),
        prefetches_dropped=sum(1 for p in spec if dropped(p)),
        prefetch_hits=sum(1 for p in spec if p.outcome == PrefetchOutcome.HIT),
        wasted_tokens=wasted_tokens(spec),
        prompt_tokens=sum(s.prompt_tokens for s in steps),
        cached_tokens=sum(s.cached_tokens for s in steps),
        ttft_mean_s=statistics.fmean(ttfts) if ttfts else None,
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p95_s=percentile(ttfts, 95),
        ttft_saved_s=ttft_saved(steps, node_key),
    )


def disk_cached_tokens(steps: Iterable[Any]) -> int | None:
    """Of the steps' cached tokens, those their engine loaded from its disk tier (each step's
    ``disk_cached_tokens``: ``runtime.records.StepRecord``, ``stats.traces.StepSpan``); ``None``
    when no step says (an engine that does not split its cached tokens by source)."""
    known = [s.disk_cached_tokens for s in steps if s.disk_cached_tokens is not None]
    return sum(known) if known else None
