"""Admission of speculative prefills (issue 16): per engine, non-blocking, drops over budget.

No timing: counts and order only.
"""

from __future__ import annotations

import gc
import math
import weakref

import pytest

from agentwarm import FakeEngine, PrefetchPolicy
from agentwarm.engines.base import Priority
from agentwarm.runtime import PrefetchOutcome
from agentwarm.runtime.admission import Admission, Limits, admission_for

from .conftest import make_branching


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def speculative_prefills(engine: FakeEngine) -> list[str]:
    return [r.rid for r in engine.log if r.kind == "prefill" and r.priority < Priority.LIVE]


async def test_token_bucket_refuses_without_waiting_and_refills_at_the_rate():
    clock = Clock()
    a = Admission(clock=clock).bind(Limits(rate=2.0, max_in_flight=100))
    got = [a.try_acquire(value=0.5, tokens=10) for _ in range(3)]
    assert [t is not None for t in got] == [True, True, False]  # a burst of one second's worth
    assert (a.admitted, a.dropped) == (2, 1)
    clock.now = 0.5  # one more token at 2/s
    assert a.try_acquire(value=0.5, tokens=10) is not None
    assert a.try_acquire(value=0.5, tokens=10) is None
    assert (a.admitted, a.dropped) == (3, 2)


async def test_rate_zero_admits_nothing():
    a = Admission(clock=Clock()).bind(Limits(rate=0.0, max_in_flight=100))
    assert a.try_acquire(value=1.0, tokens=1) is None
    assert (a.admitted, a.dropped, a.in_flight) == (0, 1, 0)


async def test_over_budget_the_lowest_value_is_dropped_first():
    a = Admission(clock=Clock()).bind(Limits(rate=1e6, max_in_flight=2))
    stopped: list[str] = []
    low = a.try_acquire(value=0.1, tokens=5, stop=lambda: stopped.append("low"))
    mid = a.try_acquire(value=0.5, tokens=5, stop=lambda: stopped.append("mid"))
    assert low is not None and mid is not None and a.in_flight == 2
    # Worth less than everything in flight: refused.
    assert a.try_acquire(value=0.05, tokens=5) is None
    # Worth more than the lowest in flight: that one is preempted, the new one takes its slot
    # once it has ended (never two requests in one slot).
    high = a.try_acquire(value=0.9, tokens=5, stop=lambda: stopped.append("high"))
    assert high is not None and stopped == ["low"] and a.in_flight == 2
    assert high.after is low.done and not high.after.done()
    a.release(low)
    assert high.after.done() and a.in_flight == 2
    # A hit (value inf) is never preempted; nothing lower is left: refused.
    mid.value = math.inf
    high.value = math.inf
    assert a.try_acquire(value=0.99, tokens=5) is None
    a.release(mid)
    a.release(high)
    a.release(high)  # idempotent
    assert (a.in_flight, a.admitted, a.dropped, a.preempted) == (0, 3, 2, 1)


async def test_token_budget_from_capacity():
    shared = Admission(clock=Clock())
    shared.size(1000)
    limits = Limits.of(PrefetchPolicy(capacity_fraction=0.5, max_prefills_per_s=1e6), 1000)
    assert limits.max_tokens == 500
    assert Limits.of(PrefetchPolicy(), None).max_tokens is None  # capacity unknown: no cap
    a = shared.bind(limits)
    first = a.try_acquire(value=0.5, tokens=400)
    assert first is not None
    assert a.try_acquire(value=0.4, tokens=200) is None  # 600 > 500, nothing lower to preempt
    assert a.try_acquire(value=0.6, tokens=200) is not None  # preempts the 400-token one
    assert first.replaced


async def test_runs_with_different_policies_share_the_counts_and_keep_their_own_limits():
    """Each run is held to its own policy's limits against the engine's shared counts; a run
    starting with another policy changes nothing for the runs already going (it used to
    reconfigure the shared admission: the latest policy won for every run)."""
    shared = Admission(clock=Clock())
    strict = shared.bind(Limits(rate=1e6, max_in_flight=1))
    loose = shared.bind(Limits(rate=1e6, max_in_flight=3))
    assert strict.try_acquire(value=0.5, tokens=1) is not None
    assert not strict.may_admit(0.5)  # its one slot is taken
    assert loose.try_acquire(value=0.5, tokens=1) is not None
    assert loose.try_acquire(value=0.5, tokens=1) is not None
    assert not loose.may_admit(0.5)  # 3 in flight on the engine: its limit too
    assert strict.try_acquire(value=0.5, tokens=1) is None  # still 1 for the strict run
    assert (shared.in_flight, shared.admitted, shared.dropped) == (3, 3, 3)


