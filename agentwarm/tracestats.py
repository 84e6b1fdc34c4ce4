"""Branch statistics from agentwarm traces (the JSON-lines files ``agentwarm run --trace`` writes).

The overall figures (branch hit rate, acceptance ratio, wasted tokens, TTFT percentiles,
estimated TTFT saved) are :class:`agentwarm.summary.Summary`, defined once in
:mod:`agentwarm.summary` for traces and the runtime's own records alike. Read from traces:

* A *step* is one ``invoke_agent {node}`` span with ``agentwarm.step.node``. Its edge is
  ``agentwarm.step.from`` → ``agentwarm.step.node``; a run's first step comes from ``__start__``.
  It was a branch hit when ``agentwarm.step.prefetched`` is true.
* A *prefetch* is a speculative ``agentwarm.prefill`` span (``agentwarm.prefill.kind`` =
  ``speculative``). Its edge is ``agentwarm.prefill.source`` → ``agentwarm.prefill.target``;
  its wasted tokens are ``agentwarm.prefill.computed_tokens`` when its outcome is not ``hit``.
* A *run* is one ``invoke_workflow {workflow}`` span. It completed when
  ``agentwarm.run.completed`` is true; ``agentwarm.run.end_steps`` lists the indices of its
  steps that moved to END (its last step when the list is empty). Each such step counts once as
  taken on the edge ``{node} → __end__``. A failed or cancelled run (or one whose workflow span
  is missing) has no END edge.
* Per edge: *taken* = steps on the edge, *prefetched* = prefetches on the edge, *hits* = taken
  steps that were branch hits, *hit rate* = hits / taken (``None`` when never taken, and for
  edges out of ``__start__`` or into ``__end__``, which are not branches; and for every edge
  of a workflow whose runs prefetched nothing, like the summary's branch hit rate in
  :mod:`agentwarm.summary`). Edges into END are never prefetched (END has no prompt): their
  prefetched and hits are 0 and their TTFT means ``None``. TTFT means are over the edge's
  steps that report ``agentwarm.step.ttft_s``, split by hit / not hit.

Readers are tolerant: lines that are not JSON, not span records, or agentwarm spans missing
required attributes or holding a value that makes no sense (a count or index that is not an
integer in 0..:data:`MAX_COUNT`, a TTFT that is not a finite number >= 0, a probability outside
0..1) are reported as :class:`Problem` (file and 1-based line number) and skipped.
Spans of other instrumentations are counted and ignored. A span seen twice (same trace and span
id, e.g. one file given twice) counts once. Both the agentwarm line format (flat
``attributes``) and OTLP/JSON export lines (``resourceSpans``) are understood.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentwarm import _jsonfile
from agentwarm import telemetry as tm
from agentwarm._spec import END, START
from agentwarm.errors import ConfigError
from agentwarm.summary import (
    PrefillLike,
    StepLike,
    Summary,
    acceptance_ratio,
    branch_hit_rate,
    has_previous,
    summarize_steps,
    wasted_tokens,
)

__all__ = (
    "MAX_COUNT",
    "EdgeStats",
    "PrefillLike",
    "PrefillSpan",
    "Problem",
    "RunSpan",
    "StepLike",
    "StepSpan",
    "TraceData",
    "TraceStats",
    "acceptance_ratio",
    "branch_hit_rate",
    "compute_stats",
    "has_previous",
    "read_traces",
    "wasted_tokens",
)


@dataclass(frozen=True, slots=True)
class StepSpan:
    workflow: str
    run_id: str
    index: int
    from_node: str
    node: str
    prefetched: bool
    ttft_s: float | None
    prompt_tokens: int
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class PrefillSpan:
    workflow: str
    run_id: str
    source: str
    target: str
    kind: str
    outcome: str | None
    tokens: int
    computed_tokens: int
    probability: float | None
    rank: int | None


@dataclass(frozen=True, slots=True)
class RunSpan:
    """One run's workflow span: whether it completed, and which steps moved to END."""

    workflow: str
    run_id: str
    completed: bool
    end_steps: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Problem:
    """A trace line that was skipped, and why."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class TraceData:
    """Everything read from trace files."""

    steps: list[StepSpan] = field(default_factory=list)
    prefills: list[PrefillSpan] = field(default_factory=list)
    runs: list[RunSpan] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    spans: int = 0
    other_spans: int = 0
    duplicates: int = 0


#: Largest token count, step index or rank a trace may hold (2**53: exact as a JSON/IEEE double,
#: and far beyond any real prompt).
MAX_COUNT = 2**53

#: Slack above 1 allowed in a probability (a predictor's mixture may sum to 1 + rounding).
_PROBABILITY_SLACK = 1e-9


class _BadSpan(ValueError):
    pass


def _shown(v: Any) -> str:
    """``repr(v)``, shortened so that a hostile value cannot flood the warning."""
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


def _otlp_value(v: Any) -> Any:
    if not isinstance(v, dict) or len(v) != 1:
        return v
    kind, val = next(iter(v.items()))
    if kind in ("intValue", "doubleValue"):
        try:
            return int(val) if kind == "intValue" else float(val)
        except (TypeError, ValueError, OverflowError):
            return val  # left as it is for the attribute's own check to report
    if kind == "arrayValue":
        return [_otlp_value(x) for x in val.get("values", [])]
    return val


def _attrs(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, list):  # OTLP/JSON: [{"key": ..., "value": {"stringValue": ...}}]
        return {
            a["key"]: _otlp_value(a.get("value"))
            for a in raw
            if isinstance(a, dict) and isinstance(a.get("key"), str)
        }
    raise _BadSpan("attributes is neither an object nor an OTLP key/value list")


def _records(obj: Any) -> Iterator[dict[str, Any]]:
    """Span objects in one decoded line: an agentwarm span line or an OTLP/JSON export batch."""
    if not isinstance(obj, dict):
        raise _BadSpan("not a span record (expected a JSON object)")
    if "resourceSpans" in obj:
        for rs in obj.get("resourceSpans") or []:
            for ss in rs.get("scopeSpans") or []:
                yield from ss.get("spans") or []
        return
    if not isinstance(obj.get("name"), str):
        raise _BadSpan("not a span record (no 'name')")
    yield obj


def _str(attrs: dict[str, Any], key: str, span: str) -> str:
    v = attrs.get(key)
    if not isinstance(v, str) or not v:
        raise _BadSpan(f"{span} span without a string '{key}'")
    return v


def _int(attrs: dict[str, Any], key: str, default: int | None = 0) -> int | None:
    """A count or index: an integer (or integral number, or decimal string) in 0..MAX_COUNT."""
    v = attrs.get(key, default)
    if v is None:
        return None
    n: int | None = None
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif isinstance(v, float) and v.is_integer():  # False for inf and nan
        n = int(v)
    elif isinstance(v, str):
        try:
            n = int(v)
        except ValueError:  # not digits, or more digits than Python converts
            n = None
    if n is None:
        raise _BadSpan(f"'{key}' is not an integer: {_shown(v)}")
    if n < 0:
        raise _BadSpan(f"'{key}' is negative: {_shown(v)}")
    if n > MAX_COUNT:
        raise _BadSpan(f"'{key}' is larger than {MAX_COUNT}: {_shown(v)}")
    return n


def _float(attrs: dict[str, Any], key: str, *, most: float = math.inf) -> float | None:
    """A finite number in 0..``most`` (a number or a decimal string)."""
    v = attrs.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise _BadSpan(f"'{key}' is not a number: {_shown(v)}")
    try:
        x = float(v)
    except (ValueError, OverflowError) as exc:
        raise _BadSpan(f"'{key}' is not a number: {_shown(v)}") from exc
    if not math.isfinite(x):
        raise _BadSpan(f"'{key}' is not a finite number: {_shown(v)}")
    if x < 0:
        raise _BadSpan(f"'{key}' is negative: {_shown(v)}")
    if x > most:
        raise _BadSpan(f"'{key}' is larger than {most:g}: {_shown(v)}")
    return x


def _bool(attrs: dict[str, Any], key: str) -> bool:
    v = attrs.get(key, False)
    if isinstance(v, str):
        return v.lower() == "true"
    return bool(v)


def _step(attrs: dict[str, Any]) -> StepSpan:
    return StepSpan(
        workflow=str(attrs.get(tm.AW_WORKFLOW, "")),
        run_id=str(attrs.get(tm.AW_RUN_ID, "")),
        index=_int(attrs, tm.AW_STEP_INDEX) or 0,
        from_node=_str(attrs, tm.AW_STEP_FROM, "step"),
        node=_str(attrs, tm.AW_STEP_NODE, "step"),
        prefetched=_bool(attrs, tm.AW_STEP_PREFETCHED),
        ttft_s=_float(attrs, tm.AW_STEP_TTFT),
        prompt_tokens=_int(attrs, tm.AW_STEP_PROMPT_TOKENS) or 0,
        cached_tokens=_int(attrs, tm.AW_STEP_CACHED_TOKENS) or 0,
    )


def _prefill(attrs: dict[str, Any]) -> PrefillSpan:
    outcome = attrs.get(tm.AW_PREFILL_OUTCOME)
    return PrefillSpan(
        workflow=str(attrs.get(tm.AW_WORKFLOW, "")),
        run_id=str(attrs.get(tm.AW_RUN_ID, "")),
        source=_str(attrs, tm.AW_PREFILL_SOURCE, "prefill"),
        target=_str(attrs, tm.AW_PREFILL_TARGET, "prefill"),
        kind=_str(attrs, tm.AW_PREFILL_KIND, "prefill"),
        outcome=outcome if isinstance(outcome, str) else None,
        tokens=_int(attrs, tm.AW_PREFILL_TOKENS) or 0,
        computed_tokens=_int(attrs, tm.AW_PREFILL_COMPUTED_TOKENS) or 0,
        probability=_float(attrs, tm.AW_PREFILL_PROBABILITY, most=1 + _PROBABILITY_SLACK),
        rank=_int(attrs, tm.AW_PREFILL_RANK, None),
    )


def _run(attrs: dict[str, Any]) -> RunSpan:
    ends = attrs.get(tm.AW_RUN_END_STEPS) or []
    if not isinstance(ends, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ends
    ):
        raise _BadSpan(f"'{tm.AW_RUN_END_STEPS}' is not a list of step indices: {ends!r:.40}")
    return RunSpan(
        workflow=str(attrs.get(tm.AW_WORKFLOW, "")),
        run_id=_str(attrs, tm.AW_RUN_ID, "workflow"),
        completed=_bool(attrs, tm.AW_RUN_COMPLETED),
        end_steps=tuple(ends),
    )


def _read_line(raw: bytes, data: TraceData, seen: set[tuple[str, str]]) -> None:
    try:
        obj = _jsonfile.loads(raw)
    except _jsonfile.JSONTextError as exc:
        raise _BadSpan(str(exc)) from exc
    parsed: list[StepSpan | PrefillSpan | RunSpan | None] = []
    keys: list[tuple[str, str] | None] = []
    for rec in _records(obj):
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str):
            raise _BadSpan("not a span record (no 'name')")
        name, attrs = rec["name"], _attrs(rec.get("attributes", {}))
        tid, sid = rec.get("traceId"), rec.get("spanId")
        keys.append((tid, sid) if isinstance(tid, str) and isinstance(sid, str) else None)
        if name == tm.SPAN_PREFILL:
            parsed.append(_prefill(attrs))
        elif name.startswith(tm.SPAN_STEP + " ") and tm.AW_STEP_NODE in attrs:
            parsed.append(_step(attrs))
        elif name.startswith(tm.SPAN_WORKFLOW + " ") and tm.AW_RUN_ID in attrs:
            parsed.append(_run(attrs))
        else:
            parsed.append(None)
    for key, item in zip(keys, parsed, strict=True):
        if key is not None:
            if key in seen:
                data.duplicates += 1
                continue
            seen.add(key)
        data.spans += 1
        if isinstance(item, StepSpan):
            data.steps.append(item)
        elif isinstance(item, PrefillSpan):
            data.prefills.append(item)
        elif isinstance(item, RunSpan):
            data.runs.append(item)
        else:
            data.other_spans += 1


def read_traces(paths: Sequence[str | Path]) -> TraceData:
    """Read JSON-lines trace files, in order, into one :class:`TraceData`.

    Raises :class:`ConfigError` if a file does not exist or cannot be read; bad lines inside a
    readable file become :attr:`TraceData.problems`, never exceptions.
    """
    data = TraceData()
    seen: set[tuple[str, str]] = set()
    for p in paths:
        path = Path(p)
        if not path.exists():
            raise ConfigError(f"{path}: no such trace file")
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory, not a trace file")
        try:
            with path.open("rb") as fh:
                for lineno, raw in enumerate(fh, start=1):
                    if not raw.strip():
                        continue
                    try:
                        _read_line(raw, data, seen)
                    except (_BadSpan, AttributeError, TypeError) as exc:
                        msg = str(exc) if isinstance(exc, _BadSpan) else "malformed span record"
                        data.problems.append(Problem(str(path), lineno, msg))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return data


# --- statistics ---------------------------------------------------------------------------------


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
        if not self.taken or self.from_node.startswith("__") or self.to_node == END:
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
    """The :class:`~agentwarm.summary.Summary` of the traced runs, plus per-edge counts.

    ``workflow`` is ``None`` when the traces mix several workflows; ``workflows`` lists them.
    """

    edges: list[EdgeStats] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)

    def edge(self, from_node: str, to_node: str, workflow: str | None = None) -> EdgeStats | None:
        for e in self.edges:
            if (e.from_node, e.to_node) == (from_node, to_node) and workflow in (None, e.workflow):
                return e
        return None

    def to_dict(self) -> dict[str, Any]:
        """The summary's keys (the same as ``agentwarm run --json``'s) and ``edges``."""
        return {**super().to_dict(), "edges": [e.to_dict() for e in self.edges]}


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
    ``runs`` (the workflow spans) give the edges into END."""
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
        if p.kind != tm.KIND_SPECULATIVE:
            continue
        e = edge(p.workflow, p.source, p.target)
        e.prefetched += 1
        if p.outcome != tm.OUTCOME_HIT:
            e.wasted_tokens += p.computed_tokens
    speculated = {p.workflow for p in prefills if p.kind == tm.KIND_SPECULATIVE}
    speculated |= {s.workflow for s in steps if s.prefetched and has_previous(s)}
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
    return TraceStats(**summary.to_dict(), edges=ordered, workflows=workflows)
