"""Malformed input over the wire to ``agentwarm gateway`` (learning, with ``--model tiny``) in
front of ``agentwarm serve --engine fake``: every case is a 4xx JSON error naming the problem,
from the gateway itself or relayed from the worker, and the next request is served. Neither
process logs more than one line per refused request, and never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest_server import GatewayProcess, ServeProcess, serve
from tests.waiting import wait_until

USER = {"role": "user", "content": "hi"}
SYSTEM = {"role": "system", "content": "You are a router."}


def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


def call(arguments: str) -> dict[str, object]:
    function = {"name": "lookup", "arguments": arguments}
    return {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": function}],
    }


DEEP_CONTENT = (
    b'{"messages": [{"role": "system", "content": '
    + deep_list(800).encode()
    + b'}, {"role": "user", "content": "hi"}], "max_tokens": 2}'
)

CASES: list[tuple[str, bytes, int, tuple[str, ...]]] = [
    # (id, body, status, fragments of the error message)
    ("800-deep-content", DEEP_CONTENT, 400, ("messages.0.content", "nested too deeply", "64")),
    (
        "800-deep-tool-schema",
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "tools": [{"type": '
        b'"function", "function": {"name": "f", "parameters": '
        + b'{"a": ' * 800
        + b"1"
        + b"}" * 800
        + b"}}]}",
        400,
        ("tools.0.function.parameters.a.a", "nested too deeply"),
    ),
    (
        "50000-deep-tool-arguments",
        json.dumps({"messages": [USER, call(deep_list(50_000)), USER], "max_tokens": 2}).encode(),
        400,
        ("messages[1].tool_calls[0].function.arguments", "nested too deeply"),
    ),
    (
        "50000-deep-tool-arguments-warm",
        json.dumps({"messages": [USER, call(deep_list(50_000))], "max_tokens": 0}).encode(),
        400,
        ("messages[1].tool_calls[0].function.arguments", "nested too deeply"),
    ),
    (
        "lone-surrogate-content",
        b'{"messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 2}',
        400,
        ("messages.0.content: ", "lone surrogate '\\ud800' at index 1"),
    ),
    ("not-json", b'{"messages": [', 400, ("invalid JSON body",)),
    ("no-messages", b'{"model": "m"}', 400, ("'messages' list",)),
    # Forwarded: the worker refuses these; the learner must not fail on them either.
    ("message-not-object", b'{"messages": [1], "max_tokens": 2}', 400, ("messages.0",)),
    ("message-null", b'{"messages": [null], "max_tokens": 2}', 400, ("messages.0",)),
    (
        "tool-not-object",
        b'{"messages": [{"role": "user"}], "tools": [1], "max_tokens": 2}',
        400,
        ("tools.0",),
    ),
    (
        "tool-calls-not-a-list",
        json.dumps(
            {"messages": [SYSTEM, USER, {"role": "assistant", "tool_calls": "x"}], "max_tokens": 2}
        ).encode(),
        400,
        ("cannot render",),
    ),
    (
        "system-content-number",
        json.dumps(
            {"messages": [{"role": "system", "content": 5}, USER], "max_tokens": 2}
        ).encode(),
        400,
        ("content must be a string",),
    ),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(scope="module")
def worker() -> Iterator[ServeProcess]:
    with serve("--model", "tiny", "--max-request-bytes", "4000000") as proc:
        yield proc


@pytest.fixture(scope="module")
def gateway(
    worker: ServeProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    state = tmp_path_factory.mktemp("state")
    gw = GatewayProcess(["--upstream", worker.url, "--model", "tiny", "--state-dir", str(state)])
    try:
        yield gw
    finally:
        gw.stop()


def post(url: str, body: bytes) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(url + "/v1/chat/completions", content=body, headers=headers, timeout=30)


@pytest.mark.parametrize(("body", "status", "fragments"), [c[1:] for c in CASES], ids=IDS)
def test_malformed_chat_through_the_gateway_is_a_4xx(
    gateway: GatewayProcess, body: bytes, status: int, fragments: tuple[str, ...]
) -> None:
    resp = post(gateway.url, body)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == status
    for fragment in fragments:
        assert fragment in error["message"]
    ok = post(gateway.url, json.dumps({"messages": [SYSTEM, USER], "max_tokens": 2}).encode())
    assert ok.status_code == 200, ok.text


@pytest.mark.slow
def test_refused_requests_log_at_most_a_line_each_and_no_traceback(tmp_path: Path) -> None:
    # Fresh processes, so that their whole log is this test's: every case through the gateway
    # (live and warm), then straight to the worker.
    with serve("--model", "tiny", "--max-request-bytes", "4000000") as worker:
        args = ["--upstream", worker.url, "--model", "tiny", "--state-dir", str(tmp_path)]
        gw = GatewayProcess(args)
        try:
            started = (len(gw.output), len(worker.output))
            for _, body, status, _ in CASES:
                for url, warm in ((gw.url, False), (gw.url, True), (worker.url, False)):
                    sent = body.replace(b'"max_tokens": 2', b'"max_tokens": 0') if warm else body
                    answered = post(url, sent).status_code
                    assert answered == status or (warm and answered < 500), (sent[:80], answered)
            served = post(gw.url, json.dumps({"messages": [SYSTEM, USER]}).encode())
            assert served.status_code == 200
        finally:
            gw.stop()
        wait_until(lambda: gw.proc.poll() is not None, what="the gateway to exit")
        gw._drain.join(10)
    requests = 3 * len(CASES)
    for name, output, skip in (
        ("gateway", gw.output, started[0]),
        ("worker", worker.output, started[1]),
    ):
        logged = "".join(output[skip:])
        assert "Traceback" not in logged, f"{name} logged a traceback:\n{logged[:3000]}"
        assert len(output) - skip <= requests, f"{name} logged:\n{logged[:3000]}"
        assert len(logged) <= 400 * requests, f"{name} logged {len(logged)} bytes"
