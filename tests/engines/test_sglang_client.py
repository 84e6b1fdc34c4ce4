"""SGLangEngine against scripted replies (httpx.MockTransport): the wire contract, exactly."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest

from agentwarm.engines.base import Engine, PrefillStatus, Priority
from agentwarm.engines.sglang import ROUTING_KEY_HEADER, SGLangEngine, parse_metrics
from agentwarm.errors import (
    ContextLengthExceeded,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    InvalidRequest,
    RequestAborted,
)
from tests.conftest_server import http_server
from tests.waiting import DEFAULT_TIMEOUT_S

URL = "http://sglang.test:30000"

Handler = Callable[[httpx.Request], httpx.Response]


def _meta(rid: str, prompt: int, cached: int, finish: Any, completion: int = 0) -> dict[str, Any]:
    return {
        "id": rid,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "completion_tokens": completion,
        "finish_reason": finish,
        "e2e_latency": 0.01,
    }


class Recorder:
    """Records requests and answers them with ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.url.path == path]


def engine_with(handler: Handler, **kwargs: Any) -> tuple[SGLangEngine, Recorder]:
    recorder = Recorder(handler)
    kwargs.setdefault("tokenizer", "byte")
    engine = SGLangEngine(URL, transport=httpx.MockTransport(recorder), **kwargs)
    return engine, recorder


