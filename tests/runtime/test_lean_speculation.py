"""Speculation that adds no request it does not need (issue 16): nodes seen not to call the LLM
are neither prefetched nor warmed; a confirmed warm-up is not sent when a speculative hit sent
the same tokens or when the node calls the LLM at once; a prefetch admission refuses is dropped
before its prompt is rendered and is not counted as issued.

No timing: counts and order only (events and conditions, never sleeps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.engines.base import (
    Completion,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    Priority,
)
from agentwarm.runtime import PrefetchKind, PrefetchOutcome
from agentwarm.runtime.admission import Admission, Limits, admission_for
from agentwarm.runtime.result import RunResult, summarize
from agentwarm.runtime.timing import NO_LLM_STEPS, StepTiming
from tests.waiting import step_prefetches_done, until

SYSTEM = {n: f"You are {n}. Work through the task step by step. " * 3 for n in "atbc"}


def zero_cost() -> FakeEngine:
    return FakeEngine(seconds_per_token=0, seconds_per_output_token=0)


def confirmed(result: RunResult) -> list[tuple[int, str]]:
    return [
        (s.index, p.target)
        for s in result.steps
        for p in s.prefetches
        if p.kind == PrefetchKind.CONFIRMED
    ]


def make_tool_chain(*, wait_prefetch: bool = False) -> WorkflowGraph:
    """a (LLM) -> t (a tool: no LLM call) -> b (LLM) -> END; with ``wait_prefetch`` a and t
    last until their prefetches have finished (a slow tool)."""

    @node(name="a", entry=True, system=SYSTEM["a"], next=["t"])
    async def a(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=4)
        if wait_prefetch:
            await step_prefetches_done(ctx)
        return "t"

    @node(name="t", system=SYSTEM["t"], next=["b"])
    async def t(ctx: Context) -> str:
        ctx.add("tool result: 42")
        if wait_prefetch:
            await step_prefetches_done(ctx)
        return "b"

    @node(name="b", system=SYSTEM["b"], next=[END])
    async def b(ctx: Context) -> str:
        reply = await ctx.llm("answer", max_tokens=4)
        ctx.state["answer"] = reply.text
        return END

    return WorkflowGraph("tool_chain").add(a, t, b)


async def test_a_node_that_never_calls_the_llm_is_neither_prefetched_nor_warmed():
    wf = make_tool_chain(wait_prefetch=True).compile()
    engine, reactive = zero_cost(), zero_cost()
    runs = [await wf.run(f"q{i}", engine=engine) for i in range(NO_LLM_STEPS + 2)]
    # Until t has been seen NO_LLM_STEPS times without an LLM call, it is prefetched like any node.
    assert [p.target for p in runs[0].steps[0].prefetches if p.speculative] == ["t"]
    for result in runs[NO_LLM_STEPS:]:
        a_step, t_step, _ = result.steps
        assert [p.target for p in a_step.prefetches] == []  # nothing for t, speculative or not
        assert not t_step.prefetched
        # t's own step still prefetches b, which reads its prompt.
        assert [p.target for p in t_step.prefetches if p.speculative] == ["b"]
        (to_b,) = t_step.prefetches
        assert (to_b.outcome, to_b.requests) == (
            PrefetchOutcome.HIT,
            2,
        )  # its prefix, then + the tool
        assert result.steps[2].cached_tokens == to_b.tokens
    # Same answers as without prefetching.
    for i, result in enumerate(runs):
        plain = await wf.run(f"q{i}", engine=reactive, policy=PrefetchPolicy.disabled())
        assert result.state["answer"] == plain.state["answer"]


def test_step_timing_learns_which_nodes_read_their_prompt_and_their_lead():
    timing = StepTiming()
    assert timing.reads_prompt("x") and timing.lead_s("x") is None
    for _ in range(NO_LLM_STEPS - 1):
        timing.observe("x", False)
    assert timing.reads_prompt("x")
    timing.observe("x", False)
    assert not timing.reads_prompt("x")
    timing.observe("x", True, 0.004)  # one LLM call makes it a prompt reader again
    assert timing.reads_prompt("x") and timing.lead_s("x") == 0.004
    timing.observe("x", True, 0.008)
    assert timing.lead_s("x") == 0.004 + 0.25 * (0.008 - 0.004)


async def test_confirmed_warm_up_is_skipped_for_a_node_that_calls_the_llm_at_once():
    """With speculation shut (nothing covers the next node), the first run warms each next node;
    later runs do not when the node's lead is below ``warm_min_lead_s``, and still do with 0."""
    results: dict[float, list[RunResult]] = {}
    for min_lead in (0.0, 1e9):
        wf = make_tool_chain().compile()
        engine = zero_cost()
        policy = PrefetchPolicy(max_prefills_per_s=0, warm_min_lead_s=min_lead)
        results[min_lead] = [await wf.run(f"q{i}", engine=engine, policy=policy) for i in range(3)]
    # t calls no LLM: never warmed once seen twice; b is warmed from t's step.
    assert confirmed(results[0.0][0]) == [(0, "t"), (1, "b")]
    assert confirmed(results[0.0][2]) == [(1, "b")]
    assert confirmed(results[1e9][0]) == [(0, "t"), (1, "b")]
    assert confirmed(results[1e9][1]) == [(0, "t")]  # b's lead is known now: it calls at once
    assert confirmed(results[1e9][2]) == []
    for runs in results.values():
        assert all(
            p.outcome == PrefetchOutcome.HIT
            for r in runs
            for s in r.steps
            for p in s.prefetches
            if p.kind == PrefetchKind.CONFIRMED
        )


