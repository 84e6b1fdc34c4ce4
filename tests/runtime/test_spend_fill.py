"""Filling idle time (``PrefetchPolicy.fill_idle``): on an engine whose live requests preempt
speculation, a candidate the expected window held back is sent once the step's speculation has
all finished before its next live call, priced idle, one at a time; and the window's inputs
(what is in flight, the throughput) count engine time, not prompt lengths or waits."""

from __future__ import annotations

import asyncio
import math

import pytest

from agentwarm import Context, FakeEngine
from agentwarm._spec import MissReason, PrefetchKind
from agentwarm.engines.base import Priority
from agentwarm.runtime.admission import Admission, Limits, admission_for
from agentwarm.runtime.prefetch import sender as sender_mod
from agentwarm.runtime.prefetch.state import Prefetch
from agentwarm.runtime.records import PrefetchRecord
from tests.runtime import spend_workflow as sw
from tests.waiting import until


async def settled(ctx: Context) -> None:
    """Until the step's prefetches have ended and none was started by their ends."""
    while True:
        await until(lambda: ctx.prefetches_running == 0, what="the step's prefetches to end")
        for _ in range(3):  # an ended prefill's callbacks run on the next loop turns
            await asyncio.sleep(0)
        if ctx.prefetches_running == 0:
            return


async def no_wait(ctx: Context) -> None:
    """A tool call that returns at once: b's live call overtakes its prefetch."""


class Batching(FakeEngine):
    """FakeEngine declared as a server that batches speculation with live work (vLLM)."""

    preempts_speculation = False


def _records(result):  # type: ignore[no-untyped-def]
    return {p.target: p for p in result.steps[0].prefetches if p.speculative}


async def test_what_the_window_held_back_is_sent_once_the_engine_is_idle() -> None:
    session = sw.session(settled)
    sw.teach_window(session, 1000.0)  # about half of b's prefix: c past it (p 0.3 < 0.5)
    result = await sw.run(session)
    assert sw.sent(result) == ["b", "c"]
    records = _records(result)
    assert records["b"].filled is False and records["c"].filled is True
    # d and e (p 0.05) are below the idle price's threshold (0.1 / 1.1) even then.
    assert set(records) == {"b", "c"}
    assert result.path == ["a", "b"] and result.steps[1].prefetched
    # The first choice alone (fill_idle off) held c back: priced out.
    off_session = sw.session(settled)
    sw.teach_window(off_session, 1000.0)
    off = await sw.run(off_session, fill_idle=False)
    assert sw.sent(off) == ["b"]
    assert off.steps[0].prefetches[0].filled is False


