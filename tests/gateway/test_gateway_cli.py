"""``agentwarm gateway`` as a real process in front of ``agentwarm serve --engine fake``: the
``listening on`` line, the ``openai`` SDK through it over the wire, a client that goes away
aborting its request upstream, a clean SIGTERM, and one ``error:`` line (exit 2) for bad
options."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from agentwarm.predictors import default_predictor
from tests.conftest_server import ROOT, GatewayProcess, ServeProcess, serve
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def worker() -> Iterator[ServeProcess]:
    with serve() as server:
        yield server


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", "gateway", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_the_gateway_serves_the_sdk_and_stops_cleanly_on_sigterm(
    worker: ServeProcess, tmp_path: Path
) -> None:
    trace = tmp_path / "spans.jsonl"
    state = tmp_path / "state"
    args = ["--upstream", worker.url, "--model", "tiny-bytes", "--trace", str(trace)]
    gw = GatewayProcess([*args, "--state-dir", str(state)])
    try:
        assert gw.url.startswith("http://127.0.0.1:")
        assert f"upstream={worker.url}" in "".join(gw.output)
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="none", max_retries=0)
        direct = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="none", max_retries=0)
        kwargs = {
            "model": "any",
            "messages": [{"role": "user", "content": "over the wire"}],
            "max_tokens": 8,
        }
        expected = direct.chat.completions.create(**kwargs)  # type: ignore[call-overload]
        plain = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
        stream = client.chat.completions.create(**kwargs, stream=True)  # type: ignore[call-overload]
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert plain.choices[0].message.content == text == expected.choices[0].message.content
        health = httpx.get(f"{gw.url}/health", timeout=10).json()
        assert health == {"status": "ok", "upstreams": {worker.url: True}}
        stats = httpx.get(f"{gw.url}/v1/agentwarm/stats", timeout=10).json()
        assert stats["requests"] == 2 and stats["nodes"] == 1  # the learner counted them
        models = httpx.get(f"{gw.url}/v1/models", timeout=10).json()
        assert models == httpx.get(f"{worker.url}/v1/models", timeout=10).json()
    finally:
        gw.stop()
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status says SIGTERM
    assert gw.proc.returncode in (0, -signal.SIGTERM)
    assert "Traceback" not in "".join(gw.output) and "ERROR" not in "".join(gw.output)
    assert (state / "gateway.json").is_file()  # learned state saved at shutdown


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_goes_away_aborts_its_request_upstream(
    worker: ServeProcess, stream: bool
) -> None:
    gw = GatewayProcess(["--upstream", worker.url])
    aborted = worker.metrics()["sglang:num_aborted_requests_total"]
    body = {
        "model": "any",
        "messages": [{"role": "user", "content": f"a long answer, stream={stream}"}],
        "max_tokens": 4000,  # ~4 s at the fake's cost per output token
        "stream": stream,
    }
    try:
        if stream:
            with (
                httpx.Client(timeout=30) as http,
                http.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as reply,
            ):
                assert reply.status_code == 200
                first = next(reply.iter_bytes())
                assert first.startswith(b"data: ")  # relayed while the upstream still decodes
        else:
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=0.5)

        def counted() -> bool:
            return worker.metrics()["sglang:num_aborted_requests_total"] == aborted + 1

        wait_until(counted, what="the request's abort upstream")
    finally:
        gw.stop()


@pytest.mark.slow
def test_a_stream_cut_upstream_ends_with_an_error_event_and_done() -> None:
    with serve() as doomed:
        gw = GatewayProcess(["--upstream", doomed.url])
        body = {
            "model": "any",
            "messages": [{"role": "user", "content": "the worker dies"}],
            "max_tokens": 4000,
            "stream": True,
        }
        try:
            with (
                httpx.Client(timeout=30) as http,
                http.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as reply,
            ):
                chunks = reply.iter_bytes()
                received = next(chunks)
                doomed.kill()
                received += b"".join(chunks)
        finally:
            gw.stop()
    events = [e for e in received.split(b"\n\n") if e.strip()]
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["code"] == 502 and f"upstream {doomed.url} failed" in error["message"]
    assert all(e.startswith(b"data: {") for e in events[:-1])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upstream", "ftp://127.0.0.1:1"], "--upstream: engine URL 'ftp://127.0.0.1:1'"),
        (["--upstream", " , "], "--upstream needs at least one URL"),
        (
            ["--upstream", "http://127.0.0.1:1", "--model", "no-such-model"],
            "--model 'no-such-model' is neither a preset",
        ),
        (
            ["--upstream", "http://127.0.0.1:1", "--host", "0.0.0.0"],
            "refusing to run the gateway on 0.0.0.0 without an API key",
        ),
    ],
)
def test_bad_options_are_one_error_line_and_exit_2(args: list[str], message: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_no_share_learning_keeps_each_tenants_learning_apart_on_disk_by_tag(
    worker: ServeProcess, tmp_path: Path
) -> None:
    """``--no-share-learning``: one model per tenant, saved under its tag; no salt on disk."""
    state = tmp_path / "state"
    args = ["--upstream", worker.url, "--model", "tiny-bytes", "--state-dir", str(state)]
    gw = GatewayProcess([*args, "--no-share-learning"])
    salts = ("salt-of-tenant-a", "salt-of-tenant-b")
    try:
        for salt in salts:
            for step in ("first", "second"):
                body = {
                    "messages": [
                        {"role": "system", "content": f"You are the {step} agent."},
                        {"role": "user", "content": "hello"},
                    ],
                    "max_tokens": 2,
                    "user": "same-user",
                    "cache_salt": salt,
                }
                resp = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=30)
                assert resp.status_code == 200, resp.text
        stats = httpx.get(f"{gw.url}/v1/agentwarm/stats", timeout=10).json()
        assert stats["sessions"] == 2  # the same user under two salts: two sessions
    finally:
        gw.stop()
    saved = (state / "gateway.json").read_text()
    assert not any(salt in saved for salt in salts)
    doc = json.loads(saved)
    assert len(doc["tenants"]) == 2 and all(len(tag) == 32 for tag in doc["tenants"])
    assert all(sorted(h["owners"]) == sorted(doc["tenants"]) for h in doc["heads"]["heads"])
    untouched = json.loads(json.dumps(default_predictor().to_dict()))
    assert doc["predictor"] == untouched  # nothing was pooled
