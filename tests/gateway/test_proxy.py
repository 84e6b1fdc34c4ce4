"""The gateway as a proxy (:mod:`agentwarm.gateway.app`): the real ``openai`` SDK through the
gateway (in-process, over httpx's ASGI transport) in front of real ``agentwarm serve``
subprocesses on loopback — replies equal to the upstream's own, the hooks called around each
request (synchronised on events), routing by session, failures of the upstream as 502/503/504,
security and the figures of ``/metrics`` and ``/v1/agentwarm/stats``."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from agentwarm.engines.base import PrefillStatus, new_rid
from agentwarm.engines.sglang import parse_metrics
from agentwarm.errors import EngineUnavailable
from agentwarm.gateway.app import GatewayConfig, create_gateway_app
from agentwarm.gateway.streams import ReplyAssembler, SSEReader
from agentwarm.gateway.types import SESSION_HEADER, ChatCall, Hooks, NoHooks, Reply
from agentwarm.gateway.upstream import Upstream
from agentwarm.server import ServerConfig, create_app
from tests.conftest_server import ServeProcess, free_port, requests_per_worker, serve
from tests.server.test_chat_completions import TOOL_REPLY, TOOLS, Scripted
from tests.waiting import until

WAIT_S = 20.0


@pytest.fixture(scope="module")
def worker() -> Iterator[ServeProcess]:
    with serve() as server:
        yield server


class Recording:
    """Hooks that record what they are called with; ``responded`` is set by each
    ``on_response``. With ``worker_url``, ``on_request`` notes the worker's request count (to
    show it runs before the request is forwarded)."""

    def __init__(self, worker_url: str | None = None) -> None:
        self.worker_url = worker_url
        self.requests: list[ChatCall] = []
        self.counts_at_request: list[int] = []
        self.tools: list[tuple[str, str]] = []
        self.replies: list[tuple[ChatCall, Reply]] = []
        self.responded = asyncio.Event()
        self.closed = False

    async def on_request(self, call: ChatCall) -> None:
        self.requests.append(call)
        if self.worker_url is not None:
            async with httpx.AsyncClient() as http:
                text = (await http.get(f"{self.worker_url}/metrics")).text
            self.counts_at_request.append(int(parse_metrics(text)["sglang:num_requests_total"]))

    def on_tool_call(self, call: ChatCall, name: str) -> None:
        self.tools.append((call.rid, name))

    async def on_response(self, call: ChatCall, reply: Reply) -> None:
        self.replies.append((call, reply))
        self.responded.set()

    def stats(self) -> dict[str, Any]:
        return {"sessions": 2, "nodes": 3, "requests": 999, "label": "not a number"}

    async def aclose(self) -> None:
        self.closed = True

    async def reply(self) -> tuple[ChatCall, Reply]:
        """The next reply ``on_response`` got."""
        await asyncio.wait_for(self.responded.wait(), WAIT_S)
        self.responded.clear()
        return self.replies[-1]


class Exploding(Recording):
    """Hooks whose every method raises after recording."""

    async def on_request(self, call: ChatCall) -> None:
        await super().on_request(call)
        raise RuntimeError("on_request broke")

    def on_tool_call(self, call: ChatCall, name: str) -> None:
        super().on_tool_call(call, name)
        raise RuntimeError("on_tool_call broke")

    async def on_response(self, call: ChatCall, reply: Reply) -> None:
        await super().on_response(call, reply)
        raise RuntimeError("on_response broke")

    def stats(self) -> dict[str, Any]:
        raise RuntimeError("stats broke")


@contextlib.asynccontextmanager
async def gateway(
    urls: list[str],
    hooks: Hooks | None = None,
    *,
    config: GatewayConfig | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout: float = 60.0,
) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    """The gateway app in front of ``urls`` and an httpx client of it; closed at the end as
    its lifespan would."""
    upstream = Upstream(urls, timeout=timeout, transport=transport)
    app = create_gateway_app(upstream, hooks or NoHooks(), config or GatewayConfig())
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
    try:
        yield app, http
    finally:
        await http.aclose()
        await app.state.gateway.aclose()


def sdk(http: httpx.AsyncClient, api_key: str = "none") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key=api_key, http_client=http, max_retries=0
    )


def messages(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a terse assistant for the gateway tests."},
        {"role": "user", "content": text},
    ]


async def test_plain_and_streamed_replies_equal_the_upstreams(worker: ServeProcess) -> None:
    direct = openai.AsyncOpenAI(base_url=f"{worker.url}/v1", api_key="none", max_retries=0)
    kwargs: dict[str, Any] = {"model": "any", "messages": messages("equal"), "max_tokens": 12}
    expected = await direct.chat.completions.create(**kwargs)
    hooks = Recording(worker.url)
    async with gateway([worker.url], hooks) as (_, http):
        client = sdk(http)
        plain = await client.chat.completions.create(**kwargs)
        call, reply = await hooks.reply()
        assert plain.choices[0].message.content == expected.choices[0].message.content
        assert plain.usage is not None and expected.usage is not None
        assert plain.usage.prompt_tokens == expected.usage.prompt_tokens
        assert plain.usage.completion_tokens == expected.usage.completion_tokens == 12
        assert reply.status == 200 and reply.message["role"] == "assistant"
        assert reply.message["content"] == expected.choices[0].message.content
        assert reply.prompt_tokens == expected.usage.prompt_tokens
        assert reply.ttft_s is not None and reply.ttft_s <= reply.duration_s

        stream = await client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == expected.choices[0].message.content
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.prompt_tokens == expected.usage.prompt_tokens
        call, reply = await hooks.reply()
        assert call.body["stream"] is True and call.worker == worker.url
        assert reply.message == {"role": "assistant", "content": text}
        assert reply.usage == chunks[-1].usage.model_dump(exclude_none=True)
        # the prompt was served twice before: all but its last token came from the cache
        assert reply.cached_tokens == reply.prompt_tokens - 1
        assert reply.ttft_s is not None and 0 < reply.ttft_s <= reply.duration_s
    # on_request ran before each request reached the worker (its count then: the direct call,
    # then the gateway's first request)
    first = hooks.counts_at_request[0]
    assert hooks.counts_at_request == [first, first + 1]
    assert requests_per_worker([worker])[0] >= first + 2
    assert hooks.closed


async def test_sessions_come_from_the_header_then_user_then_metadata(
    worker: ServeProcess,
) -> None:
    hooks = Recording()
    body: dict[str, Any] = {"model": "any", "messages": messages("who"), "max_tokens": 1}
    async with gateway([worker.url], hooks) as (_, http):
        headers = {SESSION_HEADER: "s-header", "X-Agentwarm-Node": "planner"}
        both = {**body, "user": "s-user"}
        for sent, extra in ((both, headers), (both, {}), ({**body}, {})):
            assert (await http.post("/v1/chat/completions", json=sent, headers=extra)).is_success
            await hooks.reply()
    assert [(c.session_hint, c.node_hint) for c in hooks.requests] == [
        ("s-header", "planner"),
        ("s-user", None),
        (None, None),
    ]
    assert hooks.requests[0].body == both  # as the client sent it


async def test_the_relay_passes_the_upstreams_bytes_and_tool_calls_reach_the_hooks() -> None:
    served = create_app(Scripted(TOOL_REPLY), ServerConfig(max_new_tokens=64), close_engine=False)
    tap = Tap(httpx.ASGITransport(app=served))
    hooks = Recording()
    body = {
        "model": "any",
        "messages": messages("call a tool"),
        "tools": TOOLS,
        "max_tokens": 32,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with gateway(["http://127.0.0.1:9"], hooks, transport=tap) as (_, http):
        got = await http.post("/v1/chat/completions", json=body)
        call, reply = await hooks.reply()
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/event-stream")
    assert got.content == tap.bodies[-1] and got.content.endswith(b"data: [DONE]\n\n")
    assert hooks.tools == [(call.rid, "get_user_details")]
    (tool_call,) = reply.message["tool_calls"]
    assert tool_call["function"]["name"] == "get_user_details"
    assert json.loads(tool_call["function"]["arguments"]) == {"user_id": "u1"}
    assert reply.prompt_tokens > 0 and reply.ttft_s is not None


def test_the_assembler_merges_tool_call_deltas_by_index() -> None:
    """Deltas as SGLang and vLLM stream them (name first, arguments in pieces, two calls
    interleaved), cut at arbitrary byte boundaries, with a comment and CRLF line ends."""
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "Let me look."}}]},
        _calls({"index": 0, "id": "c1", "type": "function", "function": {"name": "find"}}),
        _calls({"index": 0, "function": {"arguments": '{"q": '}}),
        _calls({"index": 1, "id": "c2", "function": {"name": "book", "arguments": "{}"}}),
        _calls({"index": 0, "function": {"name": None, "arguments": '"x"}'}}),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}},
    ]
    raw = b": keep-alive\r\n\r\n" + b"".join(
        b"data: " + json.dumps(e).encode() + (b"\r\n\r\n" if i == 3 else b"\n\n")
        for i, e in enumerate(events)
    )
    raw += b"data: [DONE]\n\n"
    names: list[str] = []
    assembler, reader = ReplyAssembler(0.0, on_tool=names.append), SSEReader()
    for start in range(0, len(raw), 7):
        for data in reader.feed(raw[start : start + 7]):
            assembler.add_event(data)
    assert not reader.mid_event
    reply = assembler.reply()
    assert names == ["find", "book"]
    assert reply.message == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "find", "arguments": '{"q": "x"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "book", "arguments": "{}"}},
        ],
    }
    assert reply.usage == {"prompt_tokens": 9, "completion_tokens": 4} and reply.status == 200


async def test_hooks_that_raise_do_not_break_requests(worker: ServeProcess) -> None:
    hooks = Exploding()
    kwargs: dict[str, Any] = {"model": "any", "messages": messages("boom"), "max_tokens": 5}
    async with gateway([worker.url], hooks) as (_, http):
        client = sdk(http)
        plain = await client.chat.completions.create(**kwargs)
        await hooks.reply()
        stream = await client.chat.completions.create(**kwargs, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await hooks.reply()
        stats = (await http.get("/v1/agentwarm/stats")).json()
    assert text == plain.choices[0].message.content and len(hooks.requests) == 2
    assert stats["requests"] == 2 and "sessions" not in stats


async def test_an_unreachable_upstream_is_a_502_naming_it() -> None:
    port = free_port()
    hooks = Recording()
    async with gateway([f"http://admin:hunter2@127.0.0.1:{port}"], hooks) as (_, http):
        client = sdk(http)
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as caught:
                await asyncio.wait_for(
                    client.chat.completions.create(
                        model="any", messages=messages("down"), stream=stream
                    ),
                    WAIT_S,
                )
            assert caught.value.status_code == 502
            message = caught.value.message
            assert f"upstream http://***@127.0.0.1:{port}" in message and "hunter2" not in message
            _, reply = await hooks.reply()
            assert reply.status == 502 and reply.ttft_s is None
        models = await http.get("/v1/models")
        health = await http.get("/health")
    assert models.status_code == 502 and f"127.0.0.1:{port}" in models.json()["error"]["message"]
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "upstreams": {f"http://***@127.0.0.1:{port}": False}}


async def test_a_slow_upstream_is_a_504_and_the_request_is_aborted_there(
    worker: ServeProcess,
) -> None:
    aborted = worker.metrics()["sglang:num_aborted_requests_total"]
    async with gateway([worker.url], timeout=0.3) as (_, http):
        body = {"model": "any", "messages": messages("slow"), "max_tokens": 3000}
        got = await http.post("/v1/chat/completions", json=body)
    assert got.status_code == 504 and worker.url in got.json()["error"]["message"]

    def counted() -> bool:
        return worker.metrics()["sglang:num_aborted_requests_total"] == aborted + 1

    await until(lambda: asyncio.to_thread(counted), what="the abort upstream")


async def test_an_upstream_503_passes_through() -> None:
    async def busy(scope: Any, receive: Any, send: Any) -> None:
        body = b'{"error": {"message": "overloaded", "code": 503}}'
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async with gateway(["http://127.0.0.1:9"], transport=httpx.ASGITransport(app=busy)) as (_, h):
        body = {"model": "any", "messages": messages("busy")}
        got = await h.post("/v1/chat/completions", json=body)
    assert got.status_code == 503 and got.json()["error"]["message"] == "overloaded"


async def test_models_fall_back_to_the_model_name_when_no_upstream_lists_any() -> None:
    async def bare(scope: Any, receive: Any, send: Any) -> None:  # a worker without /v1/models
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 404, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"detail": "Not Found"}'})

    transport = httpx.ASGITransport(app=bare)
    config = GatewayConfig(model_name="tiny")
    async with gateway(["http://127.0.0.1:9"], config=config, transport=transport) as (_, h):
        named = (await h.get("/v1/models")).json()
    async with gateway(["http://127.0.0.1:9"], transport=transport) as (_, h):
        unnamed = await h.get("/v1/models")
    assert [m["id"] for m in named["data"]] == ["tiny"] and named["object"] == "list"
    assert unnamed.status_code == 404 and "--model" in unnamed.json()["error"]["message"]


@pytest.mark.slow
async def test_one_session_goes_to_one_worker(worker: ServeProcess) -> None:
    with serve() as second:
        workers = [worker, second]
        urls = [w.url for w in workers]
        probe = Upstream(urls)
        owner = {s: probe.worker_for(s, "") for s in (f"session-{i}" for i in range(32))}
        await probe.aclose()
        a = next(s for s, url in owner.items() if url == urls[0])
        b = next(s for s, url in owner.items() if url == urls[1])
        before = requests_per_worker(workers)
        hooks = Recording()
        async with gateway(urls, hooks) as (_, http):
            client = sdk(http)
            for session, n in ((a, 3), (b, 2)):
                for i in range(n):
                    await client.chat.completions.create(
                        model="any",
                        messages=messages(f"turn {i}"),
                        max_tokens=2,
                        extra_headers={SESSION_HEADER: session},
                    )
                    await hooks.reply()
        after = requests_per_worker(workers)
    assert [x - y for x, y in zip(after, before, strict=True)] == [3, 2]
    assert [c.worker for c in hooks.requests] == [urls[0]] * 3 + [urls[1]] * 2


async def test_models_and_health_come_from_the_upstream(worker: ServeProcess) -> None:
    async with gateway([worker.url]) as (_, http):
        models = await http.get("/v1/models")
        health = await http.get("/health")
    assert models.json() == httpx.get(f"{worker.url}/v1/models").json()
    assert health.json() == {"status": "ok", "upstreams": {worker.url: True}}


async def test_api_key_host_and_body_checks(worker: ServeProcess) -> None:
    body: dict[str, Any] = {"model": "any", "messages": messages("keys"), "max_tokens": 1}
    async with gateway([worker.url], config=GatewayConfig(api_key="sesame")) as (_, http):
        with pytest.raises(openai.AuthenticationError, match="API key"):
            await sdk(http, "wrong").chat.completions.create(**body)
        assert (await sdk(http, "sesame").chat.completions.create(**body)).choices
        assert (await http.get("/health")).status_code == 200
        assert (await http.get("/metrics")).status_code == 200
        assert (await http.get("/v1/agentwarm/stats")).status_code == 401
    config = GatewayConfig(max_request_bytes=2048)
    async with gateway([worker.url], config=config) as (_, http):
        evil = await http.post("/v1/chat/completions", json=body, headers={"host": "evil.example"})
        assert evil.status_code == 421
        nan, as_json = b'{"messages": [], "temperature": NaN}', {"content-type": "application/json"}
        cases = [
            (http.post("/v1/chat/completions", content=b"{}"), 415),
            (http.post("/v1/chat/completions", json=[1]), 400),
            (http.post("/v1/chat/completions", json={"model": "any"}), 400),
            (http.post("/v1/chat/completions", json={**body, "pad": "x" * 4096}), 413),
            (http.post("/v1/chat/completions", content=nan, headers=as_json), 400),
            (http.get("/v1/chat/completions"), 405),
        ]
        for request, status in cases:
            got = await request
            assert got.status_code == status and got.json()["error"]["code"] == status
        missing = await http.post("/v1/chat/completions", json={"model": "any"})
        assert "'messages' list" in missing.json()["error"]["message"]


async def test_stats_and_metrics(worker: ServeProcess) -> None:
    hooks = Recording()
    body: dict[str, Any] = {"model": "any", "messages": messages("figures"), "max_tokens": 3}
    async with gateway([worker.url], hooks) as (_, http):
        for _ in range(3):
            assert (await http.post("/v1/chat/completions", json=body)).is_success
            await hooks.reply()
        assert (await http.post("/v1/chat/completions", json={})).status_code == 400
        stats = (await http.get("/v1/agentwarm/stats")).json()
        scrape = await http.get("/metrics")
    assert set(stats) == {
        "sessions",
        "nodes",
        "label",
        "requests",
        "ttft_p50_s",
        "ttft_p95_s",
        "overhead_p50_s",
        "overhead_p95_s",
    }
    assert (stats["sessions"], stats["nodes"], stats["requests"]) == (2, 3, 4)
    assert 0 < stats["ttft_p50_s"] <= stats["ttft_p95_s"]
    assert 0 < stats["overhead_p50_s"] <= stats["overhead_p95_s"] < stats["ttft_p50_s"]
    assert scrape.headers["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
    }
    assert samples[("agentwarm:gateway_requests_total", (("status", "200"),))] == 3
    assert samples[("agentwarm:gateway_requests_total", (("status", "400"),))] == 1
    assert samples[("agentwarm:gateway_ttft_seconds_count", ())] == 3
    assert samples[("agentwarm:gateway_overhead_seconds_count", ())] == 3
    hook_gauges = {
        name: v for (name, _), v in samples.items() if name.startswith("agentwarm:hooks")
    }
    assert hook_gauges == {
        "agentwarm:hooks_sessions": 2,
        "agentwarm:hooks_nodes": 3,
        "agentwarm:hooks_requests": 999,
    }


async def test_prefill_and_abort_through_the_upstream(worker: ServeProcess) -> None:
    upstream = Upstream([worker.url])
    ids = list(range(1000, 1300))
    try:
        first = await upstream.prefill(worker.url, ids, rid=new_rid(), session="p1")
        again = await upstream.prefill(worker.url, ids, rid=new_rid(), session="p1")
        await upstream.abort(worker.url, "no-such-rid")
    finally:
        await upstream.aclose()
    assert (first.status, first.prompt_tokens, first.cached_tokens) == (PrefillStatus.DONE, 300, 0)
    assert (again.status, again.cached_tokens, again.computed_tokens) == (
        PrefillStatus.DONE,
        300,
        0,
    )
    dead_url = f"http://127.0.0.1:{free_port()}"
    dead = Upstream([dead_url], connect_timeout=5.0)
    try:
        with pytest.raises(EngineUnavailable, match=dead_url):
            await dead.prefill(dead_url, ids, rid="r1", session=None)
        await dead.abort(dead_url, "r1")  # logged, never raised
    finally:
        await dead.aclose()


def test_upstream_urls_are_checked() -> None:
    with pytest.raises(ValueError, match="scheme must be http"):
        Upstream(["ftp://127.0.0.1:1"])
    with pytest.raises(ValueError, match="given twice"):
        Upstream(["http://127.0.0.1:1", "http://127.0.0.1:1/"])
    with pytest.raises(ValueError, match="at least one"):
        Upstream([])


@pytest.mark.slow
async def test_over_the_wire_on_the_tiny_preset() -> None:
    """``agentwarm serve --model tiny`` (Qwen2.5's tokenizer and template): the gateway's
    replies are the upstream's, and the hooks see the prompt found in the cache."""
    with serve("--engine", "local", "--model", "tiny") as server:
        kwargs: dict[str, Any] = {
            "model": "tiny",
            "messages": messages("Name three colours."),
            "max_tokens": 6,
            "temperature": 0,
        }
        direct = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
        expected = await direct.chat.completions.create(**kwargs)
        hooks = Recording()
        async with gateway([server.url], hooks) as (_, http):
            client = sdk(http)
            plain = await client.chat.completions.create(**kwargs)
            _, reply = await hooks.reply()
            stream = await client.chat.completions.create(**kwargs, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            _, streamed = await hooks.reply()
    assert expected.usage is not None and plain.usage is not None
    assert plain.choices[0].message.content == expected.choices[0].message.content == text
    assert plain.usage.prompt_tokens == expected.usage.prompt_tokens == reply.prompt_tokens
    assert reply.cached_tokens == reply.prompt_tokens - 1
    assert streamed.message["content"] == text and streamed.ttft_s is not None


class Tap(httpx.AsyncBaseTransport):
    """A transport that keeps the bytes of each reply it passes on."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        raw = b"".join([part async for part in response.stream])  # type: ignore[union-attr]
        await response.aclose()
        self.bodies.append(raw)
        return httpx.Response(response.status_code, headers=response.headers, content=raw)


def _calls(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": list(calls)}}]}
