"""OpenTelemetry spans and metrics for agentwarm: names, attribute keys, tracer, exporters.

Every span name and attribute key agentwarm emits is a constant here (tested in
``tests/test_telemetry.py``). Spans follow the OpenTelemetry GenAI semantic conventions where they
define a name; agentwarm's own attributes live under ``agentwarm.*``, never ``gen_ai.*``.

Span tree of one workflow run::

    invoke_workflow {workflow}          INTERNAL  gen_ai.operation.name=invoke_workflow;
    │                                             agentwarm.run.completed/end_steps when it ends
    ├── invoke_agent {node}             INTERNAL  one per step; agentwarm.step.*
    │   ├── text_completion {model}     CLIENT (SGLang) / INTERNAL (embedded engine); gen_ai.usage.*
    │   └── agentwarm.prefill           INTERNAL  one per prefill issued during this step
    └── ...

GenAI conventions followed: the current (2025) names. ``gen_ai.provider.name`` replaced the
deprecated ``gen_ai.system`` (semconv 1.37), and the workflow span carries its name in
``gen_ai.agent.name`` (the GenAI repository merged ``gen_ai.workflow.name`` into it).

Rules for callers:

* Get the tracer with :func:`get_tracer` and the meter with :func:`get_meter`. Both use the
  *global* OpenTelemetry providers, so an application that configured OpenTelemetry receives
  agentwarm's spans with no agentwarm-specific setup; with no providers configured they are no-ops.
* Only the process owner (the CLI, a benchmark) calls :func:`configure`; it may be called any
  number of times in one process, each returned :class:`Telemetry` must be ``shutdown()``.
* Prompt and completion text is recorded only when :func:`capture_content` is true (environment
  ``AGENTWARM_CAPTURE_CONTENT=1`` or OpenTelemetry's
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; off by default).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.types import AttributeValue

from agentwarm.errors import ConfigError

__all__ = (
    "AW_PREFILL_COMPUTED_TOKENS",
    "AW_PREFILL_KIND",
    "AW_PREFILL_OUTCOME",
    "AW_PREFILL_PROBABILITY",
    "AW_PREFILL_RANK",
    "AW_PREFILL_SOURCE",
    "AW_PREFILL_TARGET",
    "AW_PREFILL_TOKENS",
    "AW_RUN_COMPLETED",
    "AW_RUN_END_STEPS",
    "AW_RUN_ID",
    "AW_STEP_CACHED_TOKENS",
    "AW_STEP_FROM",
    "AW_STEP_INDEX",
    "AW_STEP_NODE",
    "AW_STEP_OUTCOME",
    "AW_STEP_PREFETCHED",
    "AW_STEP_PROMPT_TOKENS",
    "AW_STEP_TTFT",
    "AW_WORKFLOW",
    "CAPTURE_CONTENT_ENV",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MAX_TOKENS",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_REQUEST_TEMPERATURE",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "KIND_CONFIRMED",
    "KIND_SPECULATIVE",
    "METRIC_PREFETCH_DROPPED",
    "METRIC_PREFETCH_HITS",
    "METRIC_PREFETCH_ISSUED",
    "METRIC_PREFETCH_WASTED_TOKENS",
    "METRIC_STEP_TTFT",
    "OP_INVOKE_AGENT",
    "OP_INVOKE_WORKFLOW",
    "OP_TEXT_COMPLETION",
    "OUTCOME_CANCELLED",
    "OUTCOME_DROPPED",
    "OUTCOME_FAILED",
    "OUTCOME_HIT",
    "OUTCOME_WASTED",
    "PREFILL_OUTCOMES",
    "PROVIDER_LOCAL",
    "PROVIDER_SGLANG",
    "RECORD_CONTENT",
    "SPAN_LLM",
    "SPAN_PREFILL",
    "SPAN_STEP",
    "SPAN_WORKFLOW",
    "STEP_HIT",
    "STEP_MISS",
    "STEP_NONE",
    "TRACER_NAME",
    "TTFT_BUCKETS_S",
    "Instruments",
    "JsonlSpanExporter",
    "Telemetry",
    "capture_content",
    "capture_spans",
    "configure",
    "get_meter",
    "get_tracer",
    "instruments",
    "llm_request_attributes",
    "llm_response_attributes",
    "llm_span_name",
    "prefill_attributes",
    "span_to_dict",
    "step_attributes",
    "step_result_attributes",
    "step_span_name",
    "workflow_attributes",
    "workflow_result_attributes",
    "workflow_span_name",
)

TRACER_NAME = "agentwarm"

# --- span names -------------------------------------------------------------------------------
SPAN_WORKFLOW = "invoke_workflow"
SPAN_STEP = "invoke_agent"
SPAN_LLM = "text_completion"
SPAN_PREFILL = "agentwarm.prefill"

# --- gen_ai.operation.name values -------------------------------------------------------------
OP_INVOKE_WORKFLOW = "invoke_workflow"
OP_INVOKE_AGENT = "invoke_agent"
OP_TEXT_COMPLETION = "text_completion"

# --- GenAI semantic-convention attribute keys ---------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"

PROVIDER_LOCAL = "agentwarm.local"
PROVIDER_SGLANG = "sglang"

# --- agentwarm attribute keys ------------------------------------------------------------------
AW_WORKFLOW = "agentwarm.workflow"
AW_RUN_ID = "agentwarm.run.id"
AW_RUN_COMPLETED = "agentwarm.run.completed"
"""True on the workflow span of a run that reached END; absent when it failed or was cancelled."""
AW_RUN_END_STEPS = "agentwarm.run.end_steps"
"""Indices (:data:`AW_STEP_INDEX`) of the steps that moved to END; set with
:data:`AW_RUN_COMPLETED` (several when fan-out branches each end the run)."""
AW_STEP_INDEX = "agentwarm.step.index"
"""0-based index of the step within its run."""
AW_STEP_FROM = "agentwarm.step.from"
"""The previous step's node, or :data:`agentwarm._spec.START` for a run's first step."""
AW_STEP_NODE = "agentwarm.step.node"
AW_STEP_PREFETCHED = "agentwarm.step.prefetched"
"""True when this node was speculatively prefetched during the previous step (a branch hit)."""
AW_STEP_OUTCOME = "agentwarm.step.outcome"
"""``hit`` | ``miss`` | ``none``: see :data:`STEP_HIT`. Also the TTFT histogram's attribute."""
AW_STEP_TTFT = "agentwarm.step.ttft_s"
"""TTFT in seconds of the step's first LLM call; absent when the step made no LLM call."""
AW_STEP_PROMPT_TOKENS = "agentwarm.step.prompt_tokens"
"""Prompt tokens of the step's first LLM call."""
AW_STEP_CACHED_TOKENS = "agentwarm.step.cached_tokens"
"""Prompt tokens of the step's first LLM call served from the prefix cache."""
AW_PREFILL_SOURCE = "agentwarm.prefill.source"
"""The node whose step issued the prefill."""
AW_PREFILL_TARGET = "agentwarm.prefill.target"
AW_PREFILL_PROBABILITY = "agentwarm.prefill.probability"
AW_PREFILL_RANK = "agentwarm.prefill.rank"
"""Position in the predictor's ranking, 0 = the most likely candidate."""
AW_PREFILL_TOKENS = "agentwarm.prefill.tokens"
"""Length of the prefix sent to the engine."""
AW_PREFILL_COMPUTED_TOKENS = "agentwarm.prefill.computed_tokens"
"""Tokens the engine computed for this prefill (the rest were already cached)."""
AW_PREFILL_OUTCOME = "agentwarm.prefill.outcome"
AW_PREFILL_KIND = "agentwarm.prefill.kind"

