"""The JSON-lines span exporter: the trace files ``agentwarm run --trace`` writes and
``agentwarm stats`` reads."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ("JsonlSpanExporter", "span_to_dict")


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
