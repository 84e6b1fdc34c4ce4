"""1,000 concurrent runs on one engine (issue 16): the speculative budget holds, every run
completes with the outputs of a run without prefetching, and no per-run state is left behind.

Counts and order only, no timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from agentwarm import FakeEngine, PrefetchPolicy
from agentwarm.engines.base import PrefillParams, PrefillResult, Priority
from agentwarm.runtime import PrefetchOutcome
from agentwarm.runtime.admission import admission_for

from .conftest import make_branching

RUNS = 1000
BUDGET = 8


class CountingEngine(FakeEngine):
    """Counts the speculative prefills in flight (called and not yet returned)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.in_flight = 0
        self.peak = 0
        self.speculative = 0

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        if params.priority >= Priority.LIVE:
            return await super().prefill_with(ids, params)
        self.in_flight += 1
        self.speculative += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super().prefill_with(ids, params)
        finally:
            self.in_flight -= 1


async def _run_all(policy: PrefetchPolicy, engine: FakeEngine) -> list[Any]:
    wf = make_branching(think_s=0.0)
    return await asyncio.gather(
        *[wf.run("hi", engine=engine, state={"seed": s}, policy=policy) for s in range(RUNS)]
    )


@pytest.mark.slow
async def test_thousand_concurrent_runs_hold_the_budget_and_all_complete():
    policy = PrefetchPolicy(max_prefills_per_s=1e9, max_speculative_in_flight=BUDGET)
    engine = CountingEngine(seconds_per_token=0, seconds_per_output_token=0)
    results = await _run_all(policy, engine)
    reactive = await _run_all(
        PrefetchPolicy.disabled(), FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    )

    assert len(results) == RUNS
    for got, want in zip(results, reactive, strict=True):
        assert got.path == want.path
        assert got.state["outputs"] == want.state["outputs"]
    # The budget held at the engine, and was used.
    assert engine.speculative > 0
    assert 1 <= engine.peak <= BUDGET
    admission = admission_for(engine)
    assert admission.peak_in_flight <= BUDGET
    # Over budget, speculation was dropped and counted, never queued.
    spec = [p for r in results for p in r.speculative_prefetches]
    dropped = [p for p in spec if p.outcome == PrefetchOutcome.DROPPED]
    assert dropped and admission.dropped >= len(dropped)
    assert all(p.outcome is not None for p in spec)
    # Nothing is left in flight or pending once the runs have returned.
    assert admission.in_flight == 0 and engine.in_flight == 0
    assert [t for t in asyncio.all_tasks() if _prefetch_task(t)] == []


def _prefetch_task(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` runs code of the prefetch package (a prefill request, an abort)."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    return frame is not None and frame.f_globals["__name__"].startswith(
        "agentwarm.runtime.prefetch"
    )