OUTCOME_HIT = "hit"
"""The target was the actual next node and its real request used the prefix."""
OUTCOME_WASTED = "wasted"
"""The prefill finished but its target was not taken."""
OUTCOME_CANCELLED = "cancelled"
"""The prefill was stopped before it finished: its target lost, the run ended, or admission gave
its slot to a likelier prefill."""
OUTCOME_FAILED = "failed"
"""The engine failed the prefill."""
OUTCOME_DROPPED = "dropped"
"""Admission refused the prefill (over the engine's speculative rate or budget): nothing of it
reached the engine. Not counted as issued."""
PREFILL_OUTCOMES = (OUTCOME_HIT, OUTCOME_WASTED, OUTCOME_CANCELLED, OUTCOME_FAILED, OUTCOME_DROPPED)

KIND_SPECULATIVE = "speculative"
"""A guess issued while the previous step runs: counts as a prefetch."""
KIND_CONFIRMED = "confirmed"
"""Warming of the actual next node once it is known: not speculation, not a prefetch."""

STEP_HIT = "hit"
"""The step's node was speculatively prefetched during the previous step."""
STEP_MISS = "miss"
"""The step has a previous step and its node was not speculatively prefetched during it."""
STEP_NONE = "none"
"""The run's first step: there was no previous step to prefetch it."""

