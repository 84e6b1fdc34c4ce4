from __future__ import annotations

import asyncio

import pytest

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.errors import EngineError, MaxStepsExceeded, NodeError, WorkflowError
from agentwarm.runtime import PrefetchOutcome
from tests.waiting import DEFAULT_TIMEOUT_S

from .conftest import P_FROM_A, make_branching


async def test_predictor_learns_true_most_likely_successor(engine):
    wf = make_branching(think_s=0.0)
    for seed in range(150):
        await wf.run("hi", engine=engine, state={"seed": seed}, policy=PrefetchPolicy.disabled())
    preds = wf.session().predictor.predict(("a",), {}, candidates=["b", "c", "d"])
    assert preds[0][0] == max(P_FROM_A, key=P_FROM_A.__getitem__)
    assert [n for n, _ in preds] == ["b", "c", "d"]


async def test_prefetch_hit_is_confirmed_by_engine_cached_tokens(engine):
    wf = make_branching(until_prefetched=True)
    policy = PrefetchPolicy(max_prefills_per_s=10_000)  # back-to-back runs: no rate limit
    # Learn first, then inspect a run that goes a -> b.
    for seed in range(40):
        await wf.run("hi", engine=engine, state={"seed": seed}, policy=policy)
    seed = next(s for s in range(1000) if _first_choice(s) == "b")
    result = await wf.run("hello again", engine=engine, state={"seed": seed}, policy=policy)
    assert result.path == ["a", "b"]
    first, second = result.steps
    hit = next(p for p in first.prefetches if p.target == "b" and p.speculative)
    assert hit.outcome == PrefetchOutcome.HIT
    assert second.prefetched and second.outcome == "hit"
    # The real request of step b found at least the whole prefetched prefix in the cache.
    assert second.cached_tokens >= hit.tokens
    assert result.summary()["branch_hit_rate"] == 1.0


async def test_refresh_after_llm_extends_the_prefetched_prefix(engine):
    wf = make_branching(until_prefetched=True)
    seed = next(s for s in range(1000) if _first_choice(s) == "b")
    policy = PrefetchPolicy(timing="step_start")
    result = await wf.run("a long enough input", engine=engine, state={"seed": seed}, policy=policy)
    b = next(p for p in result.steps[0].prefetches if p.target == "b" and p.speculative)
    # Sent twice: at step start, then with the step's own LLM exchange in the transcript.
    assert b.requests == 2
    assert result.steps[1].cached_tokens >= b.tokens
    start_prefix = len(engine.encode("<|system|>\n" + wf.nodes["b"].system + "\n"))
    assert b.tokens > start_prefix


def _first_choice(seed: int) -> str:
    import random

    rng = random.Random(seed)
    return rng.choices(list(P_FROM_A), weights=list(P_FROM_A.values()))[0]


async def test_losers_are_aborted_and_wasted_tokens_counted():
    # A slow engine: the losing prefetch is still running when step a returns.
    engine = FakeEngine(seconds_per_token=2e-4, seconds_per_output_token=1e-5, chunk_size=64)
    wf = make_branching(think_s=0.01)
    seed = next(s for s in range(1000) if _first_choice(s) == "b")
    policy = PrefetchPolicy(top_n=3, refresh_after_llm=False)
    result = await wf.run("x", engine=engine, state={"seed": seed}, policy=policy)
    spec = [p for p in result.steps[0].prefetches if p.speculative]
    assert {p.target for p in spec} == {"b", "c", "d"}
    losers = [p for p in spec if p.target != "b"]
    assert losers and all(
        p.outcome in (PrefetchOutcome.CANCELLED, PrefetchOutcome.WASTED) for p in losers
    )
    cancelled = [p for p in losers if p.outcome == PrefetchOutcome.CANCELLED]
    assert cancelled, "expected a loser still running at the transition"
    aborted = [r for r in engine.log if r.status == "aborted"]
    assert aborted and all(r.rid in engine.aborts for r in aborted)
    assert result.summary()["wasted_tokens"] == sum(p.computed_tokens for p in losers)
    assert sum(p.computed_tokens for p in cancelled) == sum(r.computed_tokens for r in aborted)


async def test_prefetch_is_invisible_except_latency():
    outs = {}
    for enabled in (True, False):
        engine = FakeEngine(seconds_per_token=1e-6)
        wf = make_branching(think_s=0.005)
        policy = PrefetchPolicy() if enabled else PrefetchPolicy.disabled()
        runs = [
            await wf.run(f"input {s}", engine=engine, state={"seed": s}, policy=policy)
            for s in range(12)
        ]
        outs[enabled] = [(r.path, r.state["outputs"]) for r in runs]
        if not enabled:
            assert all(r.kind == "generate" for r in engine.log)
    assert outs[True] == outs[False]


class FailingPrefill(FakeEngine):
    async def prefill_with(self, ids, params):
        raise EngineError("speculation exploded")