async def test_two_policies_on_one_engine_each_get_their_own_rate():
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    wf = make_branching(think_s=0.0)
    shut = await wf.run(
        "x", engine=engine, state={"seed": 1}, policy=PrefetchPolicy(max_prefills_per_s=0)
    )
    open_ = await wf.run("x", engine=engine, state={"seed": 1}, policy=PrefetchPolicy())
    again = await wf.run(
        "x", engine=engine, state={"seed": 1}, policy=PrefetchPolicy(max_prefills_per_s=0)
    )
    outcomes = [{p.outcome for p in r.speculative_prefetches} for r in (shut, open_, again)]
    assert outcomes[0] == outcomes[2] == {PrefetchOutcome.DROPPED}
    assert PrefetchOutcome.DROPPED not in outcomes[1] and outcomes[1]


async def test_admission_is_per_engine_and_released_with_it():
    e1, e2 = FakeEngine(), FakeEngine()
    assert admission_for(e1) is admission_for(e1)
    assert admission_for(e1) is not admission_for(e2)
    released = weakref.ref(admission_for(e1))
    kept = weakref.ref(admission_for(e2))
    del e1
    gc.collect()
    assert released() is None  # the engine's admission went with it
    assert kept() is admission_for(e2)


async def test_limiter_held_shut_the_workflow_completes_identically_and_drops_every_prefetch():
    """A live step never waits for the limiter: with speculation admitted at rate 0 every run
    completes with the outputs and path of a run without prefetching, and every speculative
    prefetch is recorded as dropped; none reaches the engine."""
    shut = PrefetchPolicy(max_prefills_per_s=0)
    off = PrefetchPolicy.disabled()
    results = {}
    for name, policy in (("off", off), ("shut", shut)):
        engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
        wf = make_branching(think_s=0.0)
        results[name] = [
            await wf.run("hi", engine=engine, state={"seed": seed}, policy=policy)
            for seed in range(30)
        ]
        if name == "shut":
            assert speculative_prefills(engine) == []
            dropped = admission_for(engine).dropped
    for a, b in zip(results["off"], results["shut"], strict=True):
        assert a.path == b.path
        assert a.state["outputs"] == b.state["outputs"]
    spec = [p for r in results["shut"] for p in r.speculative_prefetches]
    assert spec and {p.outcome for p in spec} == {PrefetchOutcome.DROPPED}
    assert all(p.requests == 0 and p.computed_tokens == 0 for p in spec)
    assert dropped >= len(spec)  # a refused refresh counts too
    assert not any(s.prefetched for r in results["shut"] for s in r.steps)


async def test_over_the_rate_prefetches_are_dropped_not_queued():
    """With a bucket of one and (practically) no refill, the first prefetch on the engine is
    admitted and every later one dropped: the old limiter queued them (each run then waited
    for its prefetches at its end); now every run returns with its prefetches settled."""
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    wf = make_branching(think_s=0.0)
    policy = PrefetchPolicy(max_prefills_per_s=1e-9, refresh_after_llm=False, top_n=1)
    results = [
        await wf.run("hi", engine=engine, state={"seed": seed}, policy=policy) for seed in range(5)
    ]
    outcomes = [p.outcome for r in results for p in r.speculative_prefetches]
    assert len(outcomes) == 5
    assert PrefetchOutcome.DROPPED not in outcomes[:1]
    assert outcomes[1:] == [PrefetchOutcome.DROPPED] * 4
    assert len(speculative_prefills(engine)) == 1
    a = admission_for(engine)
    assert (a.admitted, a.dropped, a.in_flight) == (1, 4, 0)


@pytest.mark.parametrize("rate", [0.0, 1e-9])
async def test_confirmed_warm_ups_are_not_subject_to_admission(rate):
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    wf = make_branching(think_s=0.0)
    result = await wf.run(
        "hi", engine=engine, state={"seed": 1}, policy=PrefetchPolicy(max_prefills_per_s=rate)
    )
    first = result.steps[0]
    (nxt,) = first.next
    hit = [p for p in first.prefetches if p.speculative and p.outcome == PrefetchOutcome.HIT]
    confirmed = [p for p in first.prefetches if not p.speculative]
    if hit:  # the one admitted prefetch was the winner: it sent the whole prefix already
        assert rate > 0 and [p.target for p in hit] == [nxt] and confirmed == []
    else:  # nothing speculative reached the engine: the confirmed warm-up goes out regardless
        assert [(p.target, p.outcome) for p in confirmed] == [(nxt, PrefetchOutcome.HIT)]
