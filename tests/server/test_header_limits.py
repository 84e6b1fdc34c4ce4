"""Oversized request headers, over the wire to ``agentwarm serve`` and ``agentwarm gateway``:
**431** with a JSON error naming the limit (not a reset connection), whether the whole head is
too long for the HTTP parser or one identifier header is over its own limit; the next request
is served."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest_server import GatewayProcess, ServeProcess, serve

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
HEADERS = ("X-Agentwarm-Session", "X-Agentwarm-Node", "X-SMG-Routing-Key")


@pytest.fixture(scope="module")
def worker() -> Iterator[ServeProcess]:
    with serve("--model", "tiny") as proc:
        yield proc


@pytest.fixture(scope="module")
def gateway(worker: ServeProcess) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(["--upstream", worker.url])
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(params=["serve", "gateway"])
def url(request: pytest.FixtureRequest) -> str:
    """The URL of ``agentwarm serve``, then of the gateway in front of it."""
    server: ServeProcess = request.getfixturevalue(
        "worker" if request.param == "serve" else "gateway"
    )
    return server.url


def chat(url: str, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(timeout=30) as client:  # a fresh connection each time
        return client.post(url + "/v1/chat/completions", json=BODY, headers=headers)


@pytest.mark.parametrize("header", HEADERS)
def test_a_200_kb_header_is_answered_431_not_reset(url: str, header: str) -> None:
    resp = chat(url, {header: "a" * 200_000})
    assert resp.status_code == 431, resp.text
    assert resp.headers["content-type"] == "application/json"
    error = resp.json()["error"]
    assert error["code"] == 431
    assert error["type"] == "RequestHeaderFieldsTooLargeError"
    assert "16384 bytes" in error["message"]
    assert chat(url, {}).status_code == 200


@pytest.mark.parametrize(
    ("server", "header"),
    [("serve", "X-SMG-Routing-Key")] + [("gateway", header) for header in HEADERS],
)
def test_an_identifier_header_over_its_limit_is_431_naming_it(
    request: pytest.FixtureRequest, server: str, header: str
) -> None:
    url = request.getfixturevalue("worker" if server == "serve" else "gateway").url
    resp = chat(url, {header: "s" * 4097})
    assert resp.status_code == 431, resp.text
    error = resp.json()["error"]
    assert error["code"] == 431
    assert header in error["message"]
    assert "4097 bytes" in error["message"] and "4096 bytes" in error["message"]
    assert chat(url, {header: "s" * 200}).status_code == 200
