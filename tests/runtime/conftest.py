from __future__ import annotations

import asyncio
import random

import pytest

from agentwarm import END, Context, FakeEngine, WorkflowGraph, node
from tests.waiting import step_prefetches_done

SYSTEM = {
    name: f"You are the {name} agent. " + " ".join(f"rule {i} for {name}." for i in range(40))
    for name in ("a", "b", "c", "d")
}
#: True transition distribution out of node a.
P_FROM_A = {"b": 0.7, "c": 0.2, "d": 0.1}


def make_branching(think_s: float = 0.02, *, until_prefetched: bool = False):
    """a -> {b, c, d} drawn from P_FROM_A with a per-run seed in ctx.state; b/c/d -> END.

    a's tool time is ``think_s`` (simulated work: no assertion may rely on what the engine
    finishes in it), or, with ``until_prefetched``, lasts until a's prefetches have finished.
    """

    @node(name="a", entry=True, system=SYSTEM["a"], next=["b", "c", "d"])
    async def a(ctx: Context) -> str:
        reply = await ctx.llm(ctx.input, max_tokens=4)
        ctx.state.setdefault("outputs", []).append(reply.text)
        if until_prefetched:
            await step_prefetches_done(ctx)
        else:
            await asyncio.sleep(think_s)  # tool time: the engine idles, prefetch runs
        rng = random.Random(ctx.state["seed"])
        return rng.choices(list(P_FROM_A), weights=list(P_FROM_A.values()))[0]

    def leaf(name: str):
        @node(name=name, system=SYSTEM[name], next=[END])
        async def fn(ctx: Context) -> str:
            reply = await ctx.llm("go on", max_tokens=4)
            ctx.state.setdefault("outputs", []).append(reply.text)
            return END

        return fn

    return WorkflowGraph("branching").add(a, leaf("b"), leaf("c"), leaf("d")).compile()


@pytest.fixture
def engine():
    return FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
