"""agentwarm: speculative prefix-cache prefetching for LLM agent workflows.

Decorate steps with :func:`node`, collect them into a :class:`Workflow`, and run it on an
engine; while one step runs, the likely next steps' prompts are prefilled into the engine's
prefix cache so their time-to-first-token shrinks to a short suffix.
"""

from __future__ import annotations

from agentwarm._spec import END, START, NodeSpec
from agentwarm.engines.base import Completion, Engine, PrefillResult, Priority
from agentwarm.engines.fake import FakeEngine
from agentwarm.errors import AgentwarmError, GraphValidationError
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

__version__ = "0.1.0"

__all__ = (
    "END",
    "START",
    "AgentwarmError",
    "Completion",
    "Context",
    "Engine",
    "FakeEngine",
    "GraphValidationError",
    "NodeSpec",
    "PrefetchPolicy",
    "PrefillResult",
    "Priority",
    "RunResult",
    "StepRecord",
    "Workflow",
    "WorkflowGraph",
    "__version__",
    "load_workflow",
    "node",
)
