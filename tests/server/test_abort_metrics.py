"""Aborts in ``/metrics`` of ``agentwarm serve``: client disconnects count, aborted prompts don't
inflate ``sglang:prompt_tokens_total``, and an abandoned request leaves nothing in the log.

Counting rule (SGLang's: a request aborted while waiting is counted only as aborted): an aborted
request adds to ``sglang:num_aborted_requests_total`` and ``sglang:num_requests_total``, and to
the prompt/cached token counters only the prompt tokens the engine actually processed before the
abort (cached + computed), never its whole prompt.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.sglang import parse_metrics
from agentwarm.server import ServerConfig, create_app
from tests.conftest_server import ServeProcess
from tests.waiting import until

PROMPT = list(range(32, 96))  # 64 byte tokens
STREAMS = 20


@pytest.fixture(scope="module")
def local_server() -> Iterator[ServeProcess]:
    """``agentwarm serve --engine local --model tiny``: the embedded engine streams per token."""
    server = ServeProcess(["--engine", "local", "--model", "tiny"])
    try:
        yield server
    finally:
        server.stop()


def test_model_info_names_the_presets_built_in_tokenizer(local_server: ServeProcess) -> None:
    """A client (``SGLangEngine.from_url``) then uses Qwen2.5's tokenizer and chat template."""
    info = httpx.get(f"{local_server.url}/model_info", timeout=30).json()
    assert (info["agentwarm"]["tokenizer"], info["tokenizer_path"]) == ("qwen2.5", None)


async def first_event(client: httpx.AsyncClient, i: int) -> dict[str, Any]:
    """Open a streaming /generate, read its first SSE event, then drop the connection."""
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 1000, "temperature": 0},
        "stream": True,
        "rid": f"{i:032x}",
    }
    async with client.stream("POST", "/generate", json=body) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                event: dict[str, Any] = json.loads(line.removeprefix("data: "))
                return event
    raise AssertionError("stream ended without an event")


async def test_clients_that_disconnect_mid_stream_count_as_aborted(
    local_server: ServeProcess,
) -> None:
    before = local_server.metrics()
    async with httpx.AsyncClient(base_url=local_server.url, timeout=60) as client:
        events = await asyncio.gather(*(first_event(client, i) for i in range(STREAMS)))
    # every stream was still decoding when its client went away
    assert [e["meta_info"]["finish_reason"] for e in events] == [None] * STREAMS

    def delta(name: str) -> float:
        return local_server.metrics()[name] - before[name]

    await until(
        lambda: (
            delta("sglang:num_aborted_requests_total") >= STREAMS
            and local_server.metrics()["sglang:num_running_reqs"] == 0
        ),
        what=f"{STREAMS} aborted requests in /metrics",
        timeout_s=30.0,
    )
    assert delta("sglang:num_aborted_requests_total") == STREAMS
    assert delta("sglang:num_requests_total") == STREAMS
    # each prompt was fully prefilled before its first token: counted once, not more
    assert delta("sglang:prompt_tokens_total") == STREAMS * len(PROMPT)
    assert delta("sglang:generation_tokens_total") >= STREAMS
    local_server.stop()  # the log is complete once the server has exited
    log = "".join(local_server.output)
    assert "never retrieved" not in log, log
    assert "Traceback" not in log, log


# ---------------------------------------------------------------- in-process (ASGI) tests


@pytest.fixture
async def slow() -> AsyncIterator[FakeEngine]:
    engine = FakeEngine(seconds_per_token=1e-3, chunk_size=16)
    yield engine
    await engine.aclose()


def client_for(engine: FakeEngine) -> httpx.AsyncClient:
    app = create_app(engine, ServerConfig(), close_engine=False)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


async def metrics(client: httpx.AsyncClient) -> dict[str, float]:
    return parse_metrics((await client.get("/metrics")).text)


async def test_an_abort_storm_leaves_the_cache_hit_rate_alone(slow: FakeEngine) -> None:
    """Requests aborted before they ran add no prompt tokens (the hit rate fell 0.50 → 0.046)."""
    async with client_for(slow) as client:
        prefill = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 0}}
        await client.post("/generate", json=prefill)
        hit = await client.post("/generate", json={**prefill, "input_ids": PROMPT * 2})
        assert hit.json()["meta_info"]["cached_tokens"] == len(PROMPT)
        m = await metrics(client)
        assert m["sglang:cached_tokens_total"] / m["sglang:prompt_tokens_total"] == 64 / 192
        assert m["sglang:cache_hit_rate"] == 64 / 192

        # a long request holds the engine; 30 queued ones behind it (lower priority, so they
        # stay queued) are aborted before running
        blocker = {"input_ids": list(range(2000)), "sampling_params": {"max_new_tokens": 0}}
        running = asyncio.create_task(client.post("/generate", json={**blocker, "rid": "b" * 32}))
        await until(lambda: slow.chunks > 0, what="the blocker to start", timeout_s=30.0)
        queued = {"sampling_params": {"max_new_tokens": 4}, "priority": -1}
        storm = [
            asyncio.create_task(
                client.post(
                    "/generate", json={**queued, "input_ids": [200 + i] * 500, "rid": f"{i:032x}"}
                )
            )
            for i in range(30)
        ]

        async def all_queued() -> bool:
            return (await metrics(client))["sglang:num_running_reqs"] == 31

        await until(all_queued, what="the storm to queue", timeout_s=30.0)
        for i in range(30):
            abort = await client.post("/abort_request", json={"rid": f"{i:032x}"})
            assert abort.status_code == 200
        answers = [(await t).json() for t in storm]
        assert all(a["meta_info"]["finish_reason"]["type"] == "abort" for a in answers)
        assert all(a["meta_info"]["prompt_tokens"] == 500 for a in answers)  # the reply keeps it
        await client.post("/abort_request", json={"rid": "b" * 32})
        blocked = (await running).json()["meta_info"]
        processed = blocked["cached_tokens"] + blocked["computed_tokens"]
        assert 0 < processed < 2000

        after = await metrics(client)
        assert after["sglang:num_aborted_requests_total"] == 31
        assert after["sglang:num_requests_total"] == 33
        assert after["sglang:prompt_tokens_total"] == 192 + processed
        assert after["sglang:cached_tokens_total"] == 64
        assert after["sglang:cache_hit_rate"] == 64 / (192 + processed)
        stats = await slow.stats()
        assert (stats.prompt_tokens, stats.hit_tokens) == (192 + processed, 64)


async def test_a_stream_closed_early_leaves_no_unretrieved_future(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The embedded engine: closing its stream aborts the request; the abort's RequestAborted,
    which nobody reads, must not be logged as "Future exception was never retrieved"."""
    from agentwarm.engines.local import LocalEngine

    engine = LocalEngine("tiny")
    try:
        stream = engine.generate_stream(PROMPT, max_tokens=1000, rid="closed-early")
        first = await anext(stream)
        assert first.completion is None
        await stream.aclose()  # type: ignore[attr-defined]
        await until(
            lambda: engine.scheduler.traffic.aborted == 1,
            what="the abort to reach the engine",
            timeout_s=30.0,
        )
        # The request left the engine: its rid may be used again (a rid in flight is refused).
        again = await engine.generate(PROMPT, max_tokens=1, rid="closed-early")
        assert again.finish_reason != "abort"
        del stream
        await asyncio.sleep(0)  # let the future's done callbacks run
        gc.collect()
    finally:
        await engine.aclose()
    assert "never retrieved" not in caplog.text
