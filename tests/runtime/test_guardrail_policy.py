"""Concurrent runs of one workflow share its guardrail's learned level but each scores and
limits speculation with its own policy (issue 11: the session no longer reassigns the shared
guardrail's policy per run)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.runtime.guardrail import Level


class _AlwaysB:
    """Predicts ``b`` for sure; the workflow always goes to ``c``: every step is a miss."""

    def predict(
        self, path: Sequence[str], state: Mapping[str, Any], *, candidates: Collection[str]
    ) -> list[tuple[str, float]]:
        return [("b", 1.0)]

    def observe(self, path: Sequence[str], nxt: str) -> None:
        pass


def _workflow(both_started: asyncio.Barrier) -> Any:
    @node(name="a", entry=True, system="A" * 100, next=["b", "c"])
    async def a(ctx: Context) -> str:
        await both_started.wait()  # both runs are under way before either scores
        return "c"

    def leaf(name: str) -> Any:
        @node(name=name, system=name.upper() * 100, next=[END])
        async def fn(ctx: Context) -> str:
            return END

        return fn

    return WorkflowGraph("g").add(a, leaf("b"), leaf("c")).compile()


async def test_concurrent_runs_score_the_shared_guardrail_each_with_its_own_policy() -> None:
    wf = _workflow(asyncio.Barrier(2))
    predictor = _AlwaysB()
    session = wf.session(predictor=predictor)
    engine = FakeEngine()
    half, quarter = PrefetchPolicy(ewma_alpha=0.5), PrefetchPolicy(ewma_alpha=0.25)
    await asyncio.gather(
        wf.run("x", engine=engine, predictor=predictor, policy=half),
        wf.run("y", engine=engine, predictor=predictor, policy=quarter),
    )
    # One miss scored with alpha 0.5, one with 0.25, in either order: 1 * 0.5 * 0.75.
    assert session.guardrail.observations == 2
    assert session.guardrail.ewma == 0.375
    assert session.guardrail.level is Level.CAUTIOUS
    # The session's own policy is untouched by the runs' policies.
    assert session.policy == PrefetchPolicy()
