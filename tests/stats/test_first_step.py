"""A run's first step is the one that comes from START, not any node whose name starts with
``__``: a node may be called ``__b``, and the step after it still has a previous step."""

from __future__ import annotations

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.runtime import StepOutcome
from agentwarm.stats.definitions import has_previous


def _workflow() -> WorkflowGraph:
    @node(name="a", entry=True, system="A" * 64, next=["__b"])
    async def a(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=2)
        return "__b"

    @node(name="__b", system="B" * 64, next=["c"])
    async def b(ctx: Context) -> str:
        await ctx.llm("b", max_tokens=2)
        return "c"

    @node(name="c", system="C" * 64, next=[END])
    async def c(ctx: Context) -> str:
        await ctx.llm("c", max_tokens=2)
        return END

    return WorkflowGraph("underscored").add(a, b, c)


async def test_a_step_after_a_double_underscore_node_has_a_previous_step() -> None:
    workflow = _workflow().compile()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    result = await workflow.run("x", engine=engine, policy=PrefetchPolicy(enabled=False))
    assert [s.node for s in result.steps] == ["a", "__b", "c"]
    assert [has_previous(s) for s in result.steps] == [False, True, True]
    assert [s.outcome for s in result.steps] == [
        StepOutcome.NONE,
        StepOutcome.MISS,
        StepOutcome.MISS,
    ]
