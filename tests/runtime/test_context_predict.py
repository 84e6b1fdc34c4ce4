"""Predictions that read the conversation (issue 15): the prefetcher predicts with the run's
transcript (a :class:`~agentwarm.predictors.StepContext`), predicts again each time it grows
(starting the successors that became likely, stopping those that fell below ``min_p``), and the
predictor observes each step in the context of its latest prediction: the step's end.

No timing: what is sent and observed, in order (no sleeps).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.predictors import ContextPredictor, StepContext
from agentwarm.runtime import PrefetchOutcome
from tests.waiting import step_prefetches_done

SYSTEM = {n: f"You are the {n} agent. " + "Follow the policy. " * 20 for n in ("act", "lookup")}
SYSTEM["refunds"] = "You are the refunds agent. " + "Refund by the rules. " * 20


class ToolResultPredictor:
    """A ContextPredictor stub: the last tool result says what comes next ("refund" ->
    refunds, "order" -> lookup); before any tool result, the run likely ends. Its path-only
    ``predict`` is uniform (it is never called when a context is known)."""

    def __init__(self) -> None:
        self.contexts: list[StepContext] = []
        self.observed: list[tuple[tuple[str, ...], str, StepContext]] = []

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        names = list(candidates or [])
        return [(n, 1 / len(names)) for n in names]

    def observe(self, path: Sequence[str], next_node: str) -> None:
        raise AssertionError("a context is known: observe_in is called")

    def predict_in(
        self, path: Sequence[str], context: StepContext, *, candidates: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        self.contexts.append(context)
        if path[-1] != "act":
            return [(END, 1.0)]
        if "refund" in context.last_tool_result:
            return [("refunds", 0.97), (END, 0.02), ("lookup", 0.01)]
        if "order" in context.last_tool_result or "order" in context.last_user:
            return [("lookup", 0.97), (END, 0.02), ("refunds", 0.01)]
        return [(END, 0.98), ("lookup", 0.01), ("refunds", 0.01)]

    def observe_in(self, path: Sequence[str], next_node: str, context: StepContext) -> None:
        self.observed.append((tuple(path), next_node, context))

    def to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolResultPredictor:
        return cls()


def make_support(*, wait: bool = True) -> WorkflowGraph:
    """act (LLM call, then the tool result ``ctx.state["tool"]``, or each of
    ``ctx.state["tools"]``) -> lookup | refunds."""

    @node(name="act", entry=True, system=SYSTEM["act"], next=["lookup", "refunds", END])
    async def act(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=4)
        for tool in ctx.state.get("tools") or [ctx.state["tool"]]:
            ctx.add(tool, name="check")
        if wait:
            await step_prefetches_done(ctx)
        return ctx.state["next"]

    def leaf(name: str):
        @node(name=name, system=SYSTEM[name], next=[END])
        async def fn(ctx: Context) -> str:
            await ctx.llm("go on", max_tokens=4)
            return END

        return fn

    return WorkflowGraph("support").add(act, leaf("lookup"), leaf("refunds"))


def test_the_stub_is_a_context_predictor():
    assert isinstance(ToolResultPredictor(), ContextPredictor)


@pytest.mark.parametrize(
    ("tool", "expected"),
    [("refund approved for 4471", "refunds"), ("order 4471 is in transit", "lookup")],
)
async def test_the_candidate_prefetched_after_a_tool_result_follows_the_result(tool, expected):
    predictor = ToolResultPredictor()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    wf = make_support().compile()
    result = await wf.run(
        "hello", engine=engine, predictor=predictor, state={"tool": tool, "next": expected}
    )
    act, nxt = result.steps
    # Before the tool result the run likely ended: nothing was worth a prefetch. The tool
    # result re-ranked the successors and its candidate was started at once.
    assert [(p.target, p.rank, p.probability) for p in act.prefetches if p.speculative] == [
        (expected, 0, 0.97)
    ]
    assert act.prefetches[0].outcome == PrefetchOutcome.HIT and nxt.prefetched
    # Predicted at step start, after the LLM call, after the tool result (then the next step).
    tool_results = [c.last_tool_result for c in predictor.contexts[:3]]
    assert tool_results == ["", "", tool]
    assert predictor.contexts[0] == StepContext(first_user="", last_user="")  # empty transcript
    assert predictor.contexts[1].last_user == "hello" and predictor.contexts[1].last_assistant


async def test_observe_receives_the_step_end_context():
    predictor = ToolResultPredictor()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    wf = make_support().compile()
    tool = "refund approved for 4471"
    result = await wf.run(
        "hello", engine=engine, predictor=predictor, state={"tool": tool, "next": "refunds"}
    )
    (path, nxt, context), (path2, nxt2, context2) = predictor.observed
    assert (path, nxt) == (("act",), "refunds")
    assert context == StepContext.from_messages(
        [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": context.last_assistant},
            {"role": "tool", "content": tool, "name": "check"},
        ]
    )
    assert context.last_tool == "check" and context.last_tool_result == tool
    assert context.last_assistant != ""
    # The next step's end: its own exchange added.
    assert (path2, nxt2) == (("act", "refunds"), END)
    assert context2.last_user == "go on" and context2.last_tool_result == ""
    assert result.path == ["act", "refunds"]


async def test_a_candidate_that_fell_below_min_p_is_stopped_and_not_extended():
    """The user asked about an order: lookup is prefetched after the LLM call; the tool result
    says refund: lookup falls to 0.01 < min_p and is stopped before reaching the engine (it was
    started in the same loop turn), refunds is started instead."""
    predictor = ToolResultPredictor()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    wf = make_support().compile()
    result = await wf.run(
        "where is my order?",
        engine=engine,
        predictor=predictor,
        state={"tool": "refund approved", "next": "refunds"},
    )
    act = result.steps[0]
    assert [(p.target, p.requests, p.outcome) for p in act.prefetches if p.speculative] == [
        ("lookup", 1, PrefetchOutcome.CANCELLED),
        ("refunds", 1, PrefetchOutcome.HIT),
    ]
    # lookup's one request never reached the engine: the only prefill sent is refunds'.
    assert [r.kind for r in engine.log if r.kind == "prefill"] == ["prefill"]


async def test_a_path_predictor_is_not_re_ranked():
    """A predictor that does not read context predicts once per step, from the path (the
    transcript's growth changes nothing), and learns with observe."""

    class PathOnly:
        def __init__(self) -> None:
            self.predicted = 0
            self.observed: list[tuple[tuple[str, ...], str]] = []

        def predict(self, path, state=None, *, candidates=None):
            self.predicted += 1
            return [(n, 1 / len(candidates)) for n in candidates]

        def observe(self, path, next_node):
            self.observed.append((tuple(path), next_node))

        def to_dict(self):
            return {}

        @classmethod
        def from_dict(cls, data):
            return cls()

    predictor = PathOnly()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    result = (
        await make_support()
        .compile()
        .run(
            "hello",
            engine=engine,
            predictor=predictor,  # type: ignore[arg-type]
            policy=PrefetchPolicy(),
            state={"tool": "refund approved", "next": "refunds"},
        )
    )
    assert predictor.predicted == 2  # one per step
    assert predictor.observed == [(("act",), "refunds"), (("act", "refunds"), END)]
    targets = [p.target for p in result.steps[0].prefetches if p.speculative]
    assert sorted(targets) == ["lookup", "refunds"]


async def test_a_stopped_candidate_that_rises_again_is_sent_again():
    """order -> lookup; a refund result: lookup stopped, refunds started; an order result
    again: refunds stopped, lookup sent again (its second request) and a hit."""
    predictor = ToolResultPredictor()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    wf = make_support().compile()
    result = await wf.run(
        "where is my order?",
        engine=engine,
        predictor=predictor,
        state={"tools": ["refund approved", "order 4471 found after all"], "next": "lookup"},
    )
    act = result.steps[0]
    assert [(p.target, p.requests, p.outcome) for p in act.prefetches if p.speculative] == [
        ("lookup", 2, PrefetchOutcome.HIT),
        ("refunds", 1, PrefetchOutcome.CANCELLED),
    ]
    assert result.steps[1].prefetched


async def test_a_finished_candidate_that_fell_is_not_extended():
    """lookup's prefill finished before the refund result made it fall: it is not sent again
    (extended) when the transcript grows further; refunds is prefetched instead."""

    @node(name="act", entry=True, system=SYSTEM["act"], next=["lookup", "refunds", END])
    async def act(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=4)
        await step_prefetches_done(ctx)  # lookup's prefill has finished
        ctx.add("refund approved", name="check")
        await step_prefetches_done(ctx)
        ctx.add("refund approved, note 2", name="check")
        await step_prefetches_done(ctx)
        return "refunds"

    def leaf(name: str):
        @node(name=name, system=SYSTEM[name], next=[END])
        async def fn(ctx: Context) -> str:
            await ctx.llm("go on", max_tokens=4)
            return END

        return fn

    wf = WorkflowGraph("support").add(act, leaf("lookup"), leaf("refunds")).compile()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    result = await wf.run("where is my order?", engine=engine, predictor=ToolResultPredictor())
    act_step = result.steps[0]
    assert [(p.target, p.requests, p.outcome) for p in act_step.prefetches if p.speculative] == [
        ("lookup", 1, PrefetchOutcome.WASTED),
        ("refunds", 2, PrefetchOutcome.HIT),
    ]


async def test_a_tool_results_re_ranking_does_not_restart_the_idle_clock():
    """act: LLM call (its candidates are speculated), a tool that takes a while, its result
    (re-ranks the step), then the next step's LLM call: act's learned idle time covers the
    tool's, not only the moment from the result to the next call."""
    marks: dict[str, float] = {}

    @node(name="act", entry=True, system=SYSTEM["act"], next=["lookup", "refunds", END])
    async def act(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=4)  # speculated before it returns
        marks["llm_done"] = time.perf_counter()
        await asyncio.sleep(0.05)  # the tool's work (simulated), not synchronisation
        marks["tool_done"] = time.perf_counter()
        ctx.add("refund approved", name="check")  # re-ranks act's successors
        return "refunds"

    def leaf(name: str):
        @node(name=name, system=SYSTEM[name], next=[END])
        async def fn(ctx: Context) -> str:
            await ctx.llm("go on", max_tokens=4)
            return END

        return fn

    wf = WorkflowGraph("support").add(act, leaf("lookup"), leaf("refunds")).compile()
    session = wf.session(predictor=ToolResultPredictor())
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    await session.run("where is my order?", engine=engine)
    assert session.spend.idle_s("act") >= marks["tool_done"] - marks["llm_done"]


async def test_the_guardrail_scores_what_the_step_prefetched_not_its_last_ranking():
    """Nothing worth a prefetch at step start; the tool result makes refunds certain, but
    without refreshes it is not sent: the step's branch is a miss, though its last ranking
    names refunds first."""
    wf = make_support(wait=False).compile()
    session = wf.session(predictor=ToolResultPredictor())
    scored: list[bool] = []
    observe = session.guardrail.observe

    def record(hit: bool, policy: PrefetchPolicy, promised: float = 1.0) -> Any:
        scored.append(hit)
        return observe(hit, policy, promised=promised)

    session.guardrail.observe = record  # type: ignore[method-assign]
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    policy = PrefetchPolicy(timing="step_start", refresh_after_llm=False)
    state = {"tool": "refund approved", "next": "refunds"}
    result = await session.run("hello", engine=engine, policy=policy, state=state)
    assert [p.target for p in result.steps[0].prefetches if p.speculative] == []
    assert scored == [False]  # act -> refunds (refunds -> END is not scored)
    # With refreshes on, the result's re-ranking sends refunds: a hit.
    scored.clear()
    await session.run(
        "hello", engine=engine, policy=PrefetchPolicy(timing="step_start"), state=state
    )
    assert scored == [True]
