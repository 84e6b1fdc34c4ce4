"""The gateway in front of sglang-router (the real Rust router of PyPI ``sglang-router``) in
front of two ``agentwarm serve --engine fake`` workers, all on loopback: the openai SDK talks to
the gateway app (in-process) with its learner, for the supervisor → specialist workflow of
:mod:`tests.gateway.test_learner`.

The gateway has one upstream, the router; the router picks the worker. With a policy that
honours ``X-SMG-Routing-Key`` (``manual``, and ``consistent_hashing`` through the Python
``RouterArgs``), which the gateway sends with each live request and each prefetch of a session,
every request of a session reaches one worker (counted on each worker's ``/metrics``), so the
specialist's real request finds its prefetched prefix in that worker's cache. The router has no
``/abort_request``: a losing prefetch cannot be aborted through it, which the gateway logs and
survives. Skipped when the router is not installed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from agentwarm.engines.base import PrefillStatus, new_rid
from agentwarm.gateway.learner import Prefetch
from tests.conftest_server import (
    RouterProcess,
    ServeProcess,
    needs_router,
    requests_per_worker,
    serve,
)
from tests.gateway.test_learner import Gateway, make_gateway, one_run
from tests.waiting import until

pytestmark = needs_router

#: Sessions run until both workers have served one; past this many, the key is being ignored.
MAX_RUNS = 24
#: The runs it takes the learner to know the handoff and the specialist's prompt shape.
LEARNING_RUNS = 3


def sent_prefetches(gateway: Gateway, run: int) -> list[Prefetch]:
    """The prefetches the learner sent upstream for the session of ``run`` (not dropped)."""
    prefetches = gateway.hooks.learner._prefetches
    return [pf for pf in prefetches if pf.session == f"run-{run}" and pf.task is not None]


@pytest.fixture(scope="module")
def workers() -> Iterator[list[ServeProcess]]:
    with serve() as first, serve() as second:
        yield [first, second]


@pytest.fixture(params=["manual", "consistent_hashing"])
def router(request: pytest.FixtureRequest, workers: list[ServeProcess]) -> Iterator[RouterProcess]:
    for worker in workers:  # each test starts from empty caches
        assert httpx.post(f"{worker.url}/flush_cache", timeout=10).status_code == 200
    proc = RouterProcess([w.url for w in workers], request.param)
    yield proc
    proc.stop()


@pytest.fixture
async def gateway(router: RouterProcess, tmp_path: Path) -> AsyncIterator[Gateway]:
    gw = make_gateway(router.url, tmp_path)
    yield gw
    await gw.aclose()


@pytest.mark.slow
async def test_a_sessions_requests_and_prefetches_meet_on_one_worker_behind_the_router(
    gateway: Gateway, router: RouterProcess, workers: list[ServeProcess]
) -> None:
    assert gateway.upstream.urls == (router.url,)  # the router is the gateway's only upstream
    served: set[int] = set()
    run = 0
    while run < LEARNING_RUNS + 1 or len(served) < 2:
        assert run < MAX_RUNS, f"every session went to worker {served}: the key is ignored"
        before = requests_per_worker(workers)
        usage = await one_run(gateway.client, gateway.hooks, run)
        delta = [a - b for a, b in zip(requests_per_worker(workers), before, strict=True)]
        sent = sent_prefetches(gateway, run)
        # two live requests and every prefetch of the session, all on one worker
        assert sorted(delta) == [0, 2 + len(sent)], f"run {run}: requests per worker {delta}"
        served.add(delta.index(2 + len(sent)))
        hits = [pf for pf in sent if pf.outcome == "hit"]
        if run == 0:  # nothing learned yet: the specialist's prompt was not in the cache
            assert not hits and usage["cached"] < usage["prompt"] // 2
        if run >= LEARNING_RUNS:  # learned: prefetched during the handoff, found cached
            assert len(hits) == 1
            assert usage["cached"] >= usage["prompt"] - 64  # all but the new user turn
        for pf in hits:
            assert usage["cached"] >= pf.tokens  # the whole prefetched prefix was cached
        run += 1
    stats = gateway.hooks.stats()
    assert stats["requests"] == 2 * run
    assert stats["prefetch_hits"] >= run - LEARNING_RUNS
    assert stats["hit_cached_fraction"] == 1.0


def aborted(workers: list[ServeProcess]) -> int:
    return sum(int(w.metrics()["sglang:num_aborted_requests_total"]) for w in workers)


@pytest.mark.slow
async def test_a_loser_cannot_be_aborted_through_the_router_and_the_gateway_keeps_serving(
    gateway: Gateway,
    router: RouterProcess,
    workers: list[ServeProcess],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the learner does to a losing prefetch still running when its session's next request
    comes (``Upstream.abort``), here to one that the router has sent to a worker."""
    upstream = gateway.upstream
    await one_run(gateway.client, gateway.hooks, 0)  # the router's prefill client exists now
    aborted_before = aborted(workers)
    ids = [1 + i % 250 for i in range(4000)]  # ~0.8 s of prefill on the fake engine
    rid = new_rid()
    with caplog.at_level(logging.WARNING, logger="agentwarm.engines.sglang"):
        loser = asyncio.create_task(upstream.prefill(router.url, ids, rid=rid, session="loser"))
        await until(
            lambda: any(w.metrics()["sglang:num_running_reqs"] for w in workers),
            what="the prefill to reach a worker",
        )
        await upstream.abort(router.url, rid)  # the router answers 404: logged, not raised
        await upstream.abort(router.url, new_rid())  # and skipped from then on
        result = await loser
    assert sum("no /abort_request" in r.message for r in caplog.records) == 1
    # nothing aborted it: the loser ran to its end (at speculative priority)
    assert result.status is PrefillStatus.DONE and result.computed_tokens == len(ids)
    assert aborted(workers) == aborted_before
    before = requests_per_worker(workers)
    usage = await one_run(gateway.client, gateway.hooks, 1)  # the gateway goes on serving
    assert usage["cached"] >= usage["prompt"] - 64  # with its prefetch hit
    after = requests_per_worker(workers)
    assert sum(after) - sum(before) == 2 + len(sent_prefetches(gateway, 1))
