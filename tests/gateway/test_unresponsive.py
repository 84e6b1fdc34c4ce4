"""A worker that stops answering (issue 23 item 8), through real processes: ``agentwarm
gateway`` in front of ``agentwarm serve --engine fake``, which the test freezes with SIGSTOP.

With small thresholds on the command line (``--health-interval``, ``--unresponsive-after``), the
streams in flight end with an error event naming the worker and ``[DONE]``, a new request gets a
503 at once, and the worker serves again once it answers (SIGCONT); a worker that answers
``GET /health`` but takes longer than the thresholds to send its reply is never cut. With several
workers, only the sessions of the unresponsive one move, and they come back once it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from agentwarm.gateway.liveness import Liveness
from agentwarm.gateway.upstream import Upstream
from tests.conftest_server import GatewayProcess, serve
from tests.waiting import until, wait_until

WAIT_S = 20.0

#: Small thresholds: a worker that answers nothing for 1.5 s is unresponsive (probed every 0.2 s).
THRESHOLDS = ("--health-interval", "0.2", "--unresponsive-after", "1.5")
#: For the frozen worker: 4 s, so that a busy CI machine stalling the worker's first bytes
#: and its probe for 1.5 s does not cut the stream before the test freezes the worker.
FROZEN_THRESHOLDS = ("--health-interval", "0.2", "--unresponsive-after", "4")
#: Far below the default --upstream-timeout (600 s): a client that waits this long hung.
CLIENT_TIMEOUT_S = 15.0


def _body(text: str, *, stream: bool, max_tokens: int = 4000) -> dict[str, object]:
    return {
        "model": "any",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def _stream(url: str, text: str, started: list[str]) -> bytes:
    """The whole stream of one request; ``text`` goes into ``started`` at its first bytes."""
    with (
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as http,
        http.stream("POST", f"{url}/v1/chat/completions", json=_body(text, stream=True)) as reply,
    ):
        assert reply.status_code == 200
        chunks = reply.iter_bytes()
        received = next(chunks)
        started.append(text)
        return received + b"".join(chunks)


def with_log(call: Callable[[], object], gw: GatewayProcess) -> None:
    """``call()``; an exception it raises is raised again with the gateway's log."""
    try:
        call()
    except Exception as exc:
        raise AssertionError(f"{exc!r}; gateway log:\n{''.join(gw.output)}") from exc


def _post(url: str, text: str, max_tokens: int = 8) -> httpx.Response:
    body = _body(text, stream=False, max_tokens=max_tokens)
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S)


@pytest.mark.slow
def test_a_frozen_worker_fails_its_requests_and_new_ones_until_it_answers_again() -> None:
    # 0.01 s per output token: the stream would run for 40 s, and the fake engine serves one
    # request at a time, so the two plain requests wait behind it, in flight.
    with serve("--fake-seconds-per-output-token", "0.01") as worker:
        gw = GatewayProcess(["--upstream", worker.url, *FROZEN_THRESHOLDS])
        try:
            started: list[str] = []
            with ThreadPoolExecutor(3) as pool:
                stream = pool.submit(_stream, gw.url, "a stream", started)
                wait_until(lambda: started or stream.done(), what="the stream under way")
                if not started:  # it failed before its first bytes: say how, with the log
                    with_log(stream.result, gw)
                plain = [pool.submit(_post, gw.url, f"waiting {i}") for i in range(2)]

                def in_flight() -> bool:
                    return worker.metrics()["sglang:num_running_reqs"] == 3

                wait_until(in_flight, what="three requests in flight upstream")
                os.kill(worker.proc.pid, signal.SIGSTOP)
                try:
                    received = stream.result(timeout=2 * CLIENT_TIMEOUT_S)
                    failed = [p.result(timeout=2 * CLIENT_TIMEOUT_S) for p in plain]
                    refused = _post(gw.url, "a new request")
                finally:
                    os.kill(worker.proc.pid, signal.SIGCONT)

            def served() -> bool:
                return _post(gw.url, "after SIGCONT").status_code == 200

            wait_until(served, what="a request served once the worker answers again")
        finally:
            gw.stop()
    stopped = f"upstream {worker.url} stopped answering (no reply and no answer to GET /health"
    events = [e for e in received.split(b"\n\n") if e.strip()]
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["code"] == 504 and error["type"] == "GatewayTimeout"
    assert error["message"].startswith(stopped)
    assert all(e.startswith(b"data: {") for e in events[:-1])
    for reply in failed:
        assert reply.status_code == 504, reply.text
        assert reply.json()["error"]["message"].startswith(stopped)
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["type"] == "ServiceUnavailableError"
    assert error["message"].startswith(f"upstream {worker.url} is not answering")
    assert refused.headers["retry-after"] == "1"
    log = "".join(gw.output)
    assert "Traceback" not in log
    assert log.count(f"upstream {worker.url} stopped answering") == 1  # one line, not one each
    assert f"upstream {worker.url} answers again" in log


@pytest.mark.slow
def test_a_slow_worker_that_answers_its_health_probes_is_not_cut() -> None:
    # 0.01 s per output token: 300 tokens take 3 s before the reply's first byte, twice the
    # --unresponsive-after threshold, while GET /health answers at once.
    with serve("--fake-seconds-per-output-token", "0.01") as worker:
        gw = GatewayProcess(["--upstream", worker.url, *THRESHOLDS])
        try:
            reply = _post(gw.url, "a long answer", max_tokens=300)
        finally:
            gw.stop()
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 300


async def test_sessions_of_an_unresponsive_worker_move_and_come_back_the_others_stay() -> None:
    urls = [f"http://127.0.0.1:{port}" for port in (1, 2, 3)]
    upstream = Upstream(urls)
    answering = asyncio.Event()

    async def probe(worker: str, timeout_s: float) -> bool:
        if worker != urls[0]:
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await answering.wait()
        return answering.is_set()

    upstream.liveness = Liveness(probe, interval_s=0.01, after_s=0.1)
    sessions = [f"session-{i}" for i in range(60)]
    before = {s: upstream.worker_for(s, "rid") for s in sessions}
    try:
        watch = upstream.liveness.watch(urls[0])
        await asyncio.wait_for(watch.stopped, timeout=WAIT_S)
        assert upstream.liveness.down == {urls[0]}
        during = {s: upstream.worker_for(s, "rid") for s in sessions}
        moved = {s for s in sessions if during[s] != before[s]}
        assert moved == {s for s in sessions if before[s] == urls[0]} != set()
        assert all(during[s] != urls[0] for s in sessions)
        refusal = upstream.liveness.refusal(urls[0])
        assert refusal is not None and refusal.status == 503
        watch.close()
        answering.set()
        await until(lambda: not upstream.liveness.down, what="the worker answering again")
        assert {s: upstream.worker_for(s, "rid") for s in sessions} == before
        assert upstream.liveness.refusal(urls[0]) is None
    finally:
        await upstream.aclose()


async def test_a_busy_gateway_loop_is_not_the_silence_of_its_worker() -> None:
    probes = 0

    async def answers(worker: str, timeout_s: float) -> bool:
        nonlocal probes
        probes += 1
        return True

    liveness = Liveness(answers, interval_s=0.05, after_s=0.2)
    watch = liveness.watch("http://127.0.0.1:1")
    try:
        await until(lambda: probes >= 2, what="a few probes answered")
        time.sleep(0.5)  # the loop itself is stuck for longer than after_s (the case under test)
        stalled = probes
        await until(lambda: probes >= stalled + 2, what="probes answered after the stall")
        assert not watch.stopped.done() and not liveness.down
    finally:
        watch.close()
        await liveness.aclose()
