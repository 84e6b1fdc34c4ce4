"""ctx.add from a sync node (which runs in its own thread) hands the prefetch refresh to the
event loop that owns the prefetcher, and the next step still finds the tool result cached."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.runtime.prefetch import Prefetcher
from tests.waiting import DEFAULT_TIMEOUT_S, until

TOOL_RESULT = "order 1234: shipped, tracking number ZX-99, " * 20


async def test_sync_node_add_refreshes_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    refresh_threads: list[threading.Thread] = []
    original = Prefetcher.refresh

    def recording(self: Prefetcher, *args: object, **kwargs: object) -> None:
        refresh_threads.append(threading.current_thread())
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Prefetcher, "refresh", recording)
    engine = FakeEngine()
    refreshed = threading.Event()
    seen: dict[str, object] = {}

    @node(name="a", entry=True, system="A" * 100, next=["b"])
    def a(ctx: Context) -> str:
        ctx.add(TOOL_RESULT)
        # the tool result's prefix extension reaches the engine while this thread still blocks
        seen["refreshed during a"] = refreshed.wait(DEFAULT_TIMEOUT_S)
        return "b"

    @node(name="b", system="B" * 2000, next=[END])
    async def b(ctx: Context) -> str:
        r = await ctx.llm("go", max_tokens=1)
        seen["b prompt"], seen["b cached"] = r.prompt_tokens, r.cached_tokens
        return END

    async def watch() -> None:
        # two prefills for b: its known prefix at step start, then extended by the tool result
        await until(lambda: len(engine.log) >= 2, what="the refreshed prefetch of b")
        refreshed.set()

    wf = WorkflowGraph("sync_add").add(a, b).compile()
    loop_thread = threading.current_thread()
    watcher = asyncio.create_task(watch())
    await wf.run("x", engine=engine, policy=PrefetchPolicy(timing="step_start"))
    await watcher
    assert seen["refreshed during a"] is True
    assert refresh_threads and all(t is loop_thread for t in refresh_threads)
    # everything but b's own step text was prefetched, the tool result included
    assert seen["b cached"] >= len(TOOL_RESULT) + 2000
