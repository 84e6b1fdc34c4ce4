"""agentwarm: speculative prefix-cache prefetching for LLM agent workflows.

Decorate steps with :func:`node`, collect them into a :class:`WorkflowGraph`, compile it into a
:class:`Workflow`, and run it on an engine; while one step runs, the likely next steps' prompts
are prefilled into the engine's prefix cache so their time-to-first-token shrinks to a short
suffix.

The engines (:class:`FakeEngine`, :class:`LocalEngine`, :class:`SGLangEngine`,
:class:`VLLMEngine`, :class:`MultiWorkerEngine`) and the explicit warms (:func:`warm`,
:class:`Debouncer`) are imported on first use (PEP 562), so ``import agentwarm`` imports
neither torch nor an HTTP client. Types for writing an engine (``Engine``, ``Completion``,
``PrefillResult``, ``Priority``) are in :mod:`agentwarm.engines`; ``NodeSpec`` is what
:func:`node` returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentwarm._spec import END, START
from agentwarm.errors import (
    AgentwarmError,
    ConfigError,
    ContextLengthExceeded,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    GraphValidationError,
    InvalidRequest,
    MaxStepsExceeded,
    NodeError,
    PredictorStateError,
    RequestAborted,
    StepTimeout,
    WorkflowError,
)
from agentwarm.graphs import node
from agentwarm.runtime import (
    Context,
    PrefetchPolicy,
    RunResult,
    StepRecord,
    Workflow,
    WorkflowGraph,
    load_workflow,
)

if TYPE_CHECKING:
    from agentwarm.engines.fake import FakeEngine
    from agentwarm.engines.local import LocalEngine
    from agentwarm.engines.routing import MultiWorkerEngine
    from agentwarm.engines.sglang import SGLangEngine
    from agentwarm.engines.vllm import VLLMEngine
    from agentwarm.warmup.debounce import Debouncer
    from agentwarm.warmup.explicit import warm

__version__ = "0.1.0"

__all__ = (
    "END",
    "START",
    "AgentwarmError",
    "ConfigError",
    "Context",
    "ContextLengthExceeded",
    "Debouncer",
    "EngineError",
    "EngineTimeout",
    "EngineUnavailable",
    "FakeEngine",
    "GraphValidationError",
    "InvalidRequest",
    "LocalEngine",
    "MaxStepsExceeded",
    "MultiWorkerEngine",
    "NodeError",
    "PredictorStateError",
    "PrefetchPolicy",
    "RequestAborted",
    "RunResult",
    "SGLangEngine",
    "StepRecord",
    "StepTimeout",
    "VLLMEngine",
    "Workflow",
    "WorkflowError",
    "WorkflowGraph",
    "__version__",
    "load_workflow",
    "node",
    "warm",
)

#: The engines, imported on first use: name -> module.
_LAZY = {
    "FakeEngine": "agentwarm.engines.fake",
    "LocalEngine": "agentwarm.engines.local",
    "MultiWorkerEngine": "agentwarm.engines.routing",
    "SGLangEngine": "agentwarm.engines.sglang",
    "VLLMEngine": "agentwarm.engines.vllm",
    "Debouncer": "agentwarm.warmup.debounce",
    "warm": "agentwarm.warmup.explicit",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
