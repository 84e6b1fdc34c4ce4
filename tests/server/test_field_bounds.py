"""Memory outside the cache budget: every identifier ``agentwarm serve`` keeps from a request is
bounded (256 bytes of UTF-8, else 400 naming the field and the limit), and ``FakeEngine`` keeps
a bounded history of requests and aborts while counting all of them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agentwarm.engines.fake import DEFAULT_LOG_LIMIT, FakeEngine
from agentwarm.engines.namespace import MAX_FIELD_BYTES
from agentwarm.engines.sglang import parse_metrics
from agentwarm.server import ServerConfig, create_app

PREFILL = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 0}}
AT_LIMIT = "é" * (MAX_FIELD_BYTES // 2)  # 256 bytes of UTF-8 (128 characters)


def client_for(engine: FakeEngine) -> httpx.AsyncClient:
    app = create_app(engine, ServerConfig(), close_engine=False)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    fake = FakeEngine(seconds_per_token=0.0, seconds_per_output_token=0.0)
    yield fake
    await fake.aclose()


def message(resp: httpx.Response) -> str:
    assert resp.status_code == 400, resp.text
    text: str = resp.json()["error"]["message"]
    return text


@pytest.mark.parametrize("field", ["rid", "session_id", "routing_key", "cache_salt", "extra_key"])
@pytest.mark.parametrize("stream", [False, True])
async def test_identifiers_over_256_bytes_are_a_400_naming_the_field(
    engine: FakeEngine, field: str, stream: bool
) -> None:
    async with client_for(engine) as client:
        ok = await client.post("/generate", json={**PREFILL, field: AT_LIMIT, "stream": stream})
        assert ok.status_code == 200
        over = await client.post(
            "/generate", json={**PREFILL, field: AT_LIMIT + "x", "stream": stream}
        )
        assert f"{field} is 257 bytes; the limit is 256 bytes of UTF-8" in message(over)
        huge = await client.post("/generate", json={**PREFILL, field: "s" * 50_000})
        assert f"{field} is 50000 bytes; the limit is 256 bytes" in message(huge)
    assert len(engine.log) == 1  # only the request at the limit reached the engine
    kept = {"rid": engine.log[0].rid, "session_id": engine.log[0].session}
    kept |= {"routing_key": engine.log[0].session, "cache_salt": engine.log[0].namespace}
    kept |= {"extra_key": engine.log[0].namespace}
    assert kept[field] == AT_LIMIT


async def test_routing_header_and_abort_rid_are_bounded_too(engine: FakeEngine) -> None:
    async with client_for(engine) as client:
        header = {"X-SMG-Routing-Key": "k" * 257}
        resp = await client.post("/generate", json=PREFILL, headers=header)
        assert "X-SMG-Routing-Key header is 257 bytes; the limit is 256 bytes" in message(resp)
        resp = await client.post("/generate", json={**PREFILL, "rid": ["r" * 300]})
        assert "rid is 300 bytes; the limit is 256 bytes" in message(resp)
        resp = await client.post("/abort_request", json={"rid": "r" * 257})
        assert "rid is 257 bytes; the limit is 256 bytes" in message(resp)
        ok = await client.post("/generate", json=PREFILL, headers={"X-SMG-Routing-Key": "k" * 256})
        assert ok.status_code == 200
    assert [r.session for r in engine.log] == ["k" * 256]
    assert engine.aborts == []


async def test_fake_engine_log_stays_at_its_bound_and_counts_every_request() -> None:
    engine = FakeEngine(seconds_per_token=0.0, seconds_per_output_token=0.0, log_limit=8)
    async with client_for(engine) as client:
        for i in range(50):
            resp = await client.post("/generate", json={**PREFILL, "rid": f"r{i}"})
            assert resp.status_code == 200
        for i in range(50):
            await engine.abort(f"a{i}")
        metrics = parse_metrics((await client.get("/metrics")).text)
    assert [r.rid for r in engine.log] == [f"r{i}" for i in range(42, 50)]
    assert engine.aborts == [f"a{i}" for i in range(42, 50)]
    assert engine.log[-1].rid == "r49" and engine.log[:2][0].rid == "r42"  # still a list
    assert (await engine.stats()).requests == 50
    assert metrics["sglang:num_requests_total"] == 50
    await engine.aclose()


async def test_fake_engine_history_is_bounded_by_default() -> None:
    assert DEFAULT_LOG_LIMIT == 10_000
    engine = FakeEngine(seconds_per_token=0.0, seconds_per_output_token=0.0)
    for i in range(DEFAULT_LOG_LIMIT + 5):
        await engine.abort(f"{i:032x}")
    assert len(engine.aborts) == DEFAULT_LOG_LIMIT
    assert engine.aborts[0] == f"{5:032x}"
    for _ in range(3):
        await engine.prefill([1, 2, 3])
    assert len(engine.log) == 3
    with pytest.raises(ValueError, match="log_limit must be >= 0"):
        FakeEngine(log_limit=-1)
    await engine.aclose()
