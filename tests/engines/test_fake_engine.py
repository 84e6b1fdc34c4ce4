"""FakeEngine runs the embedded engine's scheduler: same steps, same answers as LocalEngine.

The scenarios are played on both engines and must log the same steps (``scheduler.events``) and
report the same cached/computed tokens: preemption and interruption of speculative work, queue
order, promotion, aborts. A step hook starts the rest of a scenario at a chosen step (on
LocalEngine the worker thread waits there until it is submitted); nothing waits for a while or
asserts on time. The fake's own surface (outputs, log, streaming, close) follows.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from agentwarm.engines.base import Engine, PrefillStatus, Priority
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.local.scheduler import Scheduler, StepEvent
from agentwarm.errors import EngineUnavailable, RequestAborted
from tests.waiting import until

SPEC, LIVE = int(Priority.SPECULATIVE), int(Priority.LIVE)
CHUNK = 16
WAIT_S = 30.0
SLOW = 1_000.0  # seconds per token: a chunk the fake is never left to finish


def ids(seed: int, n: int) -> list[int]:
    """``n`` token ids starting with ``seed``: prompts of different seeds share no prefix."""
    rng = random.Random(seed)
    return [seed, *(rng.randrange(1, 250) for _ in range(n - 1))]


@dataclass(frozen=True)
class Call:
    """One engine call of a scenario: ``prefill``, ``generate`` (one token) or ``abort``."""

    rid: str
    kind: str
    ids: tuple[int, ...] = ()
    priority: int = SPEC


async def call(engine: Engine, c: Call) -> tuple[str, int, int, str] | None:
    """(rid, cached, computed, status) of the call's answer; None for an abort."""
    if c.kind == "abort":
        await engine.abort(c.rid)
        return None
    if c.kind == "prefill":
        r = await engine.prefill(c.ids, priority=c.priority, rid=c.rid)
        return (c.rid, r.cached_tokens, r.computed_tokens, r.status.value)
    out = await engine.generate(c.ids, max_tokens=1, priority=c.priority, rid=c.rid)
    return (c.rid, out.cached_tokens, out.prompt_tokens - out.cached_tokens, "done")


@cache
def _tiny() -> Any:
    from agentwarm.engines.local.model import load_model

    return load_model("tiny", seed=0)


def make(kind: str) -> tuple[Engine, Scheduler]:
    if kind == "fake":
        fake = FakeEngine(seconds_per_token=0, seconds_per_output_token=0, chunk_size=CHUNK)
        return fake, fake.scheduler
    from agentwarm.engines.local import LocalEngine

    local = LocalEngine(_tiny(), chunk_size=CHUNK)
    return local, local.scheduler


async def play(
    kind: str, first: Call, at: tuple[str, int], rest: list[Call]
) -> tuple[list[tuple[str, str, int, int]], list[Any]]:
    """Run ``first``; when its step starting at ``at`` is about to run, submit ``rest``.

    Returns the logged steps and the answers (``first``'s, then ``rest``'s)."""
    engine, sched = make(kind)
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[Any]] = []
    submitted = threading.Event()
    fake = engine if isinstance(engine, FakeEngine) else None
    preempts = any(c.priority > first.priority for c in rest if c.kind != "abort")

    def submit_rest() -> None:
        tasks.extend(loop.create_task(call(engine, c)) for c in rest)
        loop.call_soon(submitted.set)  # after the new tasks have handed their requests over

    def hook(event: StepEvent) -> None:
        if fake is not None and event.rid != first.rid:
            fake.seconds_per_token = 0  # the newcomers run at no cost
        if submitted.is_set() or tasks or (event.rid, event.start) != at:
            return
        if fake is not None:
            if preempts:
                fake.seconds_per_token = SLOW  # this chunk waits until the newcomer cuts it
            submit_rest()
            return
        loop.call_soon_threadsafe(submit_rest)
        assert submitted.wait(WAIT_S), "the rest of the scenario was never submitted"

    sched.step_hook = hook
    try:
        answers = [await call(engine, first)]
        answers += await asyncio.gather(*tasks)
        assert tasks, "the scenario never reached its trigger step"
        return [(e.rid, e.kind, e.start, e.stop) for e in sched.events], answers
    finally:
        await engine.aclose()


ENGINES = ["fake", "local"]