# --- metric names -----------------------------------------------------------------------------
METRIC_PREFETCH_ISSUED = "agentwarm.prefetch.issued"
METRIC_PREFETCH_HITS = "agentwarm.prefetch.hits"
METRIC_PREFETCH_DROPPED = "agentwarm.prefetch.dropped"
METRIC_PREFETCH_WASTED_TOKENS = "agentwarm.prefetch.wasted_tokens"
METRIC_STEP_TTFT = "agentwarm.step.ttft"

TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0
)  # fmt: skip
"""Bucket bounds of the TTFT histogram (those of the GenAI ``time_to_first_token`` metric)."""

CAPTURE_CONTENT_ENV = "AGENTWARM_CAPTURE_CONTENT"
_OTEL_CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_TRUTHY = frozenset({"1", "true", "yes", "on"})


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUTHY


def capture_content() -> bool:
    """Whether prompt and completion text may be recorded on spans (read at call time)."""
    return _env_flag(CAPTURE_CONTENT_ENV) or _env_flag(_OTEL_CAPTURE_CONTENT_ENV)


RECORD_CONTENT: bool = capture_content()
"""The value of :func:`capture_content` at import; prefer calling the function."""


@functools.cache  # read once: importlib.metadata parses the METADATA file on every call
def _version() -> str:
    try:
        return metadata.version("agentwarm")
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


# --- span names and attribute builders ------------------------------------------------------------


def workflow_span_name(workflow: str) -> str:
    return f"{SPAN_WORKFLOW} {workflow}"


def step_span_name(node: str) -> str:
    return f"{SPAN_STEP} {node}"


def llm_span_name(model: str) -> str:
    return f"{SPAN_LLM} {model}"


def workflow_attributes(workflow: str, run_id: str) -> dict[str, AttributeValue]:
    """Attributes of the ``invoke_workflow`` span, set at its start."""
    return {
        GEN_AI_OPERATION_NAME: OP_INVOKE_WORKFLOW,
        GEN_AI_AGENT_NAME: workflow,
        AW_WORKFLOW: workflow,
        AW_RUN_ID: run_id,
    }


def workflow_result_attributes(end_steps: Sequence[int]) -> dict[str, AttributeValue]:
    """Attributes of the ``invoke_workflow`` span of a run that completed (reached END), set at
    its end; ``end_steps`` are the indices of the steps that moved to END."""
    return {AW_RUN_COMPLETED: True, AW_RUN_END_STEPS: list(end_steps)}


