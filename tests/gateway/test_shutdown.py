"""Shutdown and crash of ``agentwarm gateway`` (issue 23 item 9), through real processes in
front of ``agentwarm serve --engine fake`` (which serves one request at a time, 0.01 s per
output token here).

* SIGTERM drains: new connections are refused at once, the requests in flight finish within
  ``--shutdown-grace``; with a short grace the rest end with a 503 (a JSON error, or an SSE
  error event and ``[DONE]``), never a cut stream or a plain-text 500.
* The learned state is saved every ``--save-interval`` seconds: after SIGKILL a restart has what
  was learned (the test waits for the file to hold it, not for a time).
* A state dir that cannot be written is one ``error:`` line naming it and exit code 2, at start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest_server import ROOT, GatewayProcess, ServeProcess, serve
from tests.waiting import wait_until

CLIENT_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def slow_worker() -> Iterator[ServeProcess]:
    with serve("--fake-seconds-per-output-token", "0.01") as server:
        yield server


def _body(text: str, *, stream: bool, max_tokens: int) -> dict[str, object]:
    return {
        "model": "any",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def _stream(url: str, text: str, max_tokens: int) -> tuple[int, bytes]:
    with (
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as http,
        http.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json=_body(text, stream=True, max_tokens=max_tokens),
        ) as reply,
    ):
        return reply.status_code, b"".join(reply.iter_bytes())


def _post(url: str, text: str, max_tokens: int) -> httpx.Response:
    body = _body(text, stream=False, max_tokens=max_tokens)
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S)


def _events(stream: bytes) -> list[bytes]:
    return [e for e in stream.split(b"\n\n") if e.strip()]


def _send_four(
    pool: ThreadPoolExecutor, gw: GatewayProcess, worker: ServeProcess, max_tokens: int
) -> tuple[list[Future[tuple[int, bytes]]], list[Future[httpx.Response]]]:
    """Two streams and two plain requests, all in flight upstream when this returns."""
    running = worker.metrics()["sglang:num_running_reqs"]
    streams = [pool.submit(_stream, gw.url, f"stream {i}", max_tokens) for i in range(2)]
    plain = [pool.submit(_post, gw.url, f"plain {i}", max_tokens) for i in range(2)]

    def in_flight() -> bool:
        return worker.metrics()["sglang:num_running_reqs"] == running + 4

    wait_until(in_flight, what="four requests in flight upstream")
    return streams, plain


def _refused(url: str) -> bool:
    """A new connection is not served: refused, or (accepted into the listening socket's backlog
    just before uvicorn closed it) reset before any response."""
    try:
        httpx.get(f"{url}/health", timeout=5)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        return True
    return False


@pytest.mark.slow
def test_sigterm_lets_the_requests_in_flight_finish_within_the_grace(
    slow_worker: ServeProcess,
) -> None:
    # 4 requests of 2 s each, one after the other upstream: 8 s, past uvicorn's 5 s.
    gw = GatewayProcess(["--upstream", slow_worker.url, "--shutdown-grace", "30"])
    try:
        with ThreadPoolExecutor(4) as pool:
            streams, plain = _send_four(pool, gw, slow_worker, max_tokens=200)
            os.kill(gw.proc.pid, signal.SIGTERM)
            wait_until(lambda: _refused(gw.url), what="new connections refused")
            assert not all(f.done() for f in [*streams, *plain])  # refused while draining
            finished = [f.result(timeout=CLIENT_TIMEOUT_S) for f in streams]
            answered = [f.result(timeout=CLIENT_TIMEOUT_S) for f in plain]
        gw.proc.wait(timeout=30)
    finally:
        gw.stop()
    for status, stream in finished:
        events = _events(stream)
        assert status == 200 and events[-1] == b"data: [DONE]"
        last = json.loads(events[-2].removeprefix(b"data: "))
        assert last["choices"][0]["finish_reason"] == "length"
    for reply in answered:
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 200
    assert gw.proc.returncode in (0, -signal.SIGTERM)
    assert "Traceback" not in "".join(gw.output) and "ERROR" not in "".join(gw.output)


@pytest.mark.slow
def test_sigterm_past_a_short_grace_ends_the_rest_with_a_503(slow_worker: ServeProcess) -> None:
    gw = GatewayProcess(["--upstream", slow_worker.url, "--shutdown-grace", "0.5"])
    try:
        with ThreadPoolExecutor(4) as pool:
            streams, plain = _send_four(pool, gw, slow_worker, max_tokens=2000)  # 20 s each
            os.kill(gw.proc.pid, signal.SIGTERM)
            cut = [f.result(timeout=CLIENT_TIMEOUT_S) for f in streams]
            failed = [f.result(timeout=CLIENT_TIMEOUT_S) for f in plain]
        gw.proc.wait(timeout=30)
    finally:
        gw.stop()
    shutting = "the server is shutting down and the request did not finish within the 0.5 s"
    for status, stream in cut:
        events = _events(stream)
        assert status == 200 and events[-1] == b"data: [DONE]"
        error = json.loads(events[-2].removeprefix(b"data: "))["error"]
        assert error["code"] == 503 and error["message"].startswith(shutting)
    for reply in failed:
        assert reply.status_code == 503, reply.text
        assert reply.headers["content-type"] == "application/json"
        assert reply.json()["error"]["message"].startswith(shutting)
    assert "Traceback" not in "".join(gw.output) and "ERROR" not in "".join(gw.output)


def _learn(url: str, roles: list[str]) -> None:
    for role in roles:
        body = {
            "model": "any",
            "messages": [
                {"role": "system", "content": f"You are the {role} agent."},
                {"role": "user", "content": "go"},
            ],
            "max_tokens": 2,
        }
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).status_code == 200


def _saved_nodes(path: Path) -> int:
    try:
        return len(json.loads(path.read_bytes())["heads"]["heads"])
    except (OSError, ValueError):  # not there yet, or being replaced
        return 0


@pytest.mark.slow
def test_what_was_learned_survives_sigkill(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serve() as worker:
        args = ["--upstream", worker.url, "--model", "tiny-bytes", "--state-dir", str(state)]
        first = GatewayProcess([*args, "--save-interval", "0.2"])
        try:
            _learn(first.url, ["planner", "coder", "reviewer"])
            wait_until(lambda: _saved_nodes(state / "gateway.json") == 3, what="3 nodes saved")
        finally:
            first.kill()  # SIGKILL: no shutdown, no save at exit
        second = GatewayProcess(args)
        try:
            stats = httpx.get(f"{second.url}/v1/agentwarm/stats", timeout=10).json()
        finally:
            second.stop()
    assert stats["nodes"] == 3


def _start(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", "gateway", "--port", "0", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,  # a gateway that started serves until killed
    )


@pytest.fixture
def unwritable_dir(tmp_path: Path) -> Iterator[Path]:
    """An existing directory this process cannot write into: a read-only one, or for root
    (who writes into those) a sysfs directory."""
    if os.geteuid() != 0:
        path = tmp_path / "read-only"
        path.mkdir()
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    path = Path("/sys/kernel")
    if not path.is_dir() or _can_create_in(path):
        pytest.skip("no directory here that root cannot write into")
    yield path


def _can_create_in(path: Path) -> bool:
    probe = path / ".agentwarm-probe"
    try:
        probe.touch()
    except OSError:
        return False
    probe.unlink()
    return True


def test_a_state_dir_that_cannot_be_written_is_an_error_at_start(unwritable_dir: Path) -> None:
    args = ["--upstream", "http://127.0.0.1:1", "--model", "tiny-bytes"]
    done = _start(*args, "--state-dir", str(unwritable_dir))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: --state-dir {unwritable_dir}: cannot write into it (")
    assert lines[0].endswith("give a writable directory (--state-dir or AGENTWARM_STATE_DIR)")
