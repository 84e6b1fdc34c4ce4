"""What a real ``agentwarm gateway`` process sends its upstream and relays back, against a
scripted upstream on loopback: the headers a client reads (``retry-after`` of a 429, request
ids, rate limits) reach the client on plain answers and streams, others do not; the upstream
API key is sent as asked; and a key together with ``user:password@`` in an upstream URL is
refused at start (one ``error:`` line, exit 2) and by :class:`Upstream` itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import httpx
import pytest

from agentwarm.gateway.upstream import Upstream
from tests.conftest_server import GatewayProcess, http_server
from tests.gateway.test_gateway_cli import run_cli

#: What the scripted upstream answers besides its body: the headers a client reads...
CLIENT_HEADERS = {
    "retry-after": "7",
    "retry-after-ms": "7000",
    "x-should-retry": "true",
    "x-request-id": "req-123",
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "7s",
    "openai-processing-ms": "3",
}
#: ... and headers that are the upstream's own business.
PRIVATE_HEADERS = {"set-cookie": "upstream-session=secret", "x-upstream-node": "gpu-7"}
RATE_LIMITED = {"error": {"message": "rate limited", "type": "RateLimitError", "code": 429}}
EVENTS = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n'


class Scripted(BaseHTTPRequestHandler):
    """A chat endpoint that answers 429 (a stream: 200 and two events), with
    :data:`CLIENT_HEADERS` and :data:`PRIVATE_HEADERS`; it notes each request's
    ``Authorization``."""

    protocol_version = "HTTP/1.1"
    authorizations: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        self._answer(200, "application/json", b"{}")

    def do_POST(self) -> None:
        self.authorizations.append(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("stream"):
            self._answer(200, "text/event-stream", EVENTS)
        else:
            self._answer(429, "application/json", json.dumps(RATE_LIMITED).encode())

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**CLIENT_HEADERS, **PRIVATE_HEADERS}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[str, list[str | None]]]:
    """The scripted upstream's URL and the ``Authorization`` of each request it got."""
    seen: list[str | None] = []
    with http_server(type("H", (Scripted,), {"authorizations": seen})) as url:
        yield url, seen


@pytest.fixture(scope="module")
def gateway_url(scripted: tuple[str, list[str | None]]) -> Iterator[str]:
    gw = GatewayProcess(["--upstream", scripted[0], "--upstream-api-key", "upstream-key"])
    try:
        yield gw.url
    finally:
        gw.stop()


def test_a_429_reaches_the_client_with_retry_after_and_the_rate_limit_headers(
    gateway_url: str, scripted: tuple[str, list[str | None]]
) -> None:
    body = {"model": "any", "messages": [{"role": "user", "content": "hi"}]}
    got = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, timeout=30)
    assert (got.status_code, got.json()) == (429, RATE_LIMITED)
    assert {name: got.headers.get(name) for name in CLIENT_HEADERS} == CLIENT_HEADERS
    assert got.headers["content-type"] == "application/json"
    assert got.headers["content-length"] == str(len(got.content))
    assert [got.headers.get(name) for name in PRIVATE_HEADERS] == [None, None]
    assert scripted[1][-1] == "Bearer upstream-key"  # the key, sent as asked


def test_a_streams_headers_are_relayed_too(gateway_url: str) -> None:
    body = {"model": "any", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", f"{gateway_url}/v1/chat/completions", json=body, timeout=30) as got:
        raw = got.read()
    assert got.status_code == 200 and raw == EVENTS
    assert got.headers["content-type"].startswith("text/event-stream")
    assert {name: got.headers.get(name) for name in CLIENT_HEADERS} == CLIENT_HEADERS
    assert [got.headers.get(name) for name in PRIVATE_HEADERS] == [None, None]


def test_an_api_key_with_credentials_in_the_url_is_refused_at_start() -> None:
    args = ["--upstream", "http://u:hunter2@127.0.0.1:1", "--upstream-api-key", "k"]
    done = run_cli(*args, "--port", "0")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --upstream: "), lines
    assert "'http://***@127.0.0.1:1' has user:password credentials" in lines[0]
    assert "--upstream-api-key" in lines[0] and "Remove the credentials" in lines[0]
    assert "hunter2" not in done.stderr + done.stdout


async def test_upstream_refuses_a_key_with_credentials_and_takes_either_alone() -> None:
    with pytest.raises(ValueError, match=r"^upstream URL 'http://\*\*\*@w:1' has user:password"):
        Upstream(["http://w:2", "http://u:hunter2@w:1"], api_key="k")
    alone = [Upstream(["http://u:p@w:1"]), Upstream(["http://w:1"], api_key="k")]
    assert [up.urls for up in alone] == [("http://***@w:1",), ("http://w:1",)]
    for up in alone:
        await up.aclose()