def step_attributes(
    *,
    workflow: str,
    run_id: str,
    index: int,
    from_node: str,
    node: str,
    prefetched: bool,
    outcome: str,
) -> dict[str, AttributeValue]:
    """Attributes of an ``invoke_agent`` step span, known at its start.

    ``from_node`` is the previous step's node (:data:`agentwarm._spec.START` for the first
    step); ``prefetched`` and ``outcome`` (:data:`STEP_HIT` / :data:`STEP_MISS` /
    :data:`STEP_NONE`) describe what the previous step speculatively prefilled.
    """
    return {
        GEN_AI_OPERATION_NAME: OP_INVOKE_AGENT,
        GEN_AI_AGENT_NAME: node,
        AW_WORKFLOW: workflow,
        AW_RUN_ID: run_id,
        AW_STEP_INDEX: index,
        AW_STEP_FROM: from_node,
        AW_STEP_NODE: node,
        AW_STEP_PREFETCHED: prefetched,
        AW_STEP_OUTCOME: outcome,
    }


def step_result_attributes(
    *, ttft_s: float | None, prompt_tokens: int, cached_tokens: int
) -> dict[str, AttributeValue]:
    """Attributes of a step span known at its end; TTFT is left out when no LLM call was made."""
    attrs: dict[str, AttributeValue] = {
        AW_STEP_PROMPT_TOKENS: prompt_tokens,
        AW_STEP_CACHED_TOKENS: cached_tokens,
    }
    if ttft_s is not None:
        attrs[AW_STEP_TTFT] = ttft_s
    return attrs


