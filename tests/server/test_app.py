"""The ``agentwarm serve`` app in-process (httpx.ASGITransport): wire, errors, auth, metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

from agentwarm.engines.base import (
    Completion,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    Priority,
    StreamChunk,
)
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.sglang import parse_metrics
from agentwarm.errors import ConfigError, EngineUnavailable, InvalidRequest
from agentwarm.server import ServerConfig, build_engine, create_app, is_loopback
from tests.waiting import until

BASE = "http://127.0.0.1"  # keyless servers answer only requests addressed to loopback


def client_for(engine: Any, **config: Any) -> httpx.AsyncClient:
    app = create_app(engine, ServerConfig(**config), close_engine=False)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    fake = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-6)
    yield fake
    await fake.aclose()


@pytest.fixture
async def client(engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(engine, max_request_bytes=4096, max_new_tokens=64) as c:
        yield c


async def metrics(client: httpx.AsyncClient) -> dict[str, float]:
    return parse_metrics((await client.get("/metrics")).text)


async def test_prefill_only_then_generate_reports_sglang_meta_info(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    ids = list(range(10, 60))
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}, "rid": "p" * 32}
    resp = await client.post("/generate", json=body)
    assert resp.status_code == 200
    out = resp.json()
    assert out["text"] == "" and out["output_ids"] == []
    meta = out["meta_info"]
    assert meta["id"] == "p" * 32
    assert meta["finish_reason"] == {"type": "length", "length": 0}
    assert (meta["prompt_tokens"], meta["cached_tokens"], meta["completion_tokens"]) == (50, 0, 0)
    assert meta["computed_tokens"] == 50 and meta["e2e_latency"] >= 0
    assert engine.log[-1].priority == Priority.SPECULATIVE  # prefill-only default

    body = {"input_ids": [*ids, 1, 2], "sampling_params": {"max_new_tokens": 5, "temperature": 0}}
    out = (await client.post("/generate", json=body)).json()
    meta = out["meta_info"]
    assert len(out["output_ids"]) == 5 and out["text"] == engine.decode(out["output_ids"])
    assert meta["finish_reason"] == {"type": "length", "length": 5}
    assert (meta["prompt_tokens"], meta["cached_tokens"], meta["completion_tokens"]) == (52, 50, 5)
    assert len(meta["id"]) == 32
    assert engine.log[-1].priority == Priority.LIVE  # generation default

    m = await metrics(client)
    assert m["sglang:num_requests_total"] == 2
    assert m["sglang:prompt_tokens_total"] == 102
    assert m["sglang:cached_tokens_total"] == 50
    assert m["sglang:generation_tokens_total"] == 5
    assert m["agentwarm:prefill_requests_total"] == 1
    assert m["sglang:num_used_tokens"] == engine.cache.total_tokens


async def test_text_input_priority_and_namespace_fields(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    base = {"sampling_params": {"max_new_tokens": 0}, "priority": 3}
    await client.post("/generate", json={**base, "text": "hello world", "cache_salt": "t1"})
    assert engine.log[-1].prompt_tokens == len(b"hello world")
    assert (engine.log[-1].priority, engine.log[-1].namespace) == (3, "t1")
    both = {"text": "hello world!", "cache_salt": "t1", "extra_key": "t1"}
    out = (await client.post("/generate", json={**base, **both})).json()
    assert engine.log[-1].namespace == "t1"  # equal values name one namespace
    assert out["meta_info"]["cached_tokens"] == len(b"hello world")
    only_extra = {"text": "hello world!", "extra_key": "t1"}  # sglang-router forwards only this
    out = (await client.post("/generate", json={**base, **only_extra})).json()
    assert out["meta_info"]["cached_tokens"] == len(b"hello world!")
    other = {"text": "hello world!", "cache_salt": "t2"}
    out = (await client.post("/generate", json={**base, **other})).json()
    assert out["meta_info"]["cached_tokens"] == 0


async def test_session_comes_from_routing_header_or_body(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 0}}
    await client.post("/generate", json=body, headers={"X-SMG-Routing-Key": "run-9"})
    assert engine.log[-1].session == "run-9"
    await client.post("/generate", json={**body, "routing_key": "run-10"})
    assert engine.log[-1].session == "run-10"


class ChunkyFake(FakeEngine):
    """Streams one chunk per output token, as the embedded engine does."""

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        completion = await self.generate_with(ids, params)
        for i, token in enumerate(completion.token_ids):
            last = i == len(completion.token_ids) - 1
            yield StreamChunk((token,), self.decode([token]), completion if last else None)


def sse_events(text: str) -> list[Any]:
    lines = [line for line in text.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


async def test_stream_sends_cumulative_sse_events_then_done() -> None:
    async with client_for(ChunkyFake(seconds_per_output_token=1e-6)) as client:
        body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}, "stream": True}
        resp = await client.post("/generate", json=body)
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp.text)
    assert len(events) == 4
    for i, event in enumerate(events):
        assert len(event["output_ids"]) == i + 1 == event["meta_info"]["completion_tokens"]
        assert event["output_ids"] == events[-1]["output_ids"][: i + 1]
        assert event["text"] == events[-1]["text"][: i + 1]
    assert [e["meta_info"]["finish_reason"] for e in events[:-1]] == [None] * 3
    assert events[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    assert events[-1]["meta_info"]["prompt_tokens"] == 3


async def test_stream_of_prefill_only_request(client: httpx.AsyncClient) -> None:
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 0}, "stream": True}
    events = sse_events((await client.post("/generate", json=body)).text)
    assert len(events) == 1
    assert events[0]["meta_info"]["finish_reason"] == {"type": "length", "length": 0}


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "invalid JSON body"),
        (b"", 400, "empty body"),
        (b"[1, 2]", 400, "body must be a JSON object, got list"),
        (b'{"input_ids": ["a", 2]}', 400, "input_ids.0: Input should be a valid integer"),
        (b'{"input_ids": [1], "stream": "yes"}', 400, "stream: Input should be a valid boolean"),
        (
            b'{"input_ids": [1], "sampling_params": {"max_new_tokens": "5"}}',
            400,
            "sampling_params.max_new_tokens: Input should be a valid integer",
        ),
        (
            b'{"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}',
            400,
            "sampling_params.max_new_tokens: Input should be greater than or equal to 0",
        ),
        (
            b'{"input_ids": [1], "sampling_params": {"max_new_tokens": 65}}',
            400,
            "exceeds this server's limit of 64",
        ),
        (b'{"input_ids": [1], "priority": 1.5}', 400, "priority: Input should be a valid integer"),
        (b'{"input_ids": [1], "cache_salt": 7}', 400, "cache_salt: Input should be a valid string"),
        (b'{"sampling_params": {}}', 400, "missing input: give input_ids"),
        (b'{"input_ids": [], "text": null}', 400, "empty prompt"),
        (b'{"input_ids": [1], "text": "a"}', 400, "either text or input_ids, not both"),
        (b'{"input_ids": [[1], [2]]}', 400, "batch requests are not supported"),
        (b'{"text": ["a", "b"]}', 400, "batch requests are not supported"),
        (b'{"input_ids": [1], "rid": ["a", "b"]}', 400, "rid must be a string"),
        (b'{"input_ids": [-3]}', 400, "input_ids must be >= 0"),
        (b'{"input_ids": [1], "sampling_params": {"n": 2}}', 400, "sampling_params.n"),
        (b'{"input_ids": [' + b"1," * 3000 + b"1]}", 413, "exceeds this server's limit"),
    ],
)
async def test_malformed_generate_gets_4xx_json_and_server_keeps_serving(
    client: httpx.AsyncClient, body: bytes, status: int, message: str
) -> None:
    resp = await client.post(
        "/generate", content=body, headers={"content-type": "application/json"}
    )
    assert resp.status_code == status
    error = resp.json()["error"]
    assert message in error["message"]
    assert error["code"] == status
    ok = await client.post("/generate", json={"input_ids": [1, 2], "sampling_params": {"n": 1}})
    assert ok.status_code == 200
    assert (await metrics(client))["sglang:num_requests_total"] == 1


async def test_oversized_body_without_content_length_is_413(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"input_ids": ['
        for _ in range(3000):
            yield b"1,"
        yield b"1]}"

    resp = await client.post(
        "/generate", content=chunks(), headers={"content-type": "application/json"}
    )
    assert resp.status_code == 413
    assert "--max-request-bytes" in resp.json()["error"]["message"]


async def test_unknown_routes_methods_and_rids_are_json_4xx(client: httpx.AsyncClient) -> None:
    resp = await client.get("/nope")
    assert (resp.status_code, resp.json()["error"]["code"]) == (404, 404)
    resp = await client.get("/generate")
    assert resp.status_code == 405 and "error" in resp.json()
    resp = await client.post("/abort_request", json={"rid": "x" * 32})
    assert resp.status_code == 200  # unknown rid: nothing to abort (as SGLang)
    resp = await client.post("/abort_request", json={})
    assert resp.status_code == 200  # an empty rid is an unknown rid (as SGLang)
    resp = await client.post("/abort_request", json={"rid": 5})
    assert resp.status_code == 400
    resp = await client.post("/abort_request", json={"abort_all": True})
    assert resp.status_code == 200


async def test_abort_request_aborts_an_in_flight_prefill() -> None:
    slow = FakeEngine(seconds_per_token=1e-3, chunk_size=32)
    async with client_for(slow) as client:
        body = {"input_ids": list(range(3000)), "sampling_params": {"max_new_tokens": 0}}
        task = asyncio.create_task(client.post("/generate", json={**body, "rid": "q" * 32}))
        await until(lambda: slow.chunks, what="the prefill to start")
        dup = await client.post("/generate", json={**body, "rid": "q" * 32})
        assert dup.status_code == 400 and "duplicate rid" in dup.json()["error"]["message"]
        resp = await client.post("/abort_request", json={"rid": "q" * 32})
        assert resp.status_code == 200
        meta = (await task).json()["meta_info"]
        assert meta["finish_reason"]["type"] == "abort"
        assert 0 < meta["computed_tokens"] < 3000
        m = await metrics(client)
        assert m["sglang:num_aborted_requests_total"] == 1
        assert m["sglang:num_running_reqs"] == 0
        assert slow.aborts == ["q" * 32]
    await slow.aclose()


async def test_aborted_generation_answers_200_with_abort_finish_reason() -> None:
    slow = FakeEngine(seconds_per_token=1e-3, chunk_size=32)
    async with client_for(slow) as client:
        body = {"input_ids": list(range(3000)), "rid": "g" * 32, "stream": True}
        task = asyncio.create_task(client.post("/generate", json=body))
        await until(lambda: slow.chunks, what="the prefill to start")
        await client.post("/abort_request", json={"rid": "g" * 32})
        events = sse_events((await task).text)
        assert events[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    await slow.aclose()


class Broken(FakeEngine):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        raise self.exc

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        raise self.exc

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        raise self.exc
        yield  # an async generator


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (EngineUnavailable("engine closed"), 503),
        (InvalidRequest("prompt too long"), 400),
        (RuntimeError("bug"), 500),
    ],
)
async def test_engine_errors_map_to_statuses(exc: Exception, status: int) -> None:
    async with client_for(Broken(exc)) as client:
        resp = await client.post("/generate", json={"input_ids": [1], "sampling_params": {}})
        assert resp.status_code == status
        assert str(exc) in resp.json()["error"]["message"]
        body = {"input_ids": [1], "stream": True}
        events = sse_events((await client.post("/generate", json=body)).text)
        assert [e["error"]["code"] for e in events] == [status]
        assert str(exc) in events[0]["error"]["message"]
        assert (await client.get("/health")).status_code == 200


async def test_api_key_guards_everything_but_health_and_metrics(engine: FakeEngine) -> None:
    async with client_for(engine, api_key="s3cret") as client:
        body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 0}}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            resp = await client.post("/generate", json=body, headers=headers)
            assert resp.status_code == 401
            assert "API key" in resp.json()["error"]["message"]
        assert (await client.get("/model_info")).status_code == 401
        ok = await client.post("/generate", json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


async def test_info_endpoints_have_what_sglang_router_reads(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    info = (await client.get("/model_info")).json()
    assert info == (await client.get("/get_model_info")).json()
    assert info["model_path"] == engine.model_name and info["is_generation"] is True
    assert info["tokenizer_path"] is None
    assert info["agentwarm"]["tokenizer"] == "byte"
    assert info["agentwarm"]["supports_promotion"] is True
    assert info["agentwarm"]["preempts_speculation"] is True
    server = (await client.get("/server_info")).json()
    assert server == (await client.get("/get_server_info")).json()
    assert (server["dp_size"], server["tp_size"], server["chunked_prefill_size"]) == (1, 1, 256)
    assert server["version"].startswith("agentwarm-")
    models = (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == [engine.model_name]
    load = (await client.get("/get_load")).json()
    assert load[0]["num_reqs"] == 0
    assert (await client.get("/health_generate")).status_code == 200
    assert (await client.get("/version")).json()["version"] == server["version"]


async def test_flush_cache_and_tokenizer_endpoints(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    await client.post("/generate", json={"text": "abc", "sampling_params": {"max_new_tokens": 0}})
    assert engine.cache.total_tokens == 3
    resp = await client.post("/flush_cache")
    assert (resp.status_code, resp.text) == (200, "Cache flushed.\n")
    assert engine.cache.total_tokens == 0
    tokens = (await client.post("/tokenize", json={"prompt": "hé"})).json()
    assert tokens == {"tokens": [104, 195, 169], "count": 3, "max_model_len": None}
    text = (await client.post("/detokenize", json={"tokens": [104, 195, 169]})).json()
    assert text == {"text": "hé"}
    batch = (await client.post("/tokenize", json={"prompt": ["a", "bc"]})).json()
    assert batch["tokens"] == [[97], [98, 99]] and batch["count"] == 3


def test_helpers() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    with pytest.raises(ConfigError, match="use 'local' or 'fake'"):
        build_engine("gpu")
    fake = build_engine("fake", chunk_size=8, seconds_per_token=0.5)
    assert isinstance(fake, FakeEngine)
    assert (fake.chunk_size, fake.seconds_per_token) == (8, 0.5)
