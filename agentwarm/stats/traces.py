"""Reading agentwarm traces: the JSON-lines files ``agentwarm run --trace`` writes.

What the statistics (:mod:`agentwarm.stats.edges`, :mod:`agentwarm.stats.definitions`) read:

* A *step* is one ``invoke_agent {node}`` span with ``agentwarm.step.node``. Its edge is
  ``agentwarm.step.from`` → ``agentwarm.step.node``; a run's first step comes from ``__start__``.
  It was a branch hit when ``agentwarm.step.prefetched`` is true. Its mid-decode hint, if any,
  is ``agentwarm.step.hint_node`` with its lead ``agentwarm.step.hint_lead_s`` and its gain over
  reading the finished output ``agentwarm.step.hint_gain_s``.
* A *prefill* is one ``agentwarm.prefill`` span; it is a *prefetch* when
  ``agentwarm.prefill.kind`` is ``speculative``. Its edge is ``agentwarm.prefill.source`` →
  ``agentwarm.prefill.target``.
* A *run* is one ``invoke_workflow {workflow}`` span. It completed when
  ``agentwarm.run.completed`` is true; ``agentwarm.run.end_steps`` lists the indices of its
  steps that moved to END.

Readers are tolerant: lines that are not JSON, not span records, or agentwarm spans whose
attributes do not validate against their model in :mod:`agentwarm.stats.trace_schema` (a
required attribute missing, a count or index that is not an integer in 0..:data:`MAX_COUNT`, a
TTFT that is not a finite number >= 0, a probability outside 0..1, a prefill kind or outcome
that is not a :class:`~agentwarm._spec.PrefetchKind` / :class:`~agentwarm._spec.PrefetchOutcome`
value) are reported as :class:`Problem` (file, 1-based line number, what is wrong) and skipped.
Spans of other instrumentations are counted and ignored. A span seen twice (same trace and span
id, e.g. one file given twice) counts once. Both the agentwarm line format (flat
``attributes``) and OTLP/JSON export lines (``resourceSpans``) are understood.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentwarm import _jsonfile
from agentwarm._spec import MissReason, PrefetchKind, PrefetchOutcome
from agentwarm.errors import ConfigError
from agentwarm.stats.trace_schema import (
    MAX_COUNT,
    BadSpan,
    PrefillAttributes,
    RunAttributes,
    StepAttributes,
)
from agentwarm.telemetry import names as tn

__all__ = (
    "MAX_COUNT",
    "PrefillSpan",
    "Problem",
    "RunSpan",
    "StepSpan",
    "TraceData",
    "read_traces",
)


@dataclass(frozen=True, slots=True)
class StepSpan:
    """One step span (a :class:`~agentwarm.stats.definitions.StepLike`)."""

    workflow: str
    run_id: str
    index: int
    from_node: str
    node: str
    prefetched: bool
    ttft_s: float | None
    prompt_tokens: int
    cached_tokens: int
    hint_node: str | None = None
    hint_lead_s: float | None = None
    hint_gain_s: float | None = None
    miss_reason: MissReason | None = None
    """Why it missed, or (a hit) did not find its whole prefix cached; the details follow."""
    miss_cause: str | None = None
    miss_p: float | None = None
    miss_price: float | None = None
    miss_rank: int | None = None
    miss_token: int | None = None
    miss_message: int | None = None
    missing_tokens: int | None = None
    disk_cached_tokens: int | None = None
    """Of ``cached_tokens``, those loaded from the engine's disk tier; None: not split."""


@dataclass(frozen=True, slots=True)
class PrefillSpan:
    """One prefill span (a :class:`~agentwarm.stats.definitions.PrefillLike`)."""

    workflow: str
    run_id: str
    source: str
    target: str
    kind: PrefetchKind
    outcome: PrefetchOutcome | None
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
    raise BadSpan("attributes is neither an object nor an OTLP key/value list")


def _records(obj: Any) -> Iterator[dict[str, Any]]:
    """Span objects in one decoded line: an agentwarm span line or an OTLP/JSON export batch."""
    if not isinstance(obj, dict):
        raise BadSpan("not a span record (expected a JSON object)")
    if "resourceSpans" in obj:
        for rs in obj.get("resourceSpans") or []:
            for ss in rs.get("scopeSpans") or []:
                yield from ss.get("spans") or []
        return
    if not isinstance(obj.get("name"), str):
        raise BadSpan("not a span record (no 'name')")
    yield obj


def _step(attrs: dict[str, Any]) -> StepSpan:
    return StepSpan(**dict(StepAttributes.read(attrs)))


def _prefill(attrs: dict[str, Any]) -> PrefillSpan:
    return PrefillSpan(**dict(PrefillAttributes.read(attrs)))


def _run(attrs: dict[str, Any]) -> RunSpan:
    return RunSpan(**dict(RunAttributes.read(attrs)))


def _read_line(raw: bytes, data: TraceData, seen: set[tuple[str, str]]) -> None:
    try:
        obj = _jsonfile.loads(raw)
    except _jsonfile.JSONTextError as exc:
        raise BadSpan(str(exc)) from exc
    parsed: list[StepSpan | PrefillSpan | RunSpan | None] = []
    keys: list[tuple[str, str] | None] = []
    for rec in _records(obj):
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str):
            raise BadSpan("not a span record (no 'name')")
        name, attrs = rec["name"], _attrs(rec.get("attributes", {}))
        tid, sid = rec.get("traceId"), rec.get("spanId")
        keys.append((tid, sid) if isinstance(tid, str) and isinstance(sid, str) else None)
        if name == tn.SPAN_PREFILL:
            parsed.append(_prefill(attrs))
        elif name.startswith(tn.SPAN_STEP + " ") and tn.AW_STEP_NODE in attrs:
            parsed.append(_step(attrs))
        elif name.startswith(tn.SPAN_WORKFLOW + " ") and tn.AW_RUN_ID in attrs:
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
                    except (BadSpan, AttributeError, TypeError) as exc:
                        msg = str(exc) if isinstance(exc, BadSpan) else "malformed span record"
                        data.problems.append(Problem(str(path), lineno, msg))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return data
