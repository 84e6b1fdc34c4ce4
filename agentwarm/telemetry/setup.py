"""Exporting agentwarm's spans and metrics from a process, and whether message text is recorded.

Rules for callers:

* Only the process owner (the CLI, a benchmark) calls :func:`configure`; it may be called any
  number of times in one process, each returned :class:`Telemetry` must be ``shutdown()``.
  Library code takes the tracer and meter from :mod:`agentwarm.telemetry.instrumentation`.
* Prompt and completion text is recorded only when :func:`capture_content` is true (environment
  ``AGENTWARM_CAPTURE_CONTENT=1`` or OpenTelemetry's
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; off by default).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentwarm.errors import ConfigError
from agentwarm.telemetry.instrumentation import package_version
from agentwarm.telemetry.jsonl import JsonlSpanExporter
from agentwarm.telemetry.names import TRACER_NAME

__all__ = (
    "CAPTURE_CONTENT_ENV",
    "Telemetry",
    "capture_content",
    "capture_spans",
    "configure",
)

CAPTURE_CONTENT_ENV = "AGENTWARM_CAPTURE_CONTENT"
_OTEL_CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_TRUTHY = frozenset({"1", "true", "yes", "on"})


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUTHY


def capture_content() -> bool:
    """Whether prompt and completion text may be recorded on spans (read at call time)."""
    return _env_flag(CAPTURE_CONTENT_ENV) or _env_flag(_OTEL_CAPTURE_CONTENT_ENV)


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
    return Resource.create({"service.name": TRACER_NAME, "service.version": package_version()})


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