async def test_failed_speculative_prefill_never_breaks_the_workflow():
    engine = FailingPrefill(seconds_per_token=1e-6)
    wf = make_branching(think_s=0.0)
    result = await wf.run("x", engine=engine, state={"seed": 1})
    assert result.path[0] == "a" and len(result.path) == 2
    spec = [p for p in result.steps[0].prefetches if p.speculative]
    assert spec and all(p.outcome == PrefetchOutcome.FAILED for p in spec)


async def test_sync_nodes_fanout_and_join(engine):
    order: list[str] = []

    @node(name="plan", entry=True, next=["r1", "r2", "r3"])
    def plan(ctx: Context) -> list[str]:
        order.append("plan")
        return ["r1", "r2", "r3"]

    finished = {name: asyncio.Event() for name in ("r1", "r2", "r3")}

    def researcher(name: str, after: str | None):
        @node(name=name, system=f"researcher {name}", next=["write"])
        async def fn(ctx: Context) -> str:
            await ctx.llm(f"research {name}", max_tokens=2)
            if after is not None:  # finishes only after a sibling: they must run concurrently
                await asyncio.wait_for(finished[after].wait(), DEFAULT_TIMEOUT_S)
            order.append(name)
            finished[name].set()
            return "write"

        return fn

    @node(name="write", join=True, next=[END])
    async def write(ctx: Context) -> str:
        order.append("write")
        return END

    wf = (
        WorkflowGraph("team")
        .add(plan, researcher("r1", "r3"), researcher("r2", None), researcher("r3", "r2"), write)
        .compile()
    )
    result = await wf.run("topic", engine=engine)
    assert order[0] == "plan" and order[-1] == "write"
    assert sorted(order[1:-1]) == ["r1", "r2", "r3"]
    assert order[1:-1] == ["r2", "r3", "r1"]  # ran concurrently
    assert result.path.count("write") == 1


async def test_max_steps_guard(engine):
    @node(name="loop", entry=True, next=["loop", END])
    async def loop(ctx: Context) -> str:
        return "loop"

    wf = WorkflowGraph("spin").add(loop).compile(max_steps=7)
    with pytest.raises(MaxStepsExceeded, match="ran 7 steps without reaching END"):
        await wf.run("", engine=engine)


async def test_undeclared_successor_is_an_error(engine):
    @node(name="a", entry=True, next=["b"])
    async def a(ctx: Context) -> str:
        return "c"

    @node(name="b", next=[END])
    async def b(ctx: Context) -> str:
        return END

    wf = WorkflowGraph("w").add(a, b).compile()
    with pytest.raises(WorkflowError, match=r"Node 'a' returned 'c'.*declared successors \['b'\]"):
        await wf.run("", engine=engine)


async def test_node_exception_wrapped_with_node_name(engine):
    @node(name="a", entry=True, next=[END])
    async def a(ctx: Context) -> str:
        raise KeyError("boom")

    wf = WorkflowGraph("w").add(a).compile()
    with pytest.raises(NodeError, match="Node 'a' raised KeyError") as e:
        await wf.run("", engine=engine)
    assert isinstance(e.value.__cause__, KeyError)


async def test_prompt_prefix_stable_across_steps(engine):
    from agentwarm.runtime.prompt import PromptRenderer
    from agentwarm.runtime.transcript import Transcript

    wf = make_branching()
    transcript = Transcript()
    renderer = PromptRenderer(engine, transcript)
    transcript.add("first message with ünïcode", role="user", node="a")
    early = renderer.prefix_ids(wf.nodes["b"])
    transcript.add("a reply", role="assistant", node="a")
    transcript.add('{"tool": "result"}', role="tool", node="a")
    full = renderer.prompt_ids(wf.nodes["b"], "go on")
    assert full[: len(early)] == early
    assert len(full) > len(early)


def test_run_sync_wrapper():
    wf = make_branching(think_s=0.0)
    result = wf.run_sync("x", engine=FakeEngine(), state={"seed": 3})
    assert result.path[0] == "a"
    assert result.steps[0].ttft_s is not None and result.steps[0].ttft_s > 0


async def test_run_sync_inside_loop_is_a_clear_error():
    wf = make_branching(think_s=0.0)
    with pytest.raises(WorkflowError, match="inside a running event loop"):
        wf.run_sync("x", engine=FakeEngine(), state={"seed": 3})


class DownForLive(FakeEngine):
    async def generate_with(self, ids, params):
        from agentwarm.errors import EngineUnavailable

        raise EngineUnavailable("http://127.0.0.1:9: connection refused")


async def test_live_engine_failure_keeps_its_type():
    from agentwarm.errors import EngineUnavailable

    wf = make_branching(think_s=0.0)
    with pytest.raises(EngineUnavailable, match="connection refused"):
        await wf.run("x", engine=DownForLive(), state={"seed": 1})