@pytest.mark.parametrize("kind", ENGINES)
async def test_live_work_interrupts_speculative_and_queued_work_runs_in_order(kind: str) -> None:
    first = Call("first", "prefill", tuple(ids(1, 20)))
    rest = [
        Call("s1", "prefill", tuple(ids(2, 20))),
        Call("s2", "prefill", tuple(ids(3, 20))),
        Call("live", "generate", tuple(ids(4, 20)), LIVE),
    ]
    events, answers = await play(kind, first, ("first", 0), rest)
    assert events == [
        ("first", "interrupted", 0, 16),  # nothing of it was kept
        ("live", "prefill", 0, 16),
        ("live", "prefill", 16, 20),
        ("first", "prefill", 0, 16),
        ("first", "prefill", 16, 20),
        ("s1", "prefill", 0, 16),
        ("s1", "prefill", 16, 20),
        ("s2", "prefill", 0, 16),
        ("s2", "prefill", 16, 20),
    ]
    assert answers == [
        ("first", 0, 20, "done"),
        ("s1", 0, 20, "done"),
        ("s2", 0, 20, "done"),
        ("live", 0, 20, "done"),
    ]


@pytest.mark.parametrize("kind", ENGINES)
async def test_live_request_over_an_inflight_prefill_promotes_it(kind: str) -> None:
    """The live request computes only what the prefill had not; the prefill then finds the
    rest cached and reports it as cached: cached + computed is the prompt for both."""
    prefix = ids(5, 64)
    spec = Call("spec", "prefill", tuple(prefix))
    live = Call("live", "generate", (*prefix, *ids(6, 8)), LIVE)
    events, answers = await play(kind, spec, ("spec", 32), [live])
    assert events == [
        ("spec", "prefill", 0, 16),
        ("spec", "prefill", 16, 32),
        ("spec", "interrupted", 32, 48),
        ("live", "prefill", 32, 48),
        ("live", "prefill", 48, 64),
        ("live", "prefill", 64, 72),
    ]
    assert answers == [("spec", 32, 32, "done"), ("live", 32, 40, "done")]


@pytest.mark.parametrize("kind", ENGINES)
async def test_abort_lets_the_running_chunk_finish_and_keeps_it(kind: str) -> None:
    spec = Call("spec", "prefill", tuple(ids(7, 64)))
    events, answers = await play(kind, spec, ("spec", 16), [Call("spec", "abort")])
    assert events == [("spec", "prefill", 0, 16), ("spec", "prefill", 16, 32)]
    assert answers == [("spec", 0, 32, "aborted"), None]


# --- the fake's own surface ----------------------------------------------------------------


async def test_outputs_depend_only_on_the_prompt_and_seed() -> None:
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    hello = engine.encode("Hello, agent.")
    assert (await engine.generate(hello, max_tokens=12)).text == "xtgag mstn o"
    sampled = await engine.generate(hello, max_tokens=12, temperature=0.7, seed=3)
    assert sampled.text == " z  u f bkjr"
    odd = await engine.generate([300, -1, 5], max_tokens=5)
    assert odd.token_ids == (98, 101, 119, 103, 32)
    await engine.aclose()


async def test_stream_yields_one_token_per_chunk_then_the_completion() -> None:
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    prompt = engine.encode("stream me")
    chunks = [c async for c in engine.generate_stream(prompt, max_tokens=5)]
    done = chunks[-1].completion
    assert done is not None
    assert done.token_ids == (await engine.generate(prompt, max_tokens=5)).token_ids
    assert [c.token_ids for c in chunks[:-1]] == [(t,) for t in done.token_ids]
    assert "".join(c.text for c in chunks) == done.text
    await engine.aclose()


async def test_generated_tokens_are_cached_as_on_the_local_engine() -> None:
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    prompt = engine.encode("question? ")
    first = await engine.generate(prompt, max_tokens=6)
    # The state holds the prompt and the 5 fed-back tokens (the last one is never fed).
    follow = await engine.generate([*prompt, *first.token_ids, *engine.encode("more")])
    assert follow.cached_tokens == len(prompt) + 6 - 1
    await engine.aclose()


