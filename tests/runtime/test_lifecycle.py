"""Prefetch lifecycle edge cases: aborts that must reach the engine, failures mid-step,
fan-out cancellation and nested joins, disabled runs and the guardrail, sync nodes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm import telemetry as tm
from agentwarm.errors import NodeError
from agentwarm.runtime import PrefetchOutcome
from agentwarm.runtime.guardrail import Level
from tests.waiting import DEFAULT_TIMEOUT_S, step_prefetches_done, until

BIG = "rule. " * 2000  # ~12k byte tokens
BIG_CONTEXT = 1 << 15  # over the FakeEngine's default context (8,192, the presets')


def _leaf(name: str, system: str = ""):
    @node(name=name, system=system, next=[END])
    async def fn(ctx: Context) -> str:
        await ctx.llm("x", max_tokens=2)
        return END

    return fn


async def test_losers_refreshed_right_before_the_transition_never_run_to_completion():
    # DESIGN §2 pattern: llm, then route at once. refresh() re-sends the candidates' prefixes
    # and resolve() runs in the same loop tick: the loser must not reach the engine whole.
    @node(name="a", entry=True, system="A" + BIG, next=["b", "c"])
    async def a(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=2)
        return "b"

    engine = FakeEngine(
        seconds_per_token=2e-6, seconds_per_output_token=1e-4, max_context=BIG_CONTEXT
    )
    wf = WorkflowGraph("race").add(a, _leaf("b", "B" + BIG), _leaf("c", "C" + BIG)).compile()
    policy = PrefetchPolicy(top_n=2, min_p=0.0, warm_confirmed=False, timing="step_start")
    result = await wf.run("hello", engine=engine, policy=policy)
    c = next(p for p in result.steps[0].prefetches if p.target == "c")
    assert c.outcome == PrefetchOutcome.CANCELLED and c.requests == 2
    c_prompt = len(engine.encode("<|system|>\nC" + BIG + "\n"))
    # The loser was stopped early: it never computed its whole prefix.
    assert c.computed_tokens < c_prompt
    assert result.summary()["wasted_tokens"] == c.computed_tokens


async def test_step_that_raises_stops_its_prefetches_and_ends_their_spans():
    @node(name="a", entry=True, next=["b", "c"])
    async def a(ctx: Context) -> str:
        # The tool breaks once the prefetch (b and c share one prefix) runs in the engine.
        await until(lambda: engine.scheduler.has_work, what="the prefetch to reach the engine")
        raise ValueError("tool broke")

    engine = FakeEngine(seconds_per_token=1e-4, max_context=BIG_CONTEXT)
    wf = WorkflowGraph("boom").add(a, _leaf("b", BIG), _leaf("c", BIG)).compile()
    with tm.capture_spans() as exporter, pytest.raises(NodeError, match="tool broke"):
        await wf.run(
            "x", engine=engine, policy=PrefetchPolicy(top_n=2, min_p=0.0, timing="step_start")
        )
    prefills = [s for s in exporter.get_finished_spans() if s.name == tm.SPAN_PREFILL]
    assert len(prefills) == 2
    assert {s.attributes[tm.AW_PREFILL_OUTCOME] for s in prefills} == {PrefetchOutcome.CANCELLED}
    await until(
        lambda: not engine.scheduler.has_work, what="the engine to drop the aborted prefills"
    )
    assert [r.status for r in engine.log if r.kind == "prefill"] == ["aborted"]


async def test_failed_branch_cancels_its_siblings():
    events: list[str] = []
    slow_started, never = asyncio.Event(), asyncio.Event()

    @node(name="a", entry=True, next=["bad", "slow"])
    async def a(ctx: Context) -> list[str]:
        return ["bad", "slow"]

    @node(name="bad", next=[END])
    async def bad(ctx: Context) -> str:
        await asyncio.wait_for(slow_started.wait(), DEFAULT_TIMEOUT_S)
        raise RuntimeError("branch failed")

    @node(name="slow", next=[END])
    async def slow(ctx: Context) -> str:
        slow_started.set()
        try:
            await asyncio.wait_for(never.wait(), DEFAULT_TIMEOUT_S)  # a long tool call
        except asyncio.CancelledError:
            events.append("slow cancelled")
            raise
        events.append("slow finished")
        return END

    wf = WorkflowGraph("fan").add(a, bad, slow).compile()
    with pytest.raises(NodeError, match="branch failed"):
        await wf.run("", engine=FakeEngine())
    await until(lambda: events, what="the slow branch to end")
    assert events == ["slow cancelled"]


async def test_nested_fanout_runs_each_join_once_after_all_its_branches():
    ran: list[str] = []
    j1_ran = asyncio.Event()

    def mk(name, nxt, ret=None, join=False, entry=False, after=None):
        @node(name=name, next=nxt, join=join, entry=entry)
        async def fn(ctx: Context):
            if after is not None:  # c, the slow branch, ends only after the inner join ran
                await asyncio.wait_for(after.wait(), DEFAULT_TIMEOUT_S)
            ran.append(name)
            if name == "j1":
                j1_ran.set()
            return ret if ret is not None else nxt[0]

        return fn

    wf = (
        WorkflowGraph("nested")
        .add(
            mk("a", ["b", "c"], ret=["b", "c"], entry=True),
            mk("b", ["d", "e"], ret=["d", "e"]),
            mk("d", ["j1"]),
            mk("e", ["j1"]),
            mk("j1", ["j"], join=True),
            mk("c", ["j"], after=j1_ran),
            mk("j", [END], join=True),
        )
        .compile()
    )
    await wf.run("x", engine=FakeEngine(), policy=PrefetchPolicy.disabled())
    assert ran.count("j") == 1 and ran.count("j1") == 1
    assert ran.index("j1") > max(ran.index("d"), ran.index("e"))
    assert ran[-1] == "j" and ran.index("j1") < ran.index("c") < ran.index("j")


async def test_join_prefetched_by_its_branches_counts_as_a_hit():
    def mk(name, nxt, ret=None, join=False, entry=False):
        @node(name=name, next=nxt, join=join, entry=entry, system=f"{name} " * 50)
        async def fn(ctx: Context):
            await ctx.llm("go", max_tokens=1)
            await asyncio.sleep(0.01)  # tool time; the hit is decided at the transition
            return ret if ret is not None else nxt[0]

        return fn

    wf = (
        WorkflowGraph("team")
        .add(
            mk("a", ["b", "c"], ret=["b", "c"], entry=True),
            mk("b", ["j"]),
            mk("c", ["j"]),
            mk("j", [END], join=True),
        )
        .compile()
    )
    result = await wf.run("x", engine=FakeEngine(), policy=PrefetchPolicy(top_n=2, min_p=0.0))
    j = result.steps[-1]
    assert j.node == "j" and j.prefetched and j.from_node in ("b", "c")
    assert result.summary()["branch_hit_rate"] == 1.0


async def test_disabled_runs_do_not_pause_speculation():
    @node(name="a", entry=True, system="A" * 200, next=["b", "c"])
    async def a(ctx: Context) -> str:
        return "b"

    wf = WorkflowGraph("g").add(a, _leaf("b", "B" * 200), _leaf("c", "C" * 200)).compile()
    engine = FakeEngine()
    for _ in range(20):
        await wf.run("x", engine=engine, policy=PrefetchPolicy.disabled())
    assert wf.session().guardrail.level is Level.NORMAL
    result = await wf.run("x", engine=engine, policy=PrefetchPolicy(timing="step_start"))
    assert result.speculative_prefetches


async def test_sync_node_runs_off_the_loop_so_prefetch_overlaps_it():
    seen: dict[str, int | bool] = {}
    engine = FakeEngine()
    prefetched = threading.Event()

    @node(name="a", entry=True, system="A" * 100, next=["b"])
    def a(ctx: Context) -> str:
        # A blocking tool call that ends once the loop has finished b's prefetch: if the node
        # ran on the loop, the prefetch could not run and the wait would time out.
        seen["prefetch finished during a"] = prefetched.wait(DEFAULT_TIMEOUT_S)
        seen["engine requests during a"] = len(engine.log)
        return "b"

    @node(name="b", system="B" * 3000, next=[END])
    async def b(ctx: Context) -> str:
        r = await ctx.llm("go", max_tokens=1)
        seen["b cached"] = r.cached_tokens
        return END

    async def watch() -> None:
        await until(lambda: engine.log, what="b's prefetch to finish")
        prefetched.set()

    wf = WorkflowGraph("s").add(a, b).compile()
    policy = PrefetchPolicy(warm_confirmed=False, timing="step_start")
    watcher = asyncio.create_task(watch())
    await wf.run("x", engine=engine, policy=policy)
    await watcher
    assert seen["prefetch finished during a"] is True
    assert seen["engine requests during a"] == 1
    assert seen["b cached"] >= 3000


async def test_empty_prefixes_are_not_prefetched():
    @node(name="a", entry=True, next=["b"])
    async def a(ctx: Context) -> str:
        return "b"

    @node(name="b", next=[END])
    async def b(ctx: Context) -> str:
        return END

    wf = WorkflowGraph("e").add(a, b).compile()
    result = await wf.run("", engine=FakeEngine())
    assert result.steps[0].prefetches == []


async def test_user_predictor_keeps_one_guardrail_across_runs():
    from agentwarm.predictors import default_predictor

    @node(name="a", entry=True, system="A" * 100, next=["b"])
    async def a(ctx: Context) -> str:
        return "b"

    wf = WorkflowGraph("p").add(a, _leaf("b", "B" * 100)).compile()
    predictor = default_predictor()
    assert wf.session(predictor=predictor) is wf.session(predictor=predictor)
    await wf.run("x", engine=FakeEngine(), predictor=predictor)
    assert wf.session(predictor=predictor).guardrail.observations == 1


async def test_auto_timing_speculates_after_the_llm_call_or_at_start_for_tool_nodes():
    @node(name="a", entry=True, system="A" * 300, next=["t"])
    async def a(ctx: Context) -> str:
        reply = await ctx.llm("plan", max_tokens=4)
        ctx.state["a_reply"] = reply.text
        await asyncio.sleep(0.005)  # tool time (simulated; no assertion depends on it)
        return "t"

    @node(name="t", system="T" * 300, next=["z"])
    async def t(ctx: Context) -> str:  # a pure tool step: no LLM call
        await asyncio.sleep(0.005)  # tool time (simulated; no assertion depends on it)
        ctx.add("tool output")
        return "z"

    wf = WorkflowGraph("timing").add(a, t, _leaf("z", "Z" * 300)).compile()
    engine = FakeEngine()
    first = await wf.run("x", engine=engine)
    a_pf = [p for p in first.steps[0].prefetches if p.speculative]
    # Held until a's LLM call returned: one request, whose prefix holds a's exchange.
    assert [(p.target, p.requests) for p in a_pf] == [("t", 1)]
    static_t = len(engine.encode("<|system|>\n" + "T" * 300 + "\n"))
    assert a_pf[0].tokens > static_t + len(engine.encode(first.state["a_reply"]))
    # t never called the LLM: nothing speculated in its first step, learned for next time.
    assert [p for p in first.steps[1].prefetches if p.speculative] == []
    second = await wf.run("y", engine=engine)
    t_pf = [p for p in second.steps[1].prefetches if p.speculative]
    assert [p.target for p in t_pf] == ["z"] and second.steps[2].prefetched


async def test_tool_result_added_during_the_step_is_prefetched_too():
    @node(name="a", entry=True, system="A" * 300, next=["b"])
    async def a(ctx: Context) -> str:
        await ctx.llm("plan", max_tokens=4)
        ctx.add("tool result " * 100)  # arrives while the step still waits
        await step_prefetches_done(ctx)  # ... as long as the prefetch of it takes
        return "b"

    seen = {}

    @node(name="b", system="B" * 300, next=[END])
    async def b(ctx: Context) -> str:
        reply = await ctx.llm(max_tokens=2)
        seen["prompt"], seen["cached"] = reply.prompt_tokens, reply.cached_tokens
        return END

    wf = WorkflowGraph("add").add(a, b).compile()
    engine = FakeEngine()
    await wf.run("x", engine=engine, policy=PrefetchPolicy(warm_confirmed=False))
    # Only b's own reply header (and the always-computed last token) is not cached.
    own = len(engine.encode("<|assistant b|>\n"))
    assert seen["cached"] == seen["prompt"] - own
