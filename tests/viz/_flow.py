"""A small workflow with learned probabilities and one traced run, shared by the viz tests."""

from __future__ import annotations

from agentwarm import END, WorkflowGraph, node
from agentwarm.graphs import CompiledGraph
from agentwarm.stats import StepSpan, TraceStats, compute_stats
from agentwarm.viz import GraphInfo, graph_info


@node(entry=True, next=["tool", "answer"])
async def plan(ctx: object) -> str:
    return "tool"


@node(next=["plan"])
async def tool(ctx: object) -> str:
    return "plan"


@node(next=["answer", END])
async def answer(ctx: object) -> str:
    return END


def workflow() -> CompiledGraph:
    return WorkflowGraph("agent").add(plan, tool, answer).compile()


PROBS = {("plan", "tool"): 0.75, ("plan", "answer"): 0.25, ("tool", "plan"): 1.0,
         ("answer", "answer"): 0.1, ("answer", END): 0.9}  # fmt: skip


def stats(*hits: bool) -> TraceStats:
    """One run: plan → tool → plan → tool → plan → answer; ``hits`` for its steps 1..5
    (default: hit, hit, miss, hit, miss)."""
    hit = hits or (True, True, False, True, False)
    path = ["__start__", "plan", "tool", "plan", "tool", "plan", "answer"]
    steps = [
        StepSpan("agent", "r", i, path[i], path[i + 1], i > 0 and hit[i - 1], 0.1, 10, 5)
        for i in range(len(path) - 1)
    ]
    return compute_stats(steps, [])


def info() -> GraphInfo:
    """The small workflow with :data:`PROBS` and :func:`stats`."""
    return graph_info(workflow(), PROBS, stats())