async def test_prefill_answers() -> None:
    engine = FakeEngine(seconds_per_token=0)
    done = await engine.prefill([1, 2, 3, 4])
    again = await engine.prefill([1, 2, 3, 4])
    assert (done.status, done.cached_tokens, done.computed_tokens) == (PrefillStatus.DONE, 0, 4)
    assert (again.status, again.cached_tokens, again.computed_tokens) == (PrefillStatus.DONE, 4, 0)
    await engine.aclose()


async def test_a_speculative_prefill_is_pinned_until_aborted() -> None:
    engine = FakeEngine(seconds_per_token=0, max_cached_tokens=4)
    await engine.prefill([1, 2, 3, 4], rid="kept")
    await engine.generate([9, 8, 7, 6, 5], max_tokens=1)  # finds no room: the prefix is pinned
    assert (await engine.generate([1, 2, 3, 4, 5], max_tokens=1)).cached_tokens == 4
    await engine.abort("kept")
    await engine.generate([9, 8, 7, 6, 5], max_tokens=1)  # evicts the prefix now
    assert (await engine.generate([1, 2, 3, 4, 5], max_tokens=1)).cached_tokens == 0
    await engine.aclose()


async def test_log_stats_and_aborts() -> None:
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0, log_limit=3)
    await engine.prefill([1, 2, 3, 4], rid="p", session="s1")
    await engine.generate([1, 2, 3, 4, 5], rid="g", max_tokens=2)
    assert [(r.rid, r.kind, r.session, r.cached_tokens, r.computed_tokens) for r in engine.log] == [
        ("p", "prefill", "s1", 0, 4),
        ("g", "generate", None, 4, 1),
    ]
    stats = await engine.stats()
    counts = (stats.requests, stats.prompt_tokens, stats.hit_tokens, stats.computed_tokens)
    assert counts == (2, 9, 4, 5)
    for i in range(5):
        await engine.abort(f"a{i}")
    assert engine.aborts == ["a2", "a3", "a4"]
    await engine.flush_cache()  # between steps, like LocalEngine: cache, pins and counters
    stats = await engine.stats()
    assert (stats.cached_tokens, stats.requests, stats.evicted_tokens) == (0, 0, 0)
    await engine.aclose()


async def test_a_cancelled_caller_aborts_its_request_at_the_next_chunk() -> None:
    engine = FakeEngine(seconds_per_token=0, chunk_size=CHUNK)
    task = asyncio.create_task(engine.prefill(ids(8, 64), rid="gone"))

    def hook(event: StepEvent) -> None:
        if event.start == 16:
            task.cancel()

    engine.scheduler.step_hook = hook
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: not engine.scheduler.has_work, what="the abort to be applied")
    assert [(r.rid, r.status, r.computed_tokens) for r in engine.log] == [("gone", "aborted", 32)]
    assert engine.aborts == []  # only calls of abort() are listed
    await engine.aclose()


async def test_an_aborted_generate_raises_with_its_counts() -> None:
    # A decode step of any cost yields to the loop: the abort lands after the second token.
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=1e-6)
    loop = asyncio.get_running_loop()
    aborting: list[asyncio.Task[None]] = []

    def hook(event: StepEvent) -> None:
        if event.kind == "decode" and not aborting:
            aborting.append(loop.create_task(engine.abort("g")))

    engine.scheduler.step_hook = hook
    with pytest.raises(RequestAborted) as info:
        await engine.generate([3] * 10, rid="g", max_tokens=4)
    assert (info.value.cached_tokens, info.value.computed_tokens) == (0, 10)
    assert [e.kind for e in engine.scheduler.events] == ["prefill", "decode"]
    assert engine.log[-1].status == "aborted" and engine.aborts == ["g"]
    await engine.aclose()


async def test_close_ends_the_step_in_flight_and_fails_queued_requests() -> None:
    engine = FakeEngine(seconds_per_token=SLOW)
    prefill = asyncio.create_task(engine.prefill([1] * 8))
    gen = asyncio.create_task(engine.generate([2] * 8))
    await until(lambda: engine.scheduler.events, what="the first step")
    await engine.aclose()
    for task in (prefill, gen):
        with pytest.raises(EngineUnavailable, match="FakeEngine was closed"):
            await task
    with pytest.raises(EngineUnavailable, match="FakeEngine is closed"):
        await engine.generate([1])
    await engine.aclose()  # idempotent