def generate_reply(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    ids = body["input_ids"]
    n = body["sampling_params"]["max_new_tokens"]
    meta = _meta(body["rid"], len(ids), len(ids) // 2, {"type": "length", "length": n}, n)
    return httpx.Response(200, json={"text": "x" * n, "output_ids": [120] * n, "meta_info": meta})


async def test_prefill_sends_prefill_only_request_with_priority_salt_and_rid() -> None:
    engine, rec = engine_with(generate_reply)
    result = await engine.prefill([5, 6, 7, 8], namespace="tenant-a", session="run-1")
    body = rec.bodies("/generate")[0]
    assert body["input_ids"] == [5, 6, 7, 8]
    assert body["sampling_params"] == {"max_new_tokens": 0}
    assert body["priority"] == Priority.SPECULATIVE
    assert body["cache_salt"] == body["extra_key"] == "tenant-a"
    assert body["stream"] is False
    assert len(body["rid"]) == 32
    assert ROUTING_KEY_HEADER.lower() not in rec.requests[0].headers
    assert result.rid == body["rid"]
    assert (result.prompt_tokens, result.cached_tokens, result.computed_tokens) == (4, 2, 2)
    assert result.status is PrefillStatus.DONE
    await engine.aclose()


async def test_empty_namespace_is_omitted_and_routing_header_is_opt_in() -> None:
    engine, rec = engine_with(generate_reply, routing_header=True, send_priority=False)
    await engine.prefill([1, 2], session="run-7", rid="r" * 32)
    body = rec.bodies("/generate")[0]
    assert "cache_salt" not in body and "extra_key" not in body and "priority" not in body
    assert body["rid"] == "r" * 32
    assert rec.requests[0].headers[ROUTING_KEY_HEADER] == "run-7"
    await engine.aclose()


async def test_plain_generate_reads_meta_info() -> None:
    engine, rec = engine_with(generate_reply, stream_generate=False)
    out = await engine.generate([1, 2, 3, 4], max_tokens=3, temperature=0.5, seed=9)
    sampling = rec.bodies("/generate")[0]["sampling_params"]
    assert sampling == {"max_new_tokens": 3, "temperature": 0.5, "sampling_seed": 9}
    assert rec.bodies("/generate")[0]["priority"] == Priority.LIVE
    assert out.token_ids == (120, 120, 120)
    assert (out.text, out.prompt_tokens, out.cached_tokens) == ("xxx", 4, 2)
    assert out.finish_reason == "length"
    assert out.ttft_s == out.e2e_s  # no server timing reported: the end-to-end upper bound
    await engine.aclose()


async def test_plain_generate_uses_server_timing_for_ttft_when_reported() -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        meta = _meta("r", 3, 0, {"type": "stop", "matched": 2}, 1)
        meta |= {"request_received_ts": 100.0, "prefill_finished_ts": 100.25}
        return httpx.Response(200, json={"text": "a", "output_ids": [97], "meta_info": meta})

    engine, _ = engine_with(reply, stream_generate=False)
    out = await engine.generate([1, 2, 3])
    assert out.ttft_s == 0.25
    assert out.finish_reason == "stop"
    await engine.aclose()


def sse(*events: dict[str, Any] | str) -> bytes:
    lines = []
    for event in events:
        payload = event if isinstance(event, str) else json.dumps(event)
        lines.append(f"data: {payload}\n\n")
    return "".join(lines).encode()


@pytest.mark.parametrize("incremental", [False, True])
async def test_stream_accepts_cumulative_and_incremental_events(incremental: bool) -> None:
    steps = [([104], "h"), ([104, 105], "hi"), ([104, 105, 33], "hi!")]

    def reply(request: httpx.Request) -> httpx.Response:
        events: list[dict[str, Any] | str] = []
        prev_ids: list[int] = []
        prev_text = ""
        for i, (ids, text) in enumerate(steps):
            last = i == len(steps) - 1
            finish = {"type": "length", "length": 3} if last else None
            out_ids = ids[len(prev_ids) :] if incremental else ids
            out_text = text[len(prev_text) :] if incremental else text
            meta = _meta("r", 4, 1, finish, len(ids))
            events.append({"text": out_text, "output_ids": out_ids, "meta_info": meta})
            prev_ids, prev_text = ids, text
        events.append("[DONE]")
        return httpx.Response(200, content=sse(*events))

    engine, rec = engine_with(reply)
    chunks = [c async for c in engine.generate_stream([1, 2, 3, 4], max_tokens=3)]
    assert rec.bodies("/generate")[0]["stream"] is True
    assert [c.token_ids for c in chunks] == [(104,), (105,), (33,)]
    assert "".join(c.text for c in chunks) == "hi!"
    final = chunks[-1].completion
    assert final is not None and all(c.completion is None for c in chunks[:-1])
    assert final.token_ids == (104, 105, 33) and final.text == "hi!"
    assert (final.prompt_tokens, final.cached_tokens) == (4, 1)
    assert 0 <= final.ttft_s <= final.e2e_s
    out = await engine.generate([1, 2, 3, 4], max_tokens=3)  # stream_generate=True by default
    assert out.token_ids == final.token_ids
    await engine.aclose()


async def test_stream_abort_event_raises_request_aborted() -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        meta = _meta("r", 4, 0, {"type": "abort", "message": "Abort in waiting queue"})
        return httpx.Response(200, content=sse({"text": "", "output_ids": [], "meta_info": meta}))

    engine, _ = engine_with(reply)
    with pytest.raises(RequestAborted, match="Abort in waiting queue"):
        await engine.generate([1, 2])
    assert engine.client_stats().aborted == 1
    await engine.aclose()


async def test_stream_without_finish_is_an_error() -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        meta = _meta("r", 2, 0, None, 1)
        event = {"text": "a", "output_ids": [97], "meta_info": meta}
        return httpx.Response(200, content=sse(event, "[DONE]"))

    engine, _ = engine_with(reply)
    with pytest.raises(EngineError, match="without a finish_reason"):
        await engine.generate([1, 2])
    await engine.aclose()


async def test_stream_error_event_is_an_engine_error() -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse({"error": {"message": "boom"}}, "[DONE]"))

    engine, _ = engine_with(reply)
    with pytest.raises(EngineError, match="boom"):
        await engine.generate([1, 2])
    await engine.aclose()


async def test_aborted_prefill_returns_aborted_for_200_abort_reply() -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        meta = _meta("r", 6, 2, {"type": "abort", "message": "Abort before prefill"})
        return httpx.Response(200, json={"text": "", "output_ids": [], "meta_info": meta})

    engine, _ = engine_with(reply)
    result = await engine.prefill([1, 2, 3, 4, 5, 6])
    assert result.status is PrefillStatus.ABORTED
    assert (result.prompt_tokens, result.cached_tokens, result.computed_tokens) == (6, 2, 0)
    await engine.aclose()


async def test_error_reply_after_our_abort_counts_as_aborted() -> None:
    """Older SGLang answers an aborted non-stream request with HTTP 400 or 500."""
    import asyncio

    release, arrived = asyncio.Event(), asyncio.Event()
    replies: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/abort_request":
            release.set()
            return httpx.Response(200)
        arrived.set()
        await release.wait()
        replies.append(400)
        return httpx.Response(400, json={"error": {"message": "Abort in waiting queue"}})

    engine = SGLangEngine(URL, tokenizer="byte", transport=httpx.MockTransport(handler))
    task = asyncio.create_task(engine.prefill([1, 2, 3], rid="a" * 32))
    await asyncio.wait_for(arrived.wait(), DEFAULT_TIMEOUT_S)  # the request is pending
    await engine.abort("a" * 32)
    result = await task
    assert result.status is PrefillStatus.ABORTED and replies == [400]
    release.clear()
    arrived.clear()
    gen = asyncio.create_task(engine.generate([1, 2, 3], rid="b" * 32))
    await asyncio.wait_for(arrived.wait(), DEFAULT_TIMEOUT_S)
    await engine.abort("b" * 32)
    with pytest.raises(RequestAborted):
        await gen
    await engine.aclose()


async def test_abort_is_resent_while_the_request_is_pending() -> None:
    import asyncio

    aborts: list[str] = []
    done, arrived = asyncio.Event(), asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/abort_request":
            aborts.append(json.loads(request.content)["rid"])
            if len(aborts) == 2:  # the server learns the rid after the first abort
                done.set()
            return httpx.Response(404, json={"error": {"message": "unknown rid"}})
        arrived.set()
        await done.wait()
        meta = _meta("r", 3, 0, {"type": "abort", "message": "aborted"})
        return httpx.Response(200, json={"text": "", "output_ids": [], "meta_info": meta})

    engine = SGLangEngine(URL, tokenizer="byte", transport=httpx.MockTransport(handler))
    task = asyncio.create_task(engine.prefill([1, 2, 3], rid="c" * 32))
    await asyncio.wait_for(arrived.wait(), DEFAULT_TIMEOUT_S)  # the request is pending
    await engine.abort("c" * 32)
    result = await task
    assert result.status is PrefillStatus.ABORTED
    assert aborts == ["c" * 32, "c" * 32]
    await engine.aclose()


async def test_missing_abort_endpoint_is_logged_once_then_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine, rec = engine_with(lambda r: httpx.Response(404, text=""))
    with caplog.at_level(logging.WARNING, logger="agentwarm.engines.sglang"):
        await engine.abort("x" * 32)
        await engine.abort("y" * 32)
    assert len(rec.bodies("/abort_request")) == 1
    assert [r.message for r in caplog.records if "abort_request" in r.message] != []
    await engine.aclose()


async def test_abort_posts_rid() -> None:
    engine, rec = engine_with(lambda r: httpx.Response(200))
    await engine.abort("d" * 32)
    assert rec.bodies("/abort_request") == [{"rid": "d" * 32}]
    await engine.aclose()


SGLANG_OVER = "The input (9000 tokens) is longer than the model's context length (8192 tokens)."
SGLANG_PAST = (
    "Requested token count exceeds the model's maximum context length of 8192 tokens. You "
    "requested a total of 8200 tokens: 8190 tokens from the input messages and 10 tokens for the "
    "completion. Please reduce the number of tokens in the input messages or the completion to "
    "fit within the limit."
)


@pytest.mark.parametrize(
    ("message", "lengths"), [(SGLANG_OVER, (9000, 0, 8192)), (SGLANG_PAST, (8190, 10, 8192))]
)
async def test_sglang_context_refusals_are_context_length_exceeded(
    message: str, lengths: tuple[int, int, int]
) -> None:
    """SGLang answers a request over the context with a 400, or in a stream with an error event
    that has no code; both carry the lengths in the message."""

    def reply(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["stream"]:
            return httpx.Response(200, content=sse({"error": {"message": message}}, "[DONE]"))
        return httpx.Response(400, json={"error": {"message": message}})

    engine, _ = engine_with(reply)
    for stream in (False, True):
        engine.stream_generate = stream
        with pytest.raises(ContextLengthExceeded) as info:
            await engine.generate([1, 2], max_tokens=10)
        assert message in str(info.value) and URL in str(info.value)
        assert (info.value.prompt_tokens, info.value.max_tokens, info.value.limit) == lengths
    with pytest.raises(ContextLengthExceeded, match="HTTP 400"):
        await engine.prefill([1, 2])
    await engine.aclose()


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx.ConnectError("refused"), EngineUnavailable),
        (httpx.RemoteProtocolError("peer closed"), EngineUnavailable),
        (httpx.ReadTimeout("slow"), EngineTimeout),
        (httpx.ConnectTimeout("slow connect"), EngineUnavailable),
    ],
)
async def test_transport_errors_are_translated_from_httpx(
    exc: httpx.HTTPError, expected: type[EngineError]
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    engine, _ = engine_with(handler)
    for call in (engine.prefill([1]), engine.generate([1]), engine.abort("z" * 32)):
        with pytest.raises(expected, match=f"{URL}/") as info:
            await call
        assert info.value.__cause__ is exc
    await engine.aclose()


@pytest.mark.parametrize(
    ("status", "expected"),
    [(503, EngineUnavailable), (502, EngineUnavailable), (500, EngineError), (400, InvalidRequest)],
)
async def test_http_statuses_are_translated_with_url_and_status(
    status: int, expected: type[EngineError]
) -> None:
    engine, _ = engine_with(lambda r: httpx.Response(status, json={"error": {"message": "no"}}))
    for stream in (False, True):
        engine.stream_generate = stream
        with pytest.raises(expected, match=rf"{URL}/generate: HTTP {status}: no") as info:
            await engine.generate([1, 2])
        assert type(info.value) is expected
    with pytest.raises(expected, match=f"HTTP {status}"):
        await engine.prefill([1, 2])
    await engine.aclose()


async def test_client_side_validation_and_closed_engine() -> None:
    engine, rec = engine_with(generate_reply)
    with pytest.raises(InvalidRequest, match="empty prompt"):
        await engine.prefill([])
    with pytest.raises(InvalidRequest, match="max_tokens"):
        await engine.generate([1], max_tokens=-1)
    assert rec.requests == []
    await engine.aclose()
    await engine.aclose()  # idempotent
    with pytest.raises(EngineUnavailable, match="closed"):
        await engine.prefill([1])


def test_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        SGLangEngine("localhost:30000")


class _NoTokenizerServer(BaseHTTPRequestHandler):
    """A server whose ``/model_info`` names no tokenizer and that has no ``/tokenize``."""

    paths: list[str]

    def do_GET(self) -> None:
        self.paths.append(self.path)
        self._answer(200 if self.path == "/model_info" else 404, b"{}")

    def do_POST(self) -> None:
        self.paths.append(self.path)
        self._answer(404, b'{"detail": "Not Found"}')

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def no_tokenizer_server() -> Iterator[tuple[str, list[str]]]:
    """A real server on loopback (the first ``encode`` looks it up with a blocking client of
    its own, which a mock transport does not reach): its URL and the paths it was asked for."""
    paths: list[str] = []
    with http_server(type("Handler", (_NoTokenizerServer,), {"paths": paths})) as url:
        yield url, paths


async def test_missing_tokenizer_is_looked_up_once_and_names_what_to_pass(
    no_tokenizer_server: tuple[str, list[str]],
) -> None:
    url, paths = no_tokenizer_server
    engine = SGLangEngine(url)
    assert engine.tokenizer is None
    for _ in range(2):
        with pytest.raises(EngineError, match=r"tokenizer=<local Hugging Face tokenizer dir"):
            engine.encode("hello")
    assert paths == ["/model_info", "/tokenize"]  # once: the second encode asks nothing
    assert engine.tokenizer is None
    await engine.aclose()


def test_explicit_tokenizer_that_cannot_load_is_an_engine_error(tmp_path: Any) -> None:
    with pytest.raises(EngineError, match="cannot load a tokenizer"):
        SGLangEngine(URL, tokenizer=tmp_path / "missing")


def model_server(info_path: str, info: dict[str, Any]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200)
        if request.url.path == info_path:
            return httpx.Response(200, json=info)
        return httpx.Response(404)

    return handler


async def test_from_url_reads_model_info_and_byte_tokenizer_hint() -> None:
    info = {"model_path": "tiny", "tokenizer_path": None, "agentwarm": {"tokenizer": "byte"}}
    transport = httpx.MockTransport(model_server("/model_info", info))
    engine = await SGLangEngine.from_url(URL, transport=transport)
    assert engine.model_name == "tiny"
    assert engine.encode("hé") == list("hé".encode())
    assert engine.decode([104, 105]) == "hi"
    await engine.aclose()


async def test_from_url_takes_the_qwen_tokenizer_hint_and_its_chat_template() -> None:
    from agentwarm.chat import QWEN2_5

    info = {"model_path": "tiny", "tokenizer_path": None, "agentwarm": {"tokenizer": "qwen2.5"}}
    transport = httpx.MockTransport(model_server("/model_info", info))
    engine = await SGLangEngine.from_url(URL, transport=transport)
    assert engine.encode("how are you!") == [5158, 525, 498, 0]
    assert engine.chat_template is QWEN2_5
    await engine.aclose()
    bytes_engine = SGLangEngine(URL, tokenizer="byte", transport=transport)
    assert bytes_engine.chat_template is None
    await bytes_engine.aclose()


async def test_from_url_falls_back_to_get_model_info() -> None:
    info = {"model_path": "Qwen/Qwen2.5-0.5B", "tokenizer_path": None}
    transport = httpx.MockTransport(model_server("/get_model_info", info))
    engine = await SGLangEngine.from_url(URL, tokenizer="byte", transport=transport)
    assert engine.model_name == "Qwen/Qwen2.5-0.5B"
    assert (await engine.model_info())["model_path"] == "Qwen/Qwen2.5-0.5B"
    await engine.aclose()


async def test_from_url_raises_when_server_never_healthy() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(503))
    with pytest.raises(EngineUnavailable, match="not ready: HTTP 503"):
        await SGLangEngine.from_url(URL, transport=transport, wait_s=0.3)