class GatedEngine(FakeEngine):
    """Speculative prefills wait for ``gate``; no reuse of a prefill in flight (like SGLang)."""

    supports_promotion = False

    def __init__(self) -> None:
        super().__init__(seconds_per_token=0, seconds_per_output_token=0)
        self.gate = asyncio.Event()
        self.at_gate = 0
        self.calls: list[str] = []

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        if params.priority < Priority.LIVE:
            self.at_gate += 1
            await self.gate.wait()
        result = await super().prefill_with(ids, params)
        self.calls.append(f"prefill/{params.priority}")
        return result

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        self.calls.append("generate")
        return await super().generate_with(ids, params)


def make_pair(started: asyncio.Event | None = None, *, wait_prefetch: bool = False):
    @node(name="a", entry=True, system=SYSTEM["a"], next=["b"])
    async def a(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=4)
        if wait_prefetch:
            await step_prefetches_done(ctx)
        return "b"

    @node(name="b", system=SYSTEM["b"], next=[END])
    async def b(ctx: Context) -> str:
        if started is not None:
            started.set()
        await ctx.llm("answer", max_tokens=4)
        return END

    return WorkflowGraph("pair").add(a, b).compile()


async def test_a_running_hit_with_the_whole_prefix_replaces_the_confirmed_warm_up():
    """On an engine that cannot reuse a prefill in flight, b's live request waits for the
    speculative hit that already holds b's whole known prefix (no second copy is sent)."""
    engine = GatedEngine()
    started = asyncio.Event()
    run = asyncio.create_task(make_pair(started).run("hi", engine=engine))
    # b's step can start before the speculative prefill's task has reached the engine: wait for
    # both (the task is already registered, so b's live request waits for it either way).
    await until(
        lambda: started.is_set() and engine.at_gate == 1,
        what="b's step to start and b's speculative prefill to reach the gate",
    )
    # b's live request is held back: the hit has not finished yet.
    assert engine.at_gate == 1 and engine.calls == ["generate"]
    engine.gate.set()
    result = await run
    a_step, b_step = result.steps
    (hit,) = a_step.prefetches  # no confirmed warm-up next to it
    assert (hit.target, hit.kind, hit.outcome) == ("b", "speculative", PrefetchOutcome.HIT)
    assert engine.calls == ["generate", f"prefill/{Priority.SPECULATIVE}", "generate"]
    assert b_step.prefetched and b_step.cached_tokens == hit.tokens > 0


async def test_a_finished_hit_with_the_whole_prefix_needs_no_confirmed_warm_up():
    engine = zero_cost()
    result = await make_pair(wait_prefetch=True).run("hi", engine=engine)
    a_step, b_step = result.steps
    (hit,) = a_step.prefetches
    assert (hit.target, hit.outcome) == ("b", PrefetchOutcome.HIT) and hit.computed_tokens > 0
    assert b_step.cached_tokens == hit.tokens
    assert [r.kind for r in engine.log] == ["generate", "prefill", "generate"]


async def test_admission_answers_without_reserving_and_counts_its_refusals():
    a = Admission().bind(Limits(rate=1e6, max_in_flight=1))
    assert a.may_admit(0.1) and a.may_admit(0.1)  # nothing reserved by asking
    held = a.try_acquire(value=0.5, tokens=10)
    assert held is not None
    assert not a.may_admit(0.5)  # every slot held by one worth as much
    assert a.may_admit(0.6)  # would preempt it
    assert (a.admitted, a.dropped, a.in_flight) == (1, 1, 1)
    shut = Admission().bind(Limits(rate=0.0))
    assert not shut.may_admit(1.0) and shut.dropped == 1


async def test_dropped_prefetches_are_not_issued_and_are_never_rendered():
    """Shut admission: every speculative prefetch is dropped with 0 tokens, none is counted as
    issued, the acceptance ratio has nothing behind it."""
    engine = zero_cost()
    wf = make_tool_chain().compile()
    results = [
        await wf.run(f"q{i}", engine=engine, policy=PrefetchPolicy(max_prefills_per_s=0))
        for i in range(3)
    ]
    spec = [p for r in results for p in r.speculative_prefetches]
    assert spec and all(
        (p.outcome, p.tokens, p.requests) == (PrefetchOutcome.DROPPED, 0, 0) for p in spec
    )
    summary = summarize(results)
    assert (summary["prefetches_issued"], summary["prefetches_dropped"]) == (0, len(spec))
    assert summary["acceptance_ratio"] is None and summary["branch_hit_rate"] == 0.0
    assert admission_for(engine).dropped >= len(spec)  # a refused refresh counts too
