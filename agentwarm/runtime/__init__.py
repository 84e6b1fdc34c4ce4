"""Running workflows: the runnable workflow, the step loop, the per-step context, prefetching
and its policy."""

from __future__ import annotations

from agentwarm._spec import PrefetchKind, PrefetchOutcome, StepOutcome
from agentwarm.runtime.context import Context
from agentwarm.runtime.guardrail import CalibratedGuardrail, Guardrail, Level
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.records import PrefetchRecord, StepRecord
from agentwarm.runtime.result import RunResult, summarize
from agentwarm.runtime.session import WorkflowSession
from agentwarm.runtime.transcript import Entry, Transcript
from agentwarm.runtime.workflow import Workflow, WorkflowGraph, load_workflow

__all__ = (
    "CalibratedGuardrail",
    "Context",
    "Entry",
    "Guardrail",
    "Level",
    "PrefetchKind",
    "PrefetchOutcome",
    "PrefetchPolicy",
    "PrefetchRecord",
    "RunResult",
    "StepOutcome",
    "StepRecord",
    "Transcript",
    "Workflow",
    "WorkflowGraph",
    "WorkflowSession",
    "load_workflow",
    "summarize",
)