def llm_request_attributes(
    *,
    model: str,
    provider: str,
    max_tokens: int,
    temperature: float,
    agent: str | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of a ``text_completion`` span, known before the request is sent."""
    attrs: dict[str, AttributeValue] = {
        GEN_AI_OPERATION_NAME: OP_TEXT_COMPLETION,
        GEN_AI_REQUEST_MODEL: model,
        GEN_AI_PROVIDER_NAME: provider,
        GEN_AI_REQUEST_MAX_TOKENS: max_tokens,
        GEN_AI_REQUEST_TEMPERATURE: temperature,
    }
    if agent is not None:
        attrs[GEN_AI_AGENT_NAME] = agent
    return attrs


def llm_response_attributes(
    *,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
    finish_reason: str | None,
    ttft_s: float | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of a ``text_completion`` span known once the response is complete."""
    attrs: dict[str, AttributeValue] = {
        GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
        GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: cached_tokens,
    }
    if finish_reason is not None:
        attrs[GEN_AI_RESPONSE_FINISH_REASONS] = (finish_reason,)
    if ttft_s is not None:
        attrs[AW_STEP_TTFT] = ttft_s
    return attrs


def prefill_attributes(
    *,
    workflow: str,
    run_id: str,
    source: str,
    target: str,
    kind: str,
    tokens: int,
    probability: float | None = None,
    rank: int | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of an ``agentwarm.prefill`` span known when it is issued.

    Set :data:`AW_PREFILL_OUTCOME` (one of :data:`PREFILL_OUTCOMES`) and
    :data:`AW_PREFILL_COMPUTED_TOKENS` before ending the span; every prefill span must end with an
    outcome. ``probability`` and ``rank`` are given for speculative prefills.
    """
    attrs: dict[str, AttributeValue] = {
        AW_WORKFLOW: workflow,
        AW_RUN_ID: run_id,
        AW_PREFILL_SOURCE: source,
        AW_PREFILL_TARGET: target,
        AW_PREFILL_KIND: kind,
        AW_PREFILL_TOKENS: tokens,
    }
    if probability is not None:
        attrs[AW_PREFILL_PROBABILITY] = probability
    if rank is not None:
        attrs[AW_PREFILL_RANK] = rank
    return attrs


# --- tracer, meter, instruments -----------------------------------------------------------------


def get_tracer() -> trace.Tracer:
    """agentwarm's tracer from the global provider (a no-op until a provider is configured)."""
    return trace.get_tracer(TRACER_NAME, _version())


def get_meter() -> metrics.Meter:
    """agentwarm's meter from the global provider (a no-op until a provider is configured)."""
    return metrics.get_meter(TRACER_NAME, _version())


class Instruments:
    """agentwarm's metric instruments, created once from :func:`get_meter`.

    Record with the workflow name as attribute :data:`AW_WORKFLOW`; the TTFT histogram also takes
    :data:`AW_STEP_OUTCOME` (:data:`STEP_HIT` / :data:`STEP_MISS` / :data:`STEP_NONE`).
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self.prefetch_issued = meter.create_counter(
            METRIC_PREFETCH_ISSUED, unit="{prefetch}", description="Speculative prefills issued"
        )
        self.prefetch_hits = meter.create_counter(
            METRIC_PREFETCH_HITS,
            unit="{prefetch}",
            description="Speculative prefills whose target was the actual next step",
        )
        self.wasted_tokens = meter.create_counter(
            METRIC_PREFETCH_WASTED_TOKENS,
            unit="{token}",
            description="Tokens computed by speculative prefills that were never used",
        )
        self.prefetch_dropped = meter.create_counter(
            METRIC_PREFETCH_DROPPED,
            unit="{prefetch}",
            description="Speculative prefills dropped by admission (engine rate or budget)",
        )
        self.step_ttft = meter.create_histogram(
            METRIC_STEP_TTFT,
            unit="s",
            description="Time to first token of a step's first LLM call, by prefetch outcome",
            explicit_bucket_boundaries_advisory=TTFT_BUCKETS_S,
        )

    def record_issued(self, workflow: str, n: int = 1) -> None:
        self.prefetch_issued.add(n, {AW_WORKFLOW: workflow})

    def record_hit(self, workflow: str) -> None:
        self.prefetch_hits.add(1, {AW_WORKFLOW: workflow})

    def record_dropped(self, workflow: str) -> None:
        self.prefetch_dropped.add(1, {AW_WORKFLOW: workflow})

    def record_wasted(self, workflow: str, tokens: int) -> None:
        if tokens > 0:
            self.wasted_tokens.add(tokens, {AW_WORKFLOW: workflow})

    def record_ttft(self, workflow: str, ttft_s: float, outcome: str) -> None:
        self.step_ttft.record(ttft_s, {AW_WORKFLOW: workflow, AW_STEP_OUTCOME: outcome})


_instruments: Instruments | None = None
_instruments_lock = threading.Lock()


def instruments() -> Instruments:
    """The process-wide :class:`Instruments` (created on first use from the global meter)."""
    global _instruments
    with _instruments_lock:
        if _instruments is None:
            _instruments = Instruments(get_meter())
        return _instruments


# --- JSON-lines exporter ------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    return value


def _flat(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: _json_value(v) for k, v in (attributes or {}).items()}


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    """A finished span as an OTLP-like JSON object (the line format of :class:`JsonlSpanExporter`).

    Ids are lowercase hex; ``parentSpanId`` is ``null`` for a root span; ``kind`` and
    ``status.code`` use the OTLP enum names; times are integers in ns since the epoch;
    ``attributes`` and ``resource`` are flat objects.
    """
    ctx = span.get_span_context()
    parent = span.parent
    status = span.status
    return {
        "traceId": format(ctx.trace_id, "032x") if ctx else None,
        "spanId": format(ctx.span_id, "016x") if ctx else None,
        "parentSpanId": format(parent.span_id, "016x") if parent else None,
        "name": span.name,
        "kind": f"SPAN_KIND_{span.kind.name}",
        "startTimeUnixNano": span.start_time,
        "endTimeUnixNano": span.end_time,
        "attributes": _flat(span.attributes),
        "events": [
            {"name": e.name, "timeUnixNano": e.timestamp, "attributes": _flat(e.attributes)}
            for e in span.events
        ],
        "status": {
            "code": f"STATUS_CODE_{status.status_code.name}",
            **({"message": status.description} if status.description else {}),
        },
        "resource": _flat(span.resource.attributes),
        "scope": {
            "name": span.instrumentation_scope.name if span.instrumentation_scope else "",
            "version": (span.instrumentation_scope.version or "")
            if span.instrumentation_scope
            else "",
        },
    }


class JsonlSpanExporter(SpanExporter):
    """Appends finished spans to a file, one JSON object per line (see :func:`span_to_dict`).

    The file is opened (created if needed) at construction, so a bad path fails early with
    ``OSError``. Each batch is written under a lock and flushed; safe to share between threads.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_to_dict(s), default=str) + "\n" for s in spans)
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            try:
                self._file.write(lines)
                self._file.flush()
            except OSError:
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