async def test_an_engine_that_batches_speculation_is_not_filled() -> None:
    session = sw.session(settled)
    sw.teach_window(session, 1000.0)
    result = await sw.run(
        session, on=Batching(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
    )
    assert sw.sent(result) == ["b"]


async def test_a_candidate_that_starts_inside_the_window_is_priced_idle_in_full() -> None:
    # c (p 0.3, about 2000 new tokens) in a window of 1000: blended price 0.55, threshold
    # 0.355 > 0.3. On an engine that overtakes speculation its tokens past the window cost
    # live work nothing: priced idle, sent by the first choice (not a fill).
    preds = [("c", 0.3), ("b", 0.25), ("d", 0.05), ("e", 0.05)]
    session = sw.session(settled, preds)
    sw.teach_window(session, 1000.0)
    result = await sw.run(session)
    records = _records(result)
    assert sw.sent(result) == ["c", "b"]
    assert records["c"].filled is False and records["b"].filled is True
    batching = sw.session(settled, preds)
    sw.teach_window(batching, 1000.0)
    on = Batching(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
    assert sw.sent(await sw.run(batching, on=on)) == []  # neither is worth the blended price


async def test_spend_top_n_fills_nothing() -> None:
    session = sw.session(settled)
    sw.teach_window(session, 1000.0)
    top_n = await sw.run(session, spend="top_n", top_n=1)
    assert sw.sent(top_n) == ["b"]
    assert not any(p.filled for p in top_n.steps[0].prefetches)


async def test_a_live_call_before_the_speculation_ends_leaves_the_rest_priced_out() -> None:
    # c first (p 0.6, about 2 s of prefill here); b (p 0.3, the true next) held back by the
    # window. b's live call comes while c's prefetch runs: no idle time, b stays priced out.
    session = sw.session(no_wait, [("c", 0.6), ("b", 0.3), ("d", 0.05), ("e", 0.05)])
    sw.teach_window(session, 1000.0)
    result = await sw.run(
        session, on=FakeEngine(seconds_per_token=1e-3, seconds_per_output_token=1e-5)
    )
    assert sw.sent(result) == ["c"]
    assert result.path == ["a", "b"]
    miss = result.steps[1].miss
    assert miss is not None and miss.reason is MissReason.PRICED_OUT
    assert (miss.price, miss.rank) == (1.0, 1)


async def test_the_true_next_sent_by_a_fill_is_a_hit() -> None:
    second = [("c", 0.6), ("b", 0.3), ("d", 0.05), ("e", 0.05)]  # b past the window
    session = sw.session(settled, second)
    sw.teach_window(session, 1000.0)
    result = await sw.run(session)
    records = _records(result)
    assert records["b"].filled is True  # held back by the window (p 0.3), filled, the winner
    assert result.steps[1].prefetched and result.steps[1].miss is None
    off_session = sw.session(settled, second)
    sw.teach_window(off_session, 1000.0)
    off = await sw.run(off_session, fill_idle=False)
    miss = off.steps[1].miss
    assert miss is not None and miss.reason is MissReason.PRICED_OUT and miss.price == 1.0


async def test_work_in_flight_counts_what_each_prefill_computes_not_its_prompt() -> None:
    admission = Admission()
    a = admission.try_acquire(value=0.5, tokens=2000, limits=Limits(), work=60)
    b = admission.try_acquire(value=0.4, tokens=1500, limits=Limits())
    assert a is not None and b is not None
    assert admission.tokens_in_flight == 3500
    assert admission.work_in_flight == 60 + 1500  # b's work defaults to its prompt
    # A longer prefix of a's prefetch takes a's slot over: a's work leaves with it.
    longer = admission.try_acquire(value=0.5, tokens=2100, limits=Limits(), replace=a, work=100)
    assert longer is not None and admission.work_in_flight == 100 + 1500
    # b is a branch hit: its live request computes what is left, speculation holds none of it.
    admission.promote(b)
    assert b.value == math.inf and admission.work_in_flight == 100
    assert admission.tokens_in_flight == 1500 + 2100  # it still holds its cache
    admission.release(a)
    admission.release(b)
    admission.release(longer)
    assert admission.work_in_flight == 0 and admission.tokens_in_flight == 0


async def test_the_window_subtracts_the_work_in_flight_not_the_prompts() -> None:
    # Another run's prefill holds a 4000-token prompt of which 100 tokens are new: the window
    # of 5000 keeps 4900 (b and c fit), not 1000 (as when prompt lengths were subtracted).
    engine = sw.engine()
    admission = admission_for(engine)
    held = admission.try_acquire(value=1.0, tokens=4000, limits=Limits(), work=100)
    assert held is not None
    session = sw.session(settled)
    sw.teach_window(session, 5000.0)
    result = await sw.run(session, on=engine, fill_idle=False)
    assert sw.sent(result) == ["b", "c"]
    admission.release(held)
    whole = admission.try_acquire(value=1.0, tokens=4000, limits=Limits())  # all of it new
    assert whole is not None
    session = sw.session(settled)
    sw.teach_window(session, 5000.0)
    assert sw.sent(await sw.run(session, on=engine, fill_idle=False)) == ["b"]
    admission.release(whole)


@pytest.mark.parametrize("live_between", [False, True])
async def test_throughput_is_the_service_time_and_skips_prefills_a_live_call_overtook(
    live_between: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]
    monkeypatch.setattr(sender_mod.time, "perf_counter", lambda: now[0])
    gate = {1: asyncio.Event(), 2: asyncio.Event()}
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    calls: list[int] = []
    inner = engine.prefill_with

    async def gated(ids, params):  # type: ignore[no-untyped-def]
        n = len(calls) + 1
        calls.append(n)
        await gate[n].wait()
        return await inner(ids, params)

    engine.prefill_with = gated  # type: ignore[method-assign]
    heard: list[tuple[int, float]] = []
    s = sender_mod.Sender(
        engine=engine,
        admission=admission_for(engine).bind(Limits()),
        namespace="",
        run_id="r",
        timeout_s=30,
        on_prefill=lambda t, sec: heard.append((t, sec)),
    )

    def pf() -> Prefetch:
        rec = PrefetchRecord(
            target="x", probability=0.5, rank=0, kind=PrefetchKind.SPECULATIVE, tokens=0
        )
        return Prefetch(record=rec, span=None)  # type: ignore[arg-type]

    r1 = s.submit(pf(), list(range(100)), Priority.SPECULATIVE)
    r2 = s.submit(pf(), list(range(200, 250)), Priority.SPECULATIVE)
    assert r1 is not None and r2 is not None
    await until(lambda: len(calls) == 2)
    now[0] = 1.0
    gate[1].set()
    await r1.task  # type: ignore[misc]
    if live_between:
        s.live()
    now[0] = 3.0
    gate[2].set()
    await r2.task  # type: ignore[misc]
    assert heard[0] == (100, 1.0)
    # r2 waited behind r1 from 0 to 1: its service time is 2 s, not 3.
    assert heard[1:] == ([] if live_between else [(50, 2.0)])
    assert math.isfinite(heard[0][1])
