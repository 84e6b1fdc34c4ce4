"""The gateway's warm path (``max_tokens: 0``) against ``agentwarm serve``'s: a warm body is
validated as serve validates a chat request (a real ``agentwarm gateway`` process answers every
invalid one with serve's own 400), a streamed warm request gets serve's answer (a usage chunk
and ``[DONE]``), and a warm request is routed — worker and ``X-SMG-Routing-Key`` — by the same
session id as the live requests with the same hint (two real upstreams, the wire recorded)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentwarm.chat import FALLBACK
from agentwarm.engines.sglang import ROUTING_KEY_HEADER
from agentwarm.engines.tokenizers import ByteTokenizer
from agentwarm.gateway.app import GatewayConfig, create_gateway_app
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.prompts import Renderer
from agentwarm.gateway.types import SESSION_HEADER
from agentwarm.gateway.upstream import Upstream
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.warmup.render import ChatRenderer
from tests.conftest_server import GatewayProcess, ServeProcess, serve

USER = {"role": "user", "content": "Warm this prompt for the next request, please."}
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def workers() -> Iterator[list[ServeProcess]]:
    with serve() as first, serve() as second:
        yield [first, second]


@pytest.fixture(scope="module")
def gateway_url(
    workers: list[ServeProcess], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    state = tmp_path_factory.mktemp("warm-state")
    args = ["--upstream", workers[0].url, "--model", "tiny-bytes", "--state-dir", str(state)]
    gw = GatewayProcess(args)
    try:
        yield gw.url
    finally:
        gw.stop()


INVALID_WARM_BODIES: dict[str, dict[str, Any]] = {
    # The probe: every field wrong at once.
    "all-wrong": {"max_tokens": 0, "n": 5, "temperature": "hot", "messages": [{"role": "wizard"}]},
    "role": {"max_tokens": 0, "messages": [{"role": "wizard", "content": "hi"}]},
    "n": {"max_tokens": 0, "n": 5, "messages": [USER]},
    "temperature": {"max_completion_tokens": 0, "temperature": 7, "messages": [USER]},
    "tool-without-name": {"max_tokens": 0, "messages": [USER], "tools": [{"type": "function"}]},
    "tools-not-a-list": {"max_tokens": 0, "messages": [USER], "tools": "not a list"},
    "max-tokens-0.0": {"max_tokens": 0.0, "messages": [USER]},  # serve's limits are integers
    "stream-not-bool": {"max_tokens": 0, "stream": "yes", "messages": [USER]},
    "no-messages": {"max_tokens": 0, "messages": []},
    "content-number": {"max_tokens": 0, "messages": [{"role": "user", "content": 42}]},
    "image-part": {
        "max_tokens": 0,
        "messages": [{"role": "user", "content": [{"type": "image_url"}]}],
    },
    "negative-limit": {"max_tokens": 0, "max_completion_tokens": -1, "messages": [USER]},
    "stop": {"max_tokens": 0, "messages": [USER], "stop": ["\n"]},
}


@pytest.mark.parametrize("body", INVALID_WARM_BODIES.values(), ids=INVALID_WARM_BODIES)
def test_an_invalid_warm_request_gets_serves_own_400(
    body: dict[str, Any], workers: list[ServeProcess], gateway_url: str
) -> None:
    direct = httpx.post(f"{workers[0].url}{CHAT}", json=body, timeout=30)
    through = httpx.post(f"{gateway_url}{CHAT}", json=body, timeout=30)
    assert direct.status_code == 400, direct.text
    assert (through.status_code, through.json()) == (400, direct.json())


def events(raw: bytes) -> list[Any]:
    """The ``data:`` payloads of an event stream, ``[DONE]`` as the string."""
    out: list[Any] = []
    for event in raw.split(b"\n\n"):
        if event.strip():
            assert event.startswith(b"data: "), event
            data = event.removeprefix(b"data: ")
            out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


def test_a_streamed_warm_request_is_answered_as_serve_streams_one(
    workers: list[ServeProcess], gateway_url: str
) -> None:
    body = {"model": "any", "messages": [USER], "max_tokens": 0, "stream": True}
    direct = httpx.post(f"{workers[0].url}{CHAT}", json=body, timeout=30)
    through = httpx.post(f"{gateway_url}{CHAT}", json=body, timeout=30)
    for reply in (direct, through):
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
    expected, got = events(direct.content), events(through.content)
    assert [e if e == "[DONE]" else sorted(e) for e in got] == [
        e if e == "[DONE]" else sorted(e) for e in expected
    ]
    chunk = got[0]
    assert (chunk["object"], chunk["choices"], got[1:]) == ("chat.completion.chunk", [], ["[DONE]"])
    assert chunk["usage"]["completion_tokens"] == 0 and chunk["usage"]["prompt_tokens"] > 10
    # The SDK reads it as a stream of one usage chunk.
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="none", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="any",
            messages=[USER],  # type: ignore[list-item]
            max_tokens=0,
            stream=True,
        )
    )
    assert len(chunks) == 1 and chunks[0].choices == [] and chunks[0].usage is not None


class Recorder(httpx.AsyncBaseTransport):
    """The real network, with the worker, path and routing key of each request noted."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[tuple[str, str, str | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        worker = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        self.sent.append((worker, request.url.path, request.headers.get(ROUTING_KEY_HEADER)))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("salt", [None, "tenant-a"])
