"""The workflow the spend tests share: ``a`` (an LLM call, then a tool call that ends when
``wait`` says) chooses among four leaves of about 2000 tokens each, predicted ``PREDICTED``
by a predictor that learns nothing; and the idle window a session is taught."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.runtime.result import RunResult
from agentwarm.runtime.session import WorkflowSession
from tests.waiting import step_prefetches_done

LEAVES = ("b", "c", "d", "e")
PREDICTED = [("b", 0.6), ("c", 0.3), ("d", 0.05), ("e", 0.05)]
SYSTEM_CHARS = 2000
"""Each leaf's system prompt: about 2000 tokens of FakeEngine's bytes."""

Wait = Callable[[Context], Awaitable[None]]


class FixedPredictor:
    """Predicts ``ranking`` (default ``PREDICTED``) from a, END from the leaves; learns
    nothing."""

    def __init__(self, ranking: Sequence[tuple[str, float]] = PREDICTED) -> None:
        self.ranking = list(ranking)

    def predict(
        self, path: Sequence[str], state: Mapping[str, Any], *, candidates: Collection[str]
    ) -> list[tuple[str, float]]:
        return list(self.ranking) if path[-1] == "a" else [(END, 1.0)]

    def observe(self, path: Sequence[str], nxt: str) -> None:
        pass


def workflow(wait: Wait = step_prefetches_done) -> Any:
    """``a`` calls the LLM (its candidates are sent after that call), then ``wait``s (a tool
    call) and goes to b."""

    @node(name="a", entry=True, system="A" * 200, next=list(LEAVES))
    async def a(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=4)
        await wait(ctx)
        return "b"

    return WorkflowGraph("spend").add(a, *(leaf(n) for n in LEAVES)).compile()


def leaf(name: str) -> Any:
    """A leaf: an LLM call under a system prompt of ``SYSTEM_CHARS`` tokens, then END."""

    @node(name=name, system=name.upper() * SYSTEM_CHARS, next=[END])
    async def fn(ctx: Context) -> str:
        await ctx.llm("go", max_tokens=2)
        return END

    return fn


def session(
    wait: Wait = step_prefetches_done, ranking: Sequence[tuple[str, float]] = PREDICTED
) -> WorkflowSession:
    return workflow(wait).session(predictor=FixedPredictor(ranking))


def engine() -> FakeEngine:
    return FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5)


async def run(
    s: WorkflowSession, text: str = "x", *, on: FakeEngine | None = None, **policy: Any
) -> RunResult:
    """One run of ``s`` on a fresh FakeEngine (or ``on``), no confirmed warm-ups."""
    return await s.run(
        text, engine=on or engine(), policy=PrefetchPolicy(warm_confirmed=False, **policy)
    )


def sent(result: RunResult) -> list[str]:
    """a's speculative candidates that were sent (admitted), in order."""
    return [p.target for p in result.steps[0].prefetches if p.speculative and p.requests > 0]


def teach_window(s: WorkflowSession, tokens: float) -> None:
    """Teach ``s`` an idle window of ``tokens`` after a's speculation: 1000 tokens/s of
    prefill, ``tokens / 1000`` s of idle time (repeated until older observations weigh
    nothing)."""
    for _ in range(80):
        s.spend.observe_prefill(1000, 1.0)
        s.spend.observe_idle("a", tokens / 1000)
    assert math.isclose(s.spend.free_tokens("a"), tokens, rel_tol=1e-6)
