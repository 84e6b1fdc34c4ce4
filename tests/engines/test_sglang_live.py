"""SGLangEngine against a live server over HTTP.

By default the server is an ``agentwarm serve`` subprocess on loopback, once with the fake
engine and once with the embedded torch engine (``--engine local --model tiny``). With
``AGENTWARM_SGLANG_URL=http://host:port`` the same assertions run against a real SGLang server
(launch it with ``--enable-priority-scheduling --enable-metrics``; the priority test is skipped
when ``/server_info`` says priority scheduling is off). Wire compatibility is the point: nothing
below depends on which server answers, except where a comment says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest

from agentwarm.engines.base import PrefillStatus, Priority, new_rid
from agentwarm.engines.sglang import SGLangEngine
from agentwarm.errors import EngineUnavailable
from tests.conftest_server import free_port, serve
from tests.waiting import until

REAL_URL = os.environ.get("AGENTWARM_SGLANG_URL")
REAL = REAL_URL is not None
# Token ids valid for any vocabulary: the byte tokenizer of agentwarm serve, or a real LLM's.
LOW, HIGH = (100, 10_000) if REAL else (1, 250)
# Prompt lengths that take seconds to prefill: ~4 s on the fake engine (served with a slower
# prefill cost, FAKE_SERVE), ~6 s on the tiny torch model (both have an 8,192-token context), and
# on a GPU the whole context.
LONG = {"fake": 8_000, "local": 6_000}
FAKE_SERVE = ("--fake-seconds-per-token", "5e-4")
QUEUED = {"fake": 3_000, "local": 1_000}


@dataclass(frozen=True)
class Target:
    url: str
    kind: str  # "fake" | "local" (agentwarm serve --engine KIND) | "sglang" (a real server)


@pytest.fixture(scope="module", params=["sglang"] if REAL else ["fake", "local"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if REAL_URL:
        yield Target(REAL_URL.rstrip("/"), "sglang")
        return
    kind = request.param
    with serve("--engine", kind, *(FAKE_SERVE if kind == "fake" else ())) as server:
        yield Target(server.url, kind)


@pytest.fixture
async def engine(target: Target) -> AsyncIterator[SGLangEngine]:
    engine = await SGLangEngine.from_url(target.url, wait_s=30)
    yield engine
    await engine.aclose()


def prompt(n: int) -> list[int]:
    """A prompt no other test shares (its first tokens are random)."""
    rng = random.Random(new_rid())
    return [rng.randrange(LOW, HIGH) for _ in range(n)]


async def running_requests(engine: SGLangEngine) -> float:
    return (await engine.server_metrics()).get("sglang:num_running_reqs", 0.0)


async def wait_in_flight(engine: SGLangEngine, task: asyncio.Task[object]) -> None:
    """Until the server reports a running request (or 5 s, for servers without /metrics)."""

    async def running() -> bool:
        return task.done() or await running_requests(engine) >= 1

    with contextlib.suppress(TimeoutError):
        await until(running, timeout_s=5.0, what="a running request")


async def long_prompt_len(engine: SGLangEngine, target: Target) -> int:
    if target.kind in LONG:
        return LONG[target.kind]
    info = await engine.server_info()
    return int(info.get("max_req_input_len") or info.get("context_length") or 32_000) - 8


async def test_prefill_then_generate_on_the_same_prefix_hits_the_cache(
    engine: SGLangEngine,
) -> None:
    prefix = prompt(600)
    warm = await engine.prefill(prefix, namespace="live-a", session="run-1")
    assert warm.status is PrefillStatus.DONE
    assert (warm.prompt_tokens, warm.cached_tokens) == (600, 0)
    if not REAL:
        assert warm.computed_tokens == 600
    out = await engine.generate([*prefix, *prompt(5)], max_tokens=4, namespace="live-a")
    assert out.cached_tokens >= len(prefix)
    assert out.prompt_tokens == 605
    assert 1 <= len(out.token_ids) <= 4
    assert out.finish_reason in ("length", "stop")
    assert 0 < out.ttft_s <= out.e2e_s


async def test_abort_of_an_in_flight_prefill(engine: SGLangEngine, target: Target) -> None:
    ids = prompt(await long_prompt_len(engine, target))
    rid = new_rid()
    task = asyncio.create_task(engine.prefill(ids, rid=rid, namespace="live-abort"))
    await wait_in_flight(engine, task)
    await engine.abort(rid)
    result = await asyncio.wait_for(task, 30)
    assert result.status is PrefillStatus.ABORTED
    assert result.rid == rid
    assert result.computed_tokens < len(ids)
    if not REAL:  # agentwarm serve reports the chunks computed before the abort; they stay cached
        assert result.computed_tokens > 0
        kept = result.computed_tokens
        again = await engine.prefill(ids[: kept + 10], namespace="live-abort")
        assert again.cached_tokens == kept
    follow_up = await engine.generate(prompt(50), max_tokens=2)  # the server keeps serving
    assert follow_up.prompt_tokens == 50


@pytest.mark.slow
async def test_live_request_runs_before_queued_speculative_prefills(
    engine: SGLangEngine, target: Target
) -> None:
    if REAL and not (await engine.server_info()).get("enable_priority_scheduling"):
        pytest.skip("the SGLang server runs without --enable-priority-scheduling")
    n_tokens = QUEUED.get(target.kind) or await long_prompt_len(engine, target) // 4
    finished: list[str] = []

    async def run(label: str, coro: object) -> None:
        await coro  # type: ignore[misc]
        finished.append(label)

    speculative = [
        asyncio.create_task(run(f"spec{i}", engine.prefill(prompt(n_tokens)))) for i in range(4)
    ]
    await wait_in_flight(engine, speculative[0])  # type: ignore[arg-type]
    live = asyncio.create_task(
        run("live", engine.generate(prompt(200), max_tokens=2, priority=Priority.LIVE))
    )
    await asyncio.wait_for(asyncio.gather(live, *speculative), 60)
    assert sorted(finished) == ["live", "spec0", "spec1", "spec2", "spec3"]
    # FIFO would finish the live request last (index 4); priority lets at most the prefill
    # that was already running finish first.
    assert finished.index("live") <= 1, finished


async def test_namespaces_never_share_cached_tokens(engine: SGLangEngine) -> None:
    prefix = prompt(400)
    await engine.prefill(prefix, namespace="tenant-a")
    query = [*prefix, *prompt(3)]
    other = await engine.generate(query, max_tokens=1, namespace="tenant-b")
    assert other.cached_tokens == 0
    unsalted = await engine.generate(query, max_tokens=1)
    # The default namespace holds other tests' prompts: a leading token or two may match one
    # of them by chance (1 in 249 per prompt on the byte-level fake), tenant-a's 400 never.
    assert unsalted.cached_tokens < 3
    same = await engine.generate(query, max_tokens=1, namespace="tenant-a")
    assert same.cached_tokens >= len(prefix)


async def test_streaming_yields_tokens_then_the_completion(engine: SGLangEngine) -> None:
    ids = prompt(300)
    chunks = [c async for c in engine.generate_stream(ids, max_tokens=6, namespace="stream")]
    final = chunks[-1].completion
    assert final is not None
    assert all(c.completion is None for c in chunks[:-1])
    assert tuple(t for c in chunks for t in c.token_ids) == final.token_ids
    assert "".join(c.text for c in chunks) == final.text
    assert 1 <= len(final.token_ids) <= 6 and final.prompt_tokens == 300
    assert 0 < final.ttft_s <= final.e2e_s
    if not REAL:
        assert len(final.token_ids) == 6 and final.finish_reason == "length"
        assert final.text == engine.decode(final.token_ids)


async def test_stats_count_this_traffic(engine: SGLangEngine) -> None:
    before = await engine.stats()
    await engine.prefill(prompt(64))
    after = await engine.stats()
    assert after.requests - before.requests >= 1
    assert after.prompt_tokens - before.prompt_tokens >= 64
    if not REAL:
        assert after.requests - before.requests == 1
        assert after.prompt_tokens - before.prompt_tokens == 64


async def test_tokenizer_comes_from_the_server(engine: SGLangEngine) -> None:
    if engine.tokenizer is None:
        pytest.skip("no local tokenizer matches this server's tokenizer_path")
    ids = engine.encode("Hello, agent.")
    assert ids and engine.decode(ids) == "Hello, agent."


async def test_unreachable_server_raises_with_its_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    engine = SGLangEngine(url, tokenizer="byte", connect_timeout=2)
    with pytest.raises(EngineUnavailable, match=rf"{url}/generate: cannot reach") as info:
        await engine.prefill([1, 2, 3])
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    with pytest.raises(EngineUnavailable, match="not ready"):
        await SGLangEngine.from_url(url, wait_s=0.2)
    await engine.aclose()
