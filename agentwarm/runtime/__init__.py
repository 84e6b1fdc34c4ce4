"""Running workflows: the runnable workflow, the step loop, the per-step context, prefetching
and its policy."""

from __future__ import annotations

from agentwarm.runtime.context import Context
from agentwarm.runtime.guardrail import Guardrail, Level
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.result import Outcome, PrefetchRecord, RunResult, StepRecord, summarize
from agentwarm.runtime.session import WorkflowSession
from agentwarm.runtime.transcript import Entry, Transcript
from agentwarm.runtime.workflow import Workflow, WorkflowGraph, load_workflow

__all__ = (
    "Context",
    "Entry",
    "Guardrail",
    "Level",
    "Outcome",
    "PrefetchPolicy",
    "PrefetchRecord",
    "RunResult",
    "StepRecord",
    "Transcript",
    "Workflow",
    "WorkflowGraph",
    "WorkflowSession",
    "load_workflow",
    "summarize",
)