async def test_a_warm_request_meets_its_sessions_live_requests(
    workers: list[ServeProcess], tmp_path: Path, salt: str | None
) -> None:
    """Hints that sanitizing changes (a space, an ``@``): the warm request of each of at least 8
    sessions (more until both workers served one: ports, so the ring, vary per run) reaches the
    worker its live request reaches, with the same routing key; with a ``cache_salt`` too (the
    tenant's session id, ``hint~tag``, routes both)."""
    recorder = Recorder()
    upstream = Upstream([w.url for w in workers], transport=recorder)
    renderer = Renderer(ChatRenderer(ByteTokenizer().encode, FALLBACK))
    policy = PrefetchPolicy(enabled=False)  # only the requests the test sends reach a worker
    learner = Learner(upstream, renderer, policy=policy, state_dir=tmp_path)
    app = create_gateway_app(upstream, learner, GatewayConfig())
    transport = httpx.ASGITransport(app=app)
    seen: dict[str, tuple[list[Any], list[Any]]] = {}
    salted = {"cache_salt": salt} if salt else {}
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for i in range(64):
            workers_seen = {sent[0][0] for sent, _ in seen.values()}
            if i >= 8 and len(workers_seen) == len(workers):
                break
            hint = f"agent run {i} of user{i}@example.com"
            messages = [{"role": "system", "content": f"You are agent {i}."}, USER]
            start = len(recorder.sent)
            warm = await http.post(
                CHAT,
                json={"model": "any", "messages": messages, "max_tokens": 0, **salted},
                headers={SESSION_HEADER: hint},
            )
            assert warm.status_code == 200 and warm.json()["choices"] == []
            middle = len(recorder.sent)
            live = await http.post(
                CHAT,
                json={"model": "any", "messages": messages, "max_tokens": 2, **salted},
                headers={SESSION_HEADER: hint},
            )
            assert live.status_code == 200
            seen[hint] = (recorder.sent[start:middle], recorder.sent[middle:])
    await app.state.gateway.aclose()
    await recorder.aclose()
    for hint, (warmed, lived) in seen.items():
        assert [path for _, path, _ in warmed] == ["/generate"], hint
        assert [path for _, path, _ in lived] == [CHAT], hint
        (warm_worker, _, warm_key), (live_worker, _, live_key) = warmed[0], lived[0]
        assert (warm_worker, warm_key) == (live_worker, live_key), hint
        assert live_key is not None and " " not in live_key and "@" not in live_key
        assert ("~" in live_key) == (salt is not None), live_key  # the tenant's own session
    # Both workers served sessions: the ring was put to the test.
    assert {sent[0][0] for sent, _ in seen.values()} == {w.url for w in workers}
