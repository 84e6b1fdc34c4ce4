"""MultiWorkerEngine over two live ``agentwarm serve`` workers: affinity, aborts, failover.

Where each request landed is read from the workers' own ``/metrics``, not from the client.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator

import pytest

from agentwarm.engines.base import PrefillStatus, new_rid
from agentwarm.engines.routing import MultiWorkerEngine
from agentwarm.errors import EngineUnavailable
from tests.conftest_server import ServeProcess, free_port, requests_per_worker, serve
from tests.waiting import until


def prompt(n: int) -> list[int]:
    rng = random.Random(new_rid())
    return [rng.randrange(1, 250) for _ in range(n)]


def sessions_on(engine: MultiWorkerEngine, url: str, n: int) -> list[str]:
    """``n`` session keys that the ring sends to worker ``url``."""
    picked = [s for s in (f"run-{i}" for i in range(1000)) if engine.route(s) == url]
    return picked[:n]


@pytest.fixture(scope="module")
def workers() -> Iterator[list[ServeProcess]]:
    with serve() as first, serve() as second:
        yield [first, second]


@pytest.fixture
async def engine(workers: list[ServeProcess]) -> AsyncIterator[MultiWorkerEngine]:
    engine = await MultiWorkerEngine.from_urls([w.url for w in workers], wait_s=30)
    yield engine
    await engine.aclose()


async def test_a_runs_requests_all_land_on_one_worker(
    workers: list[ServeProcess], engine: MultiWorkerEngine
) -> None:
    urls = [w.url for w in workers]
    assert list(engine.workers) == urls
    runs = sessions_on(engine, urls[0], 3) + sessions_on(engine, urls[1], 3)
    for run in runs:
        before = requests_per_worker(workers)
        prefix = prompt(300)
        warm = await engine.prefill(prefix, session=run, namespace=run)
        out = await engine.generate([*prefix, 9, 9], max_tokens=2, session=run, namespace=run)
        stream = [c async for c in engine.generate_stream([*prefix, 8], session=run, namespace=run)]
        after = requests_per_worker(workers)
        target = urls.index(engine.route(run))
        assert [a - b for a, b in zip(after, before, strict=True)] == [
            3 if i == target else 0 for i in range(2)
        ]
        assert warm.status is PrefillStatus.DONE
        assert out.cached_tokens >= len(prefix)  # the prefetch warmed this very worker
        final = stream[-1].completion
        assert final is not None and final.cached_tokens >= len(prefix)


async def test_aborts_reach_the_worker_that_runs_the_request(
    workers: list[ServeProcess], engine: MultiWorkerEngine
) -> None:
    urls = [w.url for w in workers]
    for target in (0, 1):
        run = sessions_on(engine, urls[target], 1)[0]
        before = [w.metrics()["sglang:num_aborted_requests_total"] for w in workers]
        rid = new_rid()
        task = asyncio.create_task(engine.prefill(prompt(8_000), rid=rid, session=run))
        worker = workers[target]
        await until(
            lambda t=task, w=worker: t.done() or w.metrics()["sglang:num_running_reqs"] >= 1,
            what="the prefill to run on its worker",
        )
        await engine.abort(rid)
        result = await asyncio.wait_for(task, 30)
        after = [w.metrics()["sglang:num_aborted_requests_total"] for w in workers]
        assert result.status is PrefillStatus.ABORTED
        assert [a - b for a, b in zip(after, before, strict=True)] == [
            1 if i == target else 0 for i in range(2)
        ]


@pytest.mark.slow
async def test_killing_a_worker_mid_run_moves_its_runs_and_drops_its_speculation() -> None:
    with serve() as survivor, serve() as victim:
        engine = await MultiWorkerEngine.from_urls([survivor.url, victim.url], retry_down_s=60)
        stay = sessions_on(engine, survivor.url, 1)[0]
        moving, moving_too = sessions_on(engine, victim.url, 2)
        prefix = prompt(200)
        await engine.prefill(prefix, session=stay, namespace=stay)

        # On the victim: a live request running and a speculative prefill queued behind it.
        live = asyncio.create_task(engine.generate(prompt(8_000), max_tokens=3, session=moving))
        await until(lambda: victim.metrics()["sglang:num_running_reqs"] >= 1, what="live running")
        speculative = asyncio.create_task(engine.prefill(prompt(5_000), session=moving_too))
        await until(lambda: victim.metrics()["sglang:num_running_reqs"] >= 2, what="both running")
        served_before = survivor.metrics()["sglang:num_requests_total"]
        victim.kill()

        out = await asyncio.wait_for(live, 30)  # retried once, on the survivor
        assert out.prompt_tokens == 8_000 and len(out.token_ids) == 3
        with pytest.raises(EngineUnavailable, match=victim.url):
            await asyncio.wait_for(speculative, 30)  # dropped: the runtime counts it
        assert survivor.metrics()["sglang:num_requests_total"] == served_before + 1
        assert list(engine.down_workers()) == [victim.url]

        # The victim's runs now go to the survivor; the survivor's runs did not move.
        assert engine.route(moving) == engine.route(moving_too) == survivor.url
        assert engine.route(stay) == survivor.url
        again = await engine.generate([*prefix, 1], max_tokens=1, session=stay, namespace=stay)
        assert again.cached_tokens >= len(prefix)
        moved = await engine.prefill(prompt(100), session=moving_too)
        assert moved.status is PrefillStatus.DONE
        assert survivor.metrics()["sglang:num_requests_total"] == served_before + 3
        await engine.aclose()


async def test_tokenizer_comes_from_a_reachable_worker(workers: list[ServeProcess]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    engine = MultiWorkerEngine([dead, workers[0].url])  # as `agentwarm run --engine A,B` builds it
    assert engine.encode("hé") == [104, 195, 169]  # read from the live worker's /model_info
    assert engine.decode([104, 105]) == "hi"
    await engine.aclose()
