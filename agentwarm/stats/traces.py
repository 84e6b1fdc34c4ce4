"""Reading agentwarm traces: the JSON-lines files ``agentwarm run --trace`` writes.

What the statistics (:mod:`agentwarm.stats.edges`, :mod:`agentwarm.stats.definitions`) read:

* A *step* is one ``invoke_agent {node}`` span with ``agentwarm.step.node``. Its edge is
  ``agentwarm.step.from`` → ``agentwarm.step.node``; a run's first step comes from ``__start__``.
  It was a branch hit when ``agentwarm.step.prefetched`` is true.
* A *prefill* is one ``agentwarm.prefill`` span; it is a *prefetch* when
  ``agentwarm.prefill.kind`` is ``speculative``. Its edge is ``agentwarm.prefill.source`` →
  ``agentwarm.prefill.target``.
* A *run* is one ``invoke_workflow {workflow}`` span. It completed when
  ``agentwarm.run.completed`` is true; ``agentwarm.run.end_steps`` lists the indices of its
  steps that moved to END.

Readers are tolerant: lines that are not JSON, not span records, or agentwarm spans missing
required attributes or holding a value that makes no sense (a count or index that is not an
integer in 0..:data:`MAX_COUNT`, a TTFT that is not a finite number >= 0, a probability outside
0..1) are reported as :class:`Problem` (file and 1-based line number) and skipped.
Spans of other instrumentations are counted and ignored. A span seen twice (same trace and span
id, e.g. one file given twice) counts once. Both the agentwarm line format (flat
``attributes``) and OTLP/JSON export lines (``resourceSpans``) are understood. Kind and outcome
are kept as the strings the file holds (compared with :class:`~agentwarm._spec.PrefetchKind`
and :class:`~agentwarm._spec.PrefetchOutcome`; an unknown string matches no member).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentwarm import _jsonfile
from agentwarm.errors import ConfigError
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


@dataclass(frozen=True, slots=True)
class PrefillSpan:
    """One prefill span (a :class:`~agentwarm.stats.definitions.PrefillLike`)."""

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
        workflow=str(attrs.get(tn.AW_WORKFLOW, "")),
        run_id=str(attrs.get(tn.AW_RUN_ID, "")),
        index=_int(attrs, tn.AW_STEP_INDEX) or 0,
        from_node=_str(attrs, tn.AW_STEP_FROM, "step"),
        node=_str(attrs, tn.AW_STEP_NODE, "step"),
        prefetched=_bool(attrs, tn.AW_STEP_PREFETCHED),
        ttft_s=_float(attrs, tn.AW_STEP_TTFT),
        prompt_tokens=_int(attrs, tn.AW_STEP_PROMPT_TOKENS) or 0,
        cached_tokens=_int(attrs, tn.AW_STEP_CACHED_TOKENS) or 0,
    )


def _prefill(attrs: dict[str, Any]) -> PrefillSpan:
    outcome = attrs.get(tn.AW_PREFILL_OUTCOME)
    return PrefillSpan(
        workflow=str(attrs.get(tn.AW_WORKFLOW, "")),
        run_id=str(attrs.get(tn.AW_RUN_ID, "")),
        source=_str(attrs, tn.AW_PREFILL_SOURCE, "prefill"),
        target=_str(attrs, tn.AW_PREFILL_TARGET, "prefill"),
        kind=_str(attrs, tn.AW_PREFILL_KIND, "prefill"),
        outcome=outcome if isinstance(outcome, str) else None,
        tokens=_int(attrs, tn.AW_PREFILL_TOKENS) or 0,
        computed_tokens=_int(attrs, tn.AW_PREFILL_COMPUTED_TOKENS) or 0,
        probability=_float(attrs, tn.AW_PREFILL_PROBABILITY, most=1 + _PROBABILITY_SLACK),
        rank=_int(attrs, tn.AW_PREFILL_RANK, None),
    )


def _run(attrs: dict[str, Any]) -> RunSpan:
    ends = attrs.get(tn.AW_RUN_END_STEPS) or []
    if not isinstance(ends, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ends
    ):
        raise _BadSpan(f"'{tn.AW_RUN_END_STEPS}' is not a list of step indices: {ends!r:.40}")
    return RunSpan(
        workflow=str(attrs.get(tn.AW_WORKFLOW, "")),
        run_id=_str(attrs, tn.AW_RUN_ID, "workflow"),
        completed=_bool(attrs, tn.AW_RUN_COMPLETED),
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
                    except (_BadSpan, AttributeError, TypeError) as exc:
                        msg = str(exc) if isinstance(exc, _BadSpan) else "malformed span record"
                        data.problems.append(Problem(str(path), lineno, msg))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return data
