"""OpenTelemetry spans and metrics for agentwarm.

Span tree of one workflow run::

    invoke_workflow {workflow}          INTERNAL  gen_ai.operation.name=invoke_workflow;
    │                                             agentwarm.run.completed/end_steps when it ends
    ├── invoke_agent {node}             INTERNAL  one per step; agentwarm.step.*
    │   ├── text_completion {model}     CLIENT (SGLang) / INTERNAL (embedded engine); gen_ai.usage.*
    │   └── agentwarm.prefill           INTERNAL  one per prefill issued during this step
    └── ...

Where each thing lives:

* :mod:`~agentwarm.telemetry.names`: every span name, attribute key and metric name;
* :mod:`~agentwarm.telemetry.attributes`: span names and the attributes each span carries;
* :mod:`~agentwarm.telemetry.instrumentation`: the tracer, the meter and the metric instruments,
  from the *global* providers (no-ops until a provider is configured);
* :mod:`~agentwarm.telemetry.jsonl`: the JSON-lines span exporter (trace files);
* :mod:`~agentwarm.telemetry.setup`: :func:`configure` (for the process owner: the CLI, a
  benchmark), :func:`capture_spans` (tests) and :func:`capture_content`.

``__all__`` is the user-facing surface. The names, builders and instruments of the modules above
are re-exported here too, for the library's own callers (``from agentwarm import telemetry as
tm``; ``tm.AW_STEP_TTFT``, ``tm.step_attributes(...)``).
"""

from __future__ import annotations

from agentwarm.telemetry.attributes import *  # noqa: F403  (re-exported for the library)
from agentwarm.telemetry.instrumentation import *  # noqa: F403  (re-exported for the library)
from agentwarm.telemetry.jsonl import JsonlSpanExporter, span_to_dict
from agentwarm.telemetry.names import *  # noqa: F403  (re-exported for the library)
from agentwarm.telemetry.setup import (
    CAPTURE_CONTENT_ENV,
    Telemetry,
    capture_content,
    capture_spans,
    configure,
)

__all__ = (
    "CAPTURE_CONTENT_ENV",
    "JsonlSpanExporter",
    "Telemetry",
    "capture_content",
    "capture_spans",
    "configure",
    "span_to_dict",
)