# --- provider setup -----------------------------------------------------------------------------


class _SwitchSpanProcessor(SpanProcessor):
    """Forwards to a changeable set of processors: lets one global provider serve many configs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._children: tuple[SpanProcessor, ...] = ()

    def add(self, processor: SpanProcessor) -> None:
        with self._lock:
            self._children = (*self._children, processor)

    def remove(self, processor: SpanProcessor) -> None:
        with self._lock:
            self._children = tuple(p for p in self._children if p is not processor)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for p in self._children:
            p.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for p in self._children:
            p.on_end(span)

    def shutdown(self) -> None:
        children, self._children = self._children, ()
        for p in children:
            p.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self._children)


class _SwitchMetricExporter(MetricExporter):
    """Forwards metric batches to a changeable set of exporters (cumulative temporality)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._children: tuple[MetricExporter, ...] = ()

    def add(self, exporter: MetricExporter) -> None:
        with self._lock:
            self._children = (*self._children, exporter)

    def remove(self, exporter: MetricExporter) -> None:
        with self._lock:
            self._children = tuple(e for e in self._children if e is not exporter)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        ok = True
        for e in self._children:
            result = e.export(metrics_data, timeout_millis=timeout_millis)
            ok = result is MetricExportResult.SUCCESS and ok
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return all(e.force_flush(timeout_millis) for e in self._children)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        children, self._children = self._children, ()
        for e in children:
            e.shutdown()


@dataclass
class _Global:
    lock: threading.Lock = field(default_factory=threading.Lock)
    span_switch: _SwitchSpanProcessor | None = None
    span_host: object | None = None
    metric_switch: _SwitchMetricExporter | None = None
    meter_provider: MeterProvider | None = None


_global = _Global()


def _resource() -> Resource:
    return Resource.create({"service.name": TRACER_NAME, "service.version": _version()})


def _span_switch() -> _SwitchSpanProcessor:
    """The switch processor attached to the global tracer provider, installing one if needed."""
    with _global.lock:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            provider = TracerProvider(resource=_resource())
            trace.set_tracer_provider(provider)
            provider = trace.get_tracer_provider()
        if _global.span_switch is not None and _global.span_host is provider:
            return _global.span_switch
        add = getattr(provider, "add_span_processor", None)
        if add is None:
            raise ConfigError(
                f"the global OpenTelemetry tracer provider ({type(provider).__name__}) does not "
                "accept span processors; configure exporters on it instead of through agentwarm"
            )
        switch = _SwitchSpanProcessor()
        add(switch)
        _global.span_switch, _global.span_host = switch, provider
        return switch


def _meter_provider_unset() -> bool:
    try:
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:  # pragma: no cover - private API moved; assume the app owns one
        return False
    return isinstance(metrics.get_meter_provider(), _ProxyMeterProvider)


def _metric_switch() -> _SwitchMetricExporter | None:
    """The switch exporter behind agentwarm's global meter provider; None if the app owns one."""
    with _global.lock:
        if _global.metric_switch is not None:
            return _global.metric_switch
        if not _meter_provider_unset():
            return None
        switch = _SwitchMetricExporter()
        provider = MeterProvider(
            metric_readers=[PeriodicExportingMetricReader(switch)], resource=_resource()
        )
        metrics.set_meter_provider(provider)
        _global.metric_switch, _global.meter_provider = switch, provider
        return switch


def _otlp_exporters(endpoint: str) -> tuple[SpanExporter, MetricExporter]:
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ConfigError(
            "--otlp needs the OTLP exporter, which is not installed: pip install 'agentwarm[otlp]'"
        ) from exc
    base = endpoint.rstrip("/")
    return (
        OTLPSpanExporter(endpoint=f"{base}/v1/traces"),
        OTLPMetricExporter(endpoint=f"{base}/v1/metrics"),
    )


