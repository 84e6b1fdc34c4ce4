"""agentwarm's tracer, meter and metric instruments, taken from the *global* OpenTelemetry
providers: an application that configured OpenTelemetry receives agentwarm's spans and metrics
with no agentwarm-specific setup; with no providers configured they are no-ops."""

from __future__ import annotations

import functools
import threading
from importlib import metadata

from opentelemetry import metrics, trace

from agentwarm._spec import StepOutcome
from agentwarm.telemetry.names import (
    AW_STEP_OUTCOME,
    AW_WORKFLOW,
    METRIC_PREFETCH_DROPPED,
    METRIC_PREFETCH_HITS,
    METRIC_PREFETCH_ISSUED,
    METRIC_PREFETCH_WASTED_TOKENS,
    METRIC_STEP_TTFT,
    TRACER_NAME,
    TTFT_BUCKETS_S,
)

__all__ = (
    "Instruments",
    "get_meter",
    "get_tracer",
    "instruments",
    "package_version",
)


@functools.cache  # read once: importlib.metadata parses the METADATA file on every call
def package_version() -> str:
    """agentwarm's installed version (the instrumentation scope's and ``service.version``)."""
    try:
        return metadata.version("agentwarm")
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def get_tracer() -> trace.Tracer:
    """agentwarm's tracer from the global provider (a no-op until a provider is configured)."""
    return trace.get_tracer(TRACER_NAME, package_version())


def get_meter() -> metrics.Meter:
    """agentwarm's meter from the global provider (a no-op until a provider is configured)."""
    return metrics.get_meter(TRACER_NAME, package_version())


class Instruments:
    """agentwarm's metric instruments, created once from :func:`get_meter`.

    Record with the workflow name as attribute ``agentwarm.workflow``; the TTFT histogram also
    takes the step's :class:`~agentwarm._spec.StepOutcome` as ``agentwarm.step.outcome``.
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

    def record_ttft(self, workflow: str, ttft_s: float, outcome: StepOutcome) -> None:
        self.step_ttft.record(ttft_s, {AW_WORKFLOW: workflow, AW_STEP_OUTCOME: str(outcome)})


_instruments: Instruments | None = None
_instruments_lock = threading.Lock()


def instruments() -> Instruments:
    """The process-wide :class:`Instruments` (created on first use from the global meter)."""
    global _instruments
    with _instruments_lock:
        if _instruments is None:
            _instruments = Instruments(get_meter())
        return _instruments
