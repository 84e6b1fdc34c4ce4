"""Issue 23, item 12: a warm-up plan from anywhere cannot stall or crash a warm-up.

Through the CLI and real ``agentwarm serve --engine fake`` processes:

* a plan line a real request would be refused for (900-deep nesting, ``role: "wizard"``,
  ``function: "notadict"``) is skipped with one warning naming its line and why, and the rest
  is warmed: ``agentwarm warmup run`` exits 0 and ``serve --warmup`` becomes ready (the good
  line counted), keep-warm rounds included, with no traceback anywhere;
* a plan path that is not a regular file (a FIFO, a directory) is refused at once, before
  anything reads it (a FIFO used to hang every command);
* ``warmup run`` against a worker that stopped answering (SIGSTOP) fails within ``--timeout``
  with an error naming the worker and the timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest_server import ROOT, ServeProcess
from tests.waiting import wait_until

GOOD = {
    "messages": [
        {"role": "system", "content": "You route support tickets."},
        {"role": "user", "content": "My parcel is late."},
    ],
    "share": 0.5,
    "tokens": 20,
    "count": 4,
}


def deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def bad_lines() -> list[dict[str, Any]]:
    """Plan lines a real chat request like them would be refused for (lines 2, 3, 4)."""
    nested = {**GOOD, "messages": [{"role": "user", "content": "hi", "extra": deep(900)}]}
    wizard = {**GOOD, "messages": [{"role": "wizard", "content": "abracadabra"}]}
    tool = {**GOOD, "tools": [{"type": "function", "function": "notadict"}]}
    return [nested, wizard, tool]


def write_plan(path: Path) -> Path:
    lines = [GOOD, *bad_lines()]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def agentwarm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", *args],
        cwd=ROOT,
        env={**os.environ, "AGENTWARM_NO_PROGRESS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def warnings_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning:")]


def assert_three_skipped(text: str) -> None:
    found = [w for w in warnings_of(text) if "skipped" in w]
    assert len(found) == 3, text
    line2, line3, line4 = found
    assert "line 2" in line2 and "nested too deeply" in line2, line2
    assert "line 3" in line3 and "role must be one of" in line3, line3
    assert "line 4" in line4 and "tools" in line4, line4


@pytest.fixture(scope="module")
def worker() -> Iterator[ServeProcess]:
    process = ServeProcess(["--engine", "fake", "--model", "tiny"])
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.slow
def test_warmup_run_skips_bad_lines_with_one_warning_each_and_warms_the_rest(
    worker: ServeProcess, tmp_path: Path
) -> None:
    plan = write_plan(tmp_path / "plan.jsonl")
    done = agentwarm(
        "warmup", "run", str(plan), "--engine", worker.url, "--model", "tiny", "--json"
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert_three_skipped(done.stderr)
    report = json.loads(done.stdout)
    assert report["prefixes"] == 1
    (summary,) = report["workers"]
    assert (summary["prefixes"], summary["skipped"], summary["error"]) == (1, 0, None)


class CliServe(ServeProcess):
    """``agentwarm serve`` as the command line runs it (its warnings one line each)."""

    COMMAND = ("-m", "agentwarm.cli", "serve", "--host", "127.0.0.1", "--port", "0")


@pytest.mark.slow
def test_serve_warmup_becomes_ready_and_keeps_warm_despite_bad_lines(tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.jsonl")
    server = CliServe(
        ["--engine", "fake", "--model", "tiny", "--warmup", str(plan), "--keep-warm", "0.2"]
    )
    try:

        def rounds() -> int:
            answer = httpx.get(f"{server.url}/health/ready", timeout=10)
            body = answer.json()
            return int(body["keep_warm"]["rounds"]) if answer.status_code == 200 else -1

        wait_until(lambda: rounds() >= 3, what="three keep-warm rounds after ready")
        answer = httpx.get(f"{server.url}/health/ready", timeout=10)
        assert answer.status_code == 200
        body = answer.json()
        assert (body["ready"], body["total"], body["error"]) == (True, 1, None)
    finally:
        server.stop()
    output = "".join(server.output)
    assert "Traceback" not in output
    assert_three_skipped(output)  # once, at load: not again each round


@pytest.mark.parametrize("kind", ["fifo", "directory"])
@pytest.mark.slow
def test_a_plan_that_is_not_a_regular_file_is_refused_at_once(
    worker: ServeProcess, tmp_path: Path, kind: str
) -> None:
    plan = tmp_path / "plan.jsonl"
    if kind == "fifo":
        os.mkfifo(plan)  # opening it for reading would wait for a writer forever
    else:
        plan.mkdir()
    commands = [
        ("warmup", "run", str(plan), "--engine", worker.url),
        ("serve", "--engine", "fake", "--port", "0", "--warmup", str(plan)),
        ("gateway", "--upstream", worker.url, "--port", "0", "--warmup", str(plan)),
    ]
    for command in commands:
        done = agentwarm(*command, timeout=60)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert f"warm-up plan {plan}: is not a regular file" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_warmup_run_against_a_stopped_worker_fails_within_the_timeout(tmp_path: Path) -> None:
    plan = tmp_path / "plan.jsonl"
    plan.write_text(json.dumps(GOOD) + "\n")
    stopped = ServeProcess(["--engine", "fake", "--model", "tiny"])
    os.kill(stopped.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        done = agentwarm(
            "warmup",
            "run",
            str(plan),
            "--engine",
            stopped.url,
            "--model",
            "tiny",
            "--timeout",
            "1",
            timeout=60,
        )
        took = time.monotonic() - started
    finally:
        os.kill(stopped.proc.pid, signal.SIGCONT)
        stopped.stop()
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert stopped.url in done.stderr
    assert "no answer within 1 s (--timeout)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert took < 30  # the default would have waited minutes


@pytest.mark.slow
def test_mining_refuses_a_fifo_and_requests_the_chat_endpoint_would_refuse(
    tmp_path: Path,
) -> None:
    """``warmup plan --from`` reads its files as the plan loader does: a FIFO is refused before
    it is opened, and a logged request with nesting, a role or a tool a chat request would be
    refused for is an error naming its line (not a traceback while mining)."""
    fifo = tmp_path / "requests.jsonl"
    os.mkfifo(fifo)
    done = agentwarm("warmup", "plan", "--from", str(fifo), "--model", "tiny", timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"--from {fifo}: is a FIFO" in done.stderr
    plan_keys = ("share", "tokens", "count")
    good = {k: v for k, v in GOOD.items() if k not in plan_keys}
    for number, line in enumerate(bad_lines(), start=2):
        log = tmp_path / f"log{number}.jsonl"
        request = {k: v for k, v in line.items() if k not in plan_keys}
        log.write_text(json.dumps(good) + "\n" + json.dumps(request) + "\n")
        done = agentwarm("warmup", "plan", "--from", str(log), "--model", "tiny", timeout=60)
        assert done.returncode == 2, done.stderr
        assert f"{log}:2: " in done.stderr and "Traceback" not in done.stderr, done.stderr