class _Stderr:
    """Writes to whatever ``sys.stderr`` is at write time (so test runners can capture it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class Telemetry:
    """Handle on the exporters one :func:`configure` call attached; ``shutdown()`` detaches them.

    Spans ended before ``shutdown()`` returns are written; spans ended after it are not.
    """

    def __init__(
        self,
        span_processors: Sequence[SpanProcessor],
        metric_exporters: Sequence[MetricExporter],
        trace_file: Path | None,
    ) -> None:
        self.trace_file = trace_file
        self._span_processors = tuple(span_processors)
        self._metric_exporters = tuple(metric_exporters)
        self._closed = False

    def force_flush(self) -> bool:
        ok = all(p.force_flush() for p in self._span_processors)
        if self._metric_exporters and _global.meter_provider is not None:
            ok = _global.meter_provider.force_flush() and ok
        return ok

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.force_flush()
        switch, mswitch = _global.span_switch, _global.metric_switch
        for p in self._span_processors:
            if switch is not None:
                switch.remove(p)
            p.shutdown()
        for e in self._metric_exporters:
            if mswitch is not None:
                mswitch.remove(e)
            e.shutdown()

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def configure(
    trace_file: Path | None = None,
    console: bool = False,
    otlp_endpoint: str | None = None,
) -> Telemetry:
    """Export agentwarm's spans (and metrics) from this process; for the CLI and benchmarks.

    Installs an SDK tracer provider (and meter provider) as the global one unless the application
    already set its own tracer provider, in which case the exporters are added to it. May be
    called repeatedly; call ``shutdown()`` on each handle. ``trace_file`` receives JSON lines
    (appended); ``console`` prints spans and metrics to stderr (stdout stays free for results);
    ``otlp_endpoint`` is an OTLP/HTTP base URL such as ``http://localhost:4318`` (needs
    ``pip install 'agentwarm[otlp]'``).

    Raises :class:`ConfigError` when the trace file cannot be opened or OTLP is not installed.
    """
    span_exporters: list[tuple[SpanExporter, bool]] = []
    metric_exporters: list[MetricExporter] = []
    if otlp_endpoint:
        span_exp, metric_exp = _otlp_exporters(otlp_endpoint)
        span_exporters.append((span_exp, True))
        metric_exporters.append(metric_exp)
    if trace_file is not None:
        try:
            span_exporters.append((JsonlSpanExporter(trace_file), True))
        except OSError as exc:
            raise ConfigError(f"cannot write trace file {trace_file}: {exc.strerror}") from exc
    if console:
        span_exporters.append((ConsoleSpanExporter(out=_Stderr()), False))  # type: ignore[arg-type]
        metric_exporters.append(ConsoleMetricExporter(out=_Stderr()))  # type: ignore[arg-type]

    processors: list[SpanProcessor] = []
    if span_exporters:
        switch = _span_switch()
        for exporter, batched in span_exporters:
            proc = BatchSpanProcessor(exporter) if batched else SimpleSpanProcessor(exporter)
            switch.add(proc)
            processors.append(proc)
    attached: list[MetricExporter] = []
    if metric_exporters:
        mswitch = _metric_switch()
        if mswitch is not None:
            for e in metric_exporters:
                mswitch.add(e)
                attached.append(e)
    return Telemetry(processors, attached, trace_file)


@contextlib.contextmanager
def capture_spans() -> Iterator[InMemorySpanExporter]:
    """Collect agentwarm's spans in memory while the block runs (for tests).

    Uses the same global provider as :func:`configure`; spans are available from the yielded
    exporter's ``get_finished_spans()`` as soon as they end.
    """
    exporter = InMemorySpanExporter()
    proc = SimpleSpanProcessor(exporter)
    switch = _span_switch()
    switch.add(proc)
    try:
        yield exporter
    finally:
        switch.remove(proc)