METRICS = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m",tp_rank="0"} 100.0
sglang:prompt_tokens_total{model_name="m",tp_rank="1"} 20.0
sglang:cached_tokens_total{model_name="m",cache_source="device"} 30.0
sglang:cached_tokens_total{model_name="m",cache_source="host"} 5.0
sglang:num_requests_total{model_name="m"} 7.0
sglang:num_aborted_requests_total{model_name="m"} 2.0
sglang:max_total_num_tokens{model_name="m"} 4096.0
sglang:num_used_tokens{model_name="m"} 64.0
sglang:cache_hit_rate{model_name="m"} NaN
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
"""


def test_parse_metrics_sums_label_sets() -> None:
    parsed = parse_metrics(METRICS)
    assert parsed["sglang:prompt_tokens_total"] == 120.0
    assert parsed["sglang:cached_tokens_total"] == 35.0
    assert parsed["sglang:time_to_first_token_seconds_bucket"] == 3.0
    assert "sglang:cache_hit_rate" not in parsed


async def test_stats_from_server_metrics_else_client_counters() -> None:
    engine, _ = engine_with(lambda r: httpx.Response(200, text=METRICS))
    stats = await engine.stats()
    assert stats.prompt_tokens == 120 and stats.hit_tokens == 35
    assert stats.computed_tokens == 85 and stats.requests == 7 and stats.aborted == 2
    assert stats.capacity_tokens == 4096 and stats.cached_tokens == 64
    await engine.aclose()

    def no_metrics(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404) if request.url.path == "/metrics" else generate_reply(request)

    engine, _ = engine_with(no_metrics)
    await engine.prefill([1, 2, 3, 4])
    stats = await engine.stats()
    assert (stats.requests, stats.prompt_tokens, stats.hit_tokens) == (1, 4, 2)
    assert stats.capacity_tokens is None
    await engine.aclose()


async def test_flush_cache_refusal_is_an_error() -> None:
    engine, _ = engine_with(lambda r: httpx.Response(400, text="Cache not flushed.\n"))
    with pytest.raises(EngineError, match="flush_cache: HTTP 400"):
        await engine.flush_cache()
    await engine.aclose()


def test_sglang_engine_is_an_engine() -> None:
    assert issubclass(SGLangEngine, Engine)
    assert SGLangEngine.supports_promotion is False
    assert SGLangEngine.preempts_speculation is False  # SGLang batches speculation with live work


def test_importing_agentwarm_never_imports_sglang() -> None:
    code = (
        "import sys, agentwarm, agentwarm.engines.sglang, agentwarm.engines.routing,"
        " agentwarm.server\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'sglang', 'sglang_router'})\n"
        "assert not bad, bad\n"
        "engine = agentwarm.engines.sglang.SGLangEngine('http://127.0.0.1:9', tokenizer='byte')\n"
        "assert engine.encode('a') == [97]\n"
        "assert 'torch' not in sys.modules, 'the HTTP client must not import torch'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


PREEMPTED = "The request is aborted by a higher priority request."


async def test_server_side_abort_503_is_an_abort_not_an_outage() -> None:
    """SGLang preempts a queued low-priority request with HTTP 503 (non-stream)."""

    def reply(request: httpx.Request) -> httpx.Response:
        body = {"object": "error", "message": PREEMPTED, "type": "503", "code": 503}
        return httpx.Response(503, json=body)

    engine, _ = engine_with(reply)
    result = await engine.prefill([1, 2, 3])
    assert result.status is PrefillStatus.ABORTED
    engine.stream_generate = False
    with pytest.raises(RequestAborted, match="higher priority"):
        await engine.generate([1, 2, 3])
    engine.stream_generate = True
    with pytest.raises(RequestAborted, match="higher priority"):
        await engine.generate([1, 2, 3])
    assert engine.client_stats().aborted == 3
    await engine.aclose()


PRIORITY_OFF = (
    "Using priority is disabled for this server. Please send a new request without a priority."
)


@pytest.mark.parametrize("stream", [False, True])
async def test_refused_priority_is_dropped_and_the_request_retried(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if "priority" in body:
            finish = {"type": "abort", "status_code": 503, "message": PRIORITY_OFF}
            if body["stream"]:
                meta = _meta(body["rid"], 2, 0, finish)
                return httpx.Response(200, content=sse({"text": "", "meta_info": meta}, "[DONE]"))
            return httpx.Response(503, json={"object": "error", "message": PRIORITY_OFF})
        return generate_reply(request) if not body["stream"] else streamed(body)

    def streamed(body: dict[str, Any]) -> httpx.Response:
        n = body["sampling_params"]["max_new_tokens"]
        meta = _meta(body["rid"], 2, 0, {"type": "length", "length": n}, n)
        return httpx.Response(
            200, content=sse({"text": "y" * n, "output_ids": [121] * n, "meta_info": meta})
        )

    engine, rec = engine_with(reply, stream_generate=stream)
    with caplog.at_level(logging.WARNING, logger="agentwarm.engines.sglang"):
        out = await engine.generate([1, 2], max_tokens=2)
        warm = await engine.prefill([1, 2])
    assert out.token_ids == ((121, 121) if stream else (120, 120))
    assert warm.done and engine.send_priority is False
    assert ["priority" in b for b in rec.bodies("/generate")] == [True, False, False]
    assert sum("refuses request priorities" in r.message for r in caplog.records) == 1
    await engine.aclose()
