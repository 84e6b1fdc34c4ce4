"""Security of ``agentwarm serve``: refusal to expose a keyless server, Host/Origin checks,
JSON content type, POST-only state changes, the default body limit, SGLang's abort answer."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.local.model import PRESET_CONTEXT
from agentwarm.server import ServerConfig, create_app
from agentwarm.server.security import default_max_request_bytes
from tests.conftest_server import ROOT, ServeProcess, serve

PREFILL = {"sampling_params": {"max_new_tokens": 0}}


def client_for(engine: FakeEngine, base: str = "http://127.0.0.1", **config: Any) -> Any:
    app = create_app(engine, ServerConfig(**config), close_engine=False)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base)


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    fake = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-6)
    yield fake
    await fake.aclose()


# ---------------------------------------------------------------- 1: refusal without a key


def cli_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "AGENTWARM_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", "serve", "--engine", "fake", "--port", "0", *args],
        cwd=ROOT,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_non_loopback_host_without_api_key_refuses_to_start(host: str) -> None:
    proc = cli_serve("--host", host)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: refusing to serve on {host} without an API key")
    for fix in ("--api-key", "AGENTWARM_API_KEY", "--insecure-no-api-key"):
        assert fix in lines[0]


@pytest.mark.slow
def test_non_loopback_host_starts_with_a_key_or_the_explicit_escape_hatch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTWARM_API_KEY", raising=False)
    for args in (["--insecure-no-api-key"], ["--api-key", "k"]):
        server = ServeProcess(["--engine", "fake", "--host", "0.0.0.0", *args])
        try:
            port = server.url.rsplit(":", 1)[1]
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
        finally:
            server.stop()
    monkeypatch.setenv("AGENTWARM_API_KEY", "from-env")
    server = ServeProcess(["--engine", "fake", "--host", "0.0.0.0"])
    server.stop()


# ---------------------------------------------------------------- 2: Host, Origin, types, methods


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.0.0.1:30000",
        "127.8.9.10:1",
        "localhost",
        "LOCALHOST:8080",
        "[::1]",
        "[::1]:30000",
    ],
)
async def test_loopback_hosts_are_served(engine: FakeEngine, host: str) -> None:
    async with client_for(engine) as client:
        resp = await client.get("/model_info", headers={"host": host})
        assert resp.status_code == 200


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:30000", "127.0.0.1.evil.example", "localhost.evil", "[::2]"],
)
async def test_other_hosts_get_421_without_a_key(engine: FakeEngine, host: str) -> None:
    async with client_for(engine) as client:
        await client.post("/generate", json={"text": "abc", **PREFILL})
        for method, path in (("POST", "/flush_cache"), ("POST", "/generate"), ("GET", "/health")):
            resp = await client.request(method, path, json={"text": "x"}, headers={"host": host})
            assert resp.status_code == 421
            error = resp.json()["error"]
            assert error["code"] == 421 and error["type"] == "MisdirectedRequestError"
            assert "DNS-rebinding" in error["message"] and "--api-key" in error["message"]
        assert engine.cache.total_tokens == 3  # the cache was not flushed
        assert len(engine.log) == 1


async def test_bound_host_is_accepted_and_a_key_lifts_the_host_check(engine: FakeEngine) -> None:
    async with client_for(engine, host="10.1.2.3") as client:
        assert (await client.get("/health", headers={"host": "10.1.2.3:80"})).status_code == 200
        assert (await client.get("/health", headers={"host": "10.1.2.4"})).status_code == 421
    async with client_for(engine, host="0.0.0.0") as client:  # wildcard: any IP literal
        assert (await client.get("/health", headers={"host": "10.1.2.4:80"})).status_code == 200
        assert (await client.get("/health", headers={"host": "evil.example"})).status_code == 421
    async with client_for(engine, api_key="k") as client:
        auth = {"host": "gateway.example", "authorization": "Bearer k"}
        assert (await client.post("/flush_cache", headers=auth)).status_code == 200


@pytest.mark.parametrize("origin", ["http://evil.example", "https://evil.example:8443", "null"])
async def test_cross_site_origin_cannot_change_state(engine: FakeEngine, origin: str) -> None:
    async with client_for(engine) as client:
        await client.post("/generate", json={"text": "abc", **PREFILL})
        resp = await client.post("/flush_cache", headers={"origin": origin})
        assert resp.status_code == 403
        assert "cross-site request" in resp.json()["error"]["message"]
        assert engine.cache.total_tokens == 3
        local = await client.post("/flush_cache", headers={"origin": "http://localhost:8888"})
        assert local.status_code == 200 and engine.cache.total_tokens == 0


@pytest.mark.parametrize("path", ["/generate", "/abort_request", "/tokenize", "/detokenize"])
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
async def test_json_endpoints_need_json_content_type(
    engine: FakeEngine, path: str, content_type: str | None
) -> None:
    bodies = {
        "/generate": b'{"text": "abc", "sampling_params": {"max_new_tokens": 0}}',
        "/abort_request": b'{"abort_all": true}',
        "/tokenize": b'{"prompt": "abc"}',
        "/detokenize": b'{"tokens": [97]}',
    }
    async with client_for(engine) as client:
        headers = {"content-type": content_type} if content_type else {}
        resp = await client.post(path, content=bodies[path], headers=headers)
        assert resp.status_code == 415
        error = resp.json()["error"]
        assert error["code"] == 415
        assert error["message"].startswith(
            f"Content-Type must be application/json, got {content_type or 'none'!r}"
        )
        assert engine.log == []
        for ok_type in ("application/json", "Application/JSON; charset=utf-8"):
            ok = await client.post(path, content=bodies[path], headers={"content-type": ok_type})
            assert ok.status_code == 200


async def test_state_changing_endpoints_are_post_only(engine: FakeEngine) -> None:
    async with client_for(engine) as client:
        await client.post("/generate", json={"text": "abc", **PREFILL})
        for path in ("/flush_cache", "/abort_request"):
            resp = await client.get(path)
            assert resp.status_code == 405
            assert resp.json()["error"]["message"] == f"GET {path}: Method Not Allowed (use POST)"
        assert engine.cache.total_tokens == 3
        assert (await client.post("/flush_cache")).status_code == 200


def test_rebinding_request_over_the_wire_does_not_flush() -> None:
    """The reproduction of the issue: ``curl -H 'Host: evil.example' :P/flush_cache``."""
    with serve() as server, httpx.Client(base_url=server.url, timeout=10) as client:
        body = {"text": "warm prefix", **PREFILL}
        client.post("/generate", json=body)
        for method in ("GET", "POST"):
            evil = client.request(method, "/flush_cache", headers={"host": "evil.example"})
            assert evil.status_code == 421
        cached = client.post("/generate", json=body).json()["meta_info"]["cached_tokens"]
        assert cached == len(b"warm prefix")
        assert client.get("/flush_cache").status_code == 405
        assert client.post("/flush_cache").status_code == 200
        cached = client.post("/generate", json=body).json()["meta_info"]["cached_tokens"]
        assert cached == 0


# ---------------------------------------------------------------- 5: default body limit


def test_default_limit_follows_the_model_context() -> None:
    assert default_max_request_bytes(8192) == 16 * 8192 + 64 * 1024 == 196_608
    assert default_max_request_bytes(1 << 20) == 8 * 1024 * 1024  # capped
    assert default_max_request_bytes(None) == 8 * 1024 * 1024


@pytest.fixture(scope="module")
def local_server() -> Iterator[ServeProcess]:
    """The embedded engine (tiny-bytes preset: 32,768-token context, 259 ids) with the default
    body limit."""
    with serve("--engine", "local", "--model", "tiny-bytes") as server:
        yield server


def raw_request(url: str, head: bytes) -> bytes:
    """Send ``head`` (no body) and read one whole response."""
    host, port = url.removeprefix("http://").split(":")
    reply = b""
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        while b"\r\n\r\n" not in reply and (chunk := sock.recv(65536)):
            reply += chunk
        headers, _, body = reply.partition(b"\r\n\r\n")
        length = re.search(rb"content-length: (\d+)", headers, re.IGNORECASE)
        while length and len(body) < int(length.group(1)) and (chunk := sock.recv(65536)):
            body += chunk
    return headers + b"\r\n\r\n" + body


def test_default_limit_rejects_a_large_body_before_reading_it(local_server: ServeProcess) -> None:
    limit = default_max_request_bytes(PRESET_CONTEXT)
    assert limit == 589_824
    # Declared too large: answered 413 at once, without the body ever being sent.
    head = (
        b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {limit + 1}\r\n\r\n".encode()
    )
    reply = raw_request(local_server.url, head)
    assert reply.startswith(b"HTTP/1.1 413")
    assert f"limit of {limit} bytes".encode() in reply
    with httpx.Client(base_url=local_server.url, timeout=30) as client:
        # A whole context of 6-digit token ids (~256 KB) is not refused for its size: the engine
        # answers (here: 400, ids outside the byte vocabulary), not the body limit.
        whole_context = {"input_ids": [151_643] * PRESET_CONTEXT, **PREFILL}
        resp = client.post("/generate", json=whole_context)
        assert resp.status_code == 400 and "vocabulary" in resp.json()["error"]["message"]
        over = b'{"input_ids": [' + b"1," * (limit // 2) + b"1]}"
        resp = client.post("/generate", content=over, headers={"content-type": "application/json"})
        assert resp.status_code == 413
        assert client.get("/health").status_code == 200


def test_large_streamed_bodies_do_not_block_health(local_server: ServeProcess) -> None:
    """Four uploads stream chunked bodies (no Content-Length) to 3/4 of the limit and stay open;
    /health answers while all four are open and unanswered. Then each sends past the limit
    without ever ending its body, and each is answered 413: the limit is enforced while the body
    streams in, not after it has all been read and parsed."""
    limit = default_max_request_bytes(PRESET_CONTEXT)
    host, port = local_server.url.removeprefix("http://").split(":")
    piece = b"1," * 4096  # 8 KiB of the input_ids array
    head = (
        b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )

    def chunks(data: bytes, n: int) -> bytes:
        return (f"{len(data):x}\r\n".encode() + data + b"\r\n") * n

    uploads = [socket.create_connection((host, int(port)), timeout=30) for _ in range(4)]
    try:
        for sock in uploads:
            sock.sendall(
                head + chunks(b'{"input_ids": [', 1) + chunks(piece, limit * 3 // 4 // 8192)
            )
        assert httpx.get(f"{local_server.url}/health", timeout=30).status_code == 200
        for sock in uploads:  # none was answered: each is still waiting for the rest of its body
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
            sock.settimeout(30)
        replies = []
        for sock in uploads:
            sock.sendall(chunks(piece, limit // 4 // 8192 + 2))  # past the limit; no final chunk
            reply = b""
            while b"\r\n\r\n" not in reply and (data := sock.recv(65536)):
                reply += data
            replies.append(reply.split(b" ", 2)[1])  # the status code
    finally:
        for sock in uploads:
            sock.close()
    assert replies == [b"413"] * 4
    assert httpx.get(f"{local_server.url}/health", timeout=10).status_code == 200


# ---------------------------------------------------------------- 7: abort of unknown rids


async def test_abort_of_unknown_or_finished_rid_answers_200_as_sglang(engine: FakeEngine) -> None:
    async with client_for(engine) as client:
        assert (await client.post("/abort_request", json={"rid": "u" * 32})).status_code == 200
        done = await client.post("/generate", json={"text": "abc", "rid": "f" * 32, **PREFILL})
        assert done.json()["meta_info"]["finish_reason"]["type"] == "length"
        resp = await client.post("/abort_request", json={"rid": "f" * 32})
        assert (resp.status_code, resp.content) == (200, b"")
        assert engine.aborts == []  # nothing was running: the engine is not bothered
        missing = await client.post("/abort_request", json={})  # an empty rid is an unknown rid
        assert (missing.status_code, missing.content) == (200, b"")
        assert engine.aborts == []
