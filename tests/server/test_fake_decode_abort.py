"""``agentwarm serve --engine fake`` honours aborts during decode, as the embedded engine does:
a client that disconnects while its request decodes, or an ``/abort_request`` for its rid, ends
it at the next output token, and ``/metrics`` counts it as aborted (with its whole prompt, which
was processed, and the tokens streamed before the abort)."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest_server import ServeProcess
from tests.waiting import wait_until

SECONDS_PER_OUTPUT_TOKEN = 0.02
MAX_NEW_TOKENS = 1000  # 20 s of decode: far longer than any test waits
PROMPT_TOKENS = 48


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    proc = ServeProcess(
        [
            "--engine",
            "fake",
            "--fake-seconds-per-token",
            "2e-4",
            "--fake-seconds-per-output-token",
            str(SECONDS_PER_OUTPUT_TOKEN),
        ]
    )
    try:
        yield proc
    finally:
        proc.stop()
    log = "".join(proc.output)
    assert "never retrieved" not in log, log
    assert "Traceback" not in log, log


def body(first: int, rid: str, *, stream: bool) -> dict[str, Any]:
    """A prompt of its own (distinct first token), so its prefill adds exactly its length to the
    cache: that is how a test knows the request is past its prefill, i.e. decoding."""
    prompt = [first, *range(100, 100 + PROMPT_TOKENS - 1)]
    sampling = {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0}
    return {"input_ids": prompt, "sampling_params": sampling, "rid": rid, "stream": stream}


class Counters:
    def __init__(self, server: ServeProcess) -> None:
        self.server = server
        self.before = server.metrics()

    def delta(self, name: str) -> float:
        return self.server.metrics()[name] - self.before[name]

    def wait_decoding(self) -> None:
        wait_until(
            lambda: self.delta("agentwarm:cache_tokens") >= PROMPT_TOKENS,
            what="the request to finish its prefill",
            timeout_s=30.0,
        )

    def assert_one_abort(self, *, streamed: bool) -> None:
        wait_until(
            lambda: (
                self.delta("sglang:num_requests_total") >= 1
                and self.server.metrics()["sglang:num_running_reqs"] == 0
            ),
            what="the request to end",
            timeout_s=30.0,
        )
        assert self.delta("sglang:num_requests_total") == 1
        assert self.delta("sglang:num_aborted_requests_total") == 1
        assert self.delta("sglang:prompt_tokens_total") == PROMPT_TOKENS  # all of it prefilled
        generated = self.delta("sglang:generation_tokens_total")
        if streamed:
            assert 1 <= generated < MAX_NEW_TOKENS
        else:
            assert generated == 0


def raw_post(url: str, payload: dict[str, Any]) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(payload).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST /generate HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def test_non_streaming_client_that_disconnects_during_decode_counts_as_aborted(
    server: ServeProcess,
) -> None:
    counters = Counters(server)
    sock = raw_post(server.url, body(1, "d" * 32, stream=False))
    counters.wait_decoding()
    sock.close()
    counters.assert_one_abort(streamed=False)


def test_streaming_client_that_disconnects_during_decode_counts_as_aborted(
    server: ServeProcess,
) -> None:
    counters = Counters(server)
    sock = raw_post(server.url, body(2, "s" * 32, stream=True))
    received = b""
    while (event := re.search(rb"data: (\{.*?\})\n\n", received)) is None:
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    first = json.loads(event.group(1))
    assert first["meta_info"]["finish_reason"] is None  # a token was decoded, more to come
    assert len(first["output_ids"]) >= 1
    sock.close()
    counters.assert_one_abort(streamed=True)


def test_abort_request_during_decode_ends_it_as_aborted(server: ServeProcess) -> None:
    counters = Counters(server)
    rid = "e" * 32
    answers: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{server.url}/generate", json=body(3, rid, stream=False), timeout=60)
        )
    )
    thread.start()
    counters.wait_decoding()
    assert httpx.post(f"{server.url}/abort_request", json={"rid": rid}).status_code == 200
    thread.join(30)
    assert [a.status_code for a in answers] == [200]
    meta = answers[0].json()["meta_info"]
    assert meta["finish_reason"]["type"] == "abort"
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (PROMPT_TOKENS, 0)
    counters.assert_one_abort(streamed=False)


def test_abort_request_during_a_streamed_decode_reports_the_tokens_so_far(
    server: ServeProcess,
) -> None:
    counters = Counters(server)
    rid = "f" * 32
    events: list[dict[str, Any]] = []
    with httpx.Client(base_url=server.url, timeout=60) as client:
        request = body(4, rid, stream=True)
        with client.stream("POST", "/generate", json=request) as resp:
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                events.append(json.loads(line.removeprefix("data: ")))
                if len(events) == 1:
                    assert client.post("/abort_request", json={"rid": rid}).status_code == 200
    assert [e["meta_info"]["finish_reason"] for e in events[:-1]] == [None] * (len(events) - 1)
    last = events[-1]["meta_info"]
    assert last["finish_reason"]["type"] == "abort"
    assert 1 <= last["completion_tokens"] < MAX_NEW_TOKENS
    assert len(events[-1]["output_ids"]) == last["completion_tokens"]
    counters.assert_one_abort(streamed=True)
