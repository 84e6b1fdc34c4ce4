"""The real sglang-router (PyPI ``sglang-router``, a Rust binary) in front of two ``agentwarm
serve`` workers on loopback, driven by SGLangEngine.

Checked: the router accepts the workers (it probes ``/health``, ``/server_info``, ``/model_info``
at start-up); with ``--policy cache_aware`` a run's prefetch and its real request land on one
worker; with a routing-key policy (``manual`` on the CLI, ``consistent_hashing`` through the
Python ``RouterArgs``) plus ``X-SMG-Routing-Key`` likewise, whatever the prompt. Where requests
land is read from each worker's ``/metrics``. Skipped when the router is not installed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Iterator

import pytest

from agentwarm.engines.base import PrefillStatus, new_rid
from agentwarm.engines.sglang import SGLangEngine
from tests.conftest_server import (
    RouterProcess,
    ServeProcess,
    needs_router,
    requests_per_worker,
    serve,
)

pytestmark = needs_router


def prompt(n: int) -> list[int]:
    rng = random.Random(new_rid())
    return [rng.randrange(1, 250) for _ in range(n)]


@pytest.fixture(scope="module")
def workers() -> Iterator[list[ServeProcess]]:
    with serve() as first, serve() as second:
        yield [first, second]


@pytest.fixture
def router(request: pytest.FixtureRequest, workers: list[ServeProcess]) -> Iterator[RouterProcess]:
    proc = RouterProcess([w.url for w in workers], request.param)
    yield proc
    proc.stop()


@pytest.fixture
async def engine(router: RouterProcess) -> AsyncIterator[SGLangEngine]:
    engine = await SGLangEngine.from_url(router.url, routing_header=True, wait_s=30)
    yield engine
    await engine.aclose()


async def one_run(
    engine: SGLangEngine, workers: list[ServeProcess], run: str, prefix: list[int]
) -> int:
    """Prefetch ``prefix``, then the real request; return the worker that served both."""
    before = requests_per_worker(workers)
    warm = await engine.prefill(prefix, session=run, namespace="router")
    real = await engine.generate(
        [*prefix, *prompt(4)], max_tokens=2, session=run, namespace="router"
    )
    after = requests_per_worker(workers)
    delta = [a - b for a, b in zip(after, before, strict=True)]
    assert warm.status is PrefillStatus.DONE
    assert sorted(delta) == [0, 2], f"run {run}: requests per worker {delta}"
    assert real.cached_tokens >= len(prefix)  # the prefetch warmed the worker that served it
    return delta.index(2)


@pytest.mark.parametrize("router", ["cache_aware"], indirect=True)
async def test_cache_aware_keeps_a_runs_prefetch_and_request_together(
    engine: SGLangEngine, workers: list[ServeProcess]
) -> None:
    assert engine.model_name.startswith("fake")  # /get_model_info answered through the router
    assert engine.encode("ok") == [111, 107]  # and named the byte tokenizer
    for i in range(6):
        await one_run(engine, workers, f"run-{i}", prompt(400))


@pytest.mark.parametrize("router", ["manual", "consistent_hashing"], indirect=True)
@pytest.mark.slow
async def test_routing_key_keeps_a_run_on_one_worker_whatever_the_prompt(
    engine: SGLangEngine, workers: list[ServeProcess], caplog: pytest.LogCaptureFixture
) -> None:
    shared = prompt(300)  # one prompt for every run: only the header can tell them apart
    used = {await one_run(engine, workers, f"run-{i}", shared) for i in range(16)}
    assert used == {0, 1}  # 16 keys on 2 workers: all on one would mean the key is ignored
    with caplog.at_level(logging.WARNING, logger="agentwarm.engines.sglang"):
        await engine.abort(new_rid())  # the router has no /abort_request: logged, not raised
        await engine.abort(new_rid())
    assert sum("no /abort_request" in r.message for r in caplog.records) == 1
