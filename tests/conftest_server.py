"""Helpers for tests that need live HTTP servers: ``agentwarm serve`` subprocesses, sglang-router.

Not a pytest conftest (pytest does not load it by name): test modules import what they use.
Every process is started on loopback with an OS-chosen port and killed by its pid at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from agentwarm.engines.sglang import parse_metrics
from tests.waiting import DEFAULT_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"listening on (http://\S+)")

# Fake engine costs for live tests: a 5,000-token prefill takes ~1 s, a 256-token chunk ~50 ms.
SECONDS_PER_TOKEN = 2e-4
SECONDS_PER_OUTPUT_TOKEN = 1e-3


class ServeProcess:
    """One ``python -m agentwarm.server`` subprocess (the ``agentwarm serve`` command)."""

    #: The command line before ``args``: loopback, an OS-chosen port.
    COMMAND: tuple[str, ...] = ("-m", "agentwarm.server", "--host", "127.0.0.1", "--port", "0")

    def __init__(self, args: Sequence[str], *, timeout_s: float = 60.0) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, *self.COMMAND, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        self.url = self._wait_ready(timeout_s)
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _wait_ready(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        found: list[str] = []

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                match = READY.search(line)
                if match:
                    found.append(match.group(1))
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not found:
            self.kill()
            raise RuntimeError(f"agentwarm serve did not start:\n{''.join(self.output)}")
        return found[0]

    def _read_rest(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def metrics(self) -> dict[str, float]:
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=10).text)

    def kill(self) -> None:
        """SIGKILL: the server dies mid-request, as a crashed worker would."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM and wait (graceful shutdown); SIGKILL after 10 s."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


class GatewayProcess(ServeProcess):
    """One ``python -m agentwarm gateway`` subprocess on loopback, an OS-chosen port."""

    COMMAND = ("-m", "agentwarm.cli", "gateway", "--port", "0")


@contextmanager
def serve(*args: str) -> Iterator[ServeProcess]:
    """``agentwarm serve --engine fake`` with the test costs, unless ``args`` say otherwise."""
    defaults = [
        "--engine",
        "fake",
        "--fake-seconds-per-token",
        str(SECONDS_PER_TOKEN),
        "--fake-seconds-per-output-token",
        str(SECONDS_PER_OUTPUT_TOKEN),
    ]
    server = ServeProcess([*defaults, *args])
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A scripted HTTP server on loopback (``handler`` in threads), its URL; shut down at the
    end."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(DEFAULT_TIMEOUT_S)


def router_binary() -> str | None:
    """Path of the sglang-router launcher, or None when ``pip install sglang-router`` is absent."""
    exe = shutil.which("sglang-router") or str(Path(sys.executable).with_name("sglang-router"))
    return exe if Path(exe).exists() else None


#: Skips a test (or, as ``pytestmark``, a module) where sglang-router is not installed.
needs_router = pytest.mark.skipif(
    router_binary() is None,
    reason="sglang-router is not installed here (pip install 'agentwarm[test]' or sglang-router)",
)


class RouterProcess:
    """sglang-router (the Rust gateway of PyPI ``sglang-router``) in front of ``workers``.

    ``policy`` is one of the CLI's (``cache_aware``, ``manual``, ``round_robin``, ...);
    ``consistent_hashing`` is only reachable through the Python ``RouterArgs``, which is used
    for it.
    """

    def __init__(self, workers: Sequence[str], policy: str, *, timeout_s: float = 60.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        metrics_port = free_port()
        if policy == "consistent_hashing":
            code = (
                "import sys\n"
                "from sglang_router.launch_router import launch_router\n"
                "from sglang_router.router_args import RouterArgs\n"
                "launch_router(RouterArgs(worker_urls=sys.argv[3:], policy='consistent_hashing',"
                " host='127.0.0.1', port=int(sys.argv[1]), prometheus_host='127.0.0.1',"
                " prometheus_port=int(sys.argv[2]), log_level='warn'))\n"
            )
            cmd = [sys.executable, "-c", code, str(self.port), str(metrics_port), *workers]
        else:
            binary = router_binary()
            assert binary is not None
            cmd = [
                binary,
                "launch",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--worker-urls",
                *workers,
                "--policy",
                policy,
                "--prometheus-host",
                "127.0.0.1",
                "--prometheus-port",
                str(metrics_port),
                "--log-level",
                "warn",
            ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self._wait_ready(len(workers), timeout_s)

    def _wait_ready(self, n_workers: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise RuntimeError(f"sglang-router exited with {self.proc.returncode}: {err}")
            try:
                workers = httpx.get(f"{self.url}/workers", timeout=2).json()["workers"]
                if sum(bool(w.get("is_healthy")) for w in workers) >= n_workers:
                    return
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"sglang-router did not register {n_workers} workers in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def requests_per_worker(workers: Sequence[ServeProcess]) -> list[int]:
    """``sglang:num_requests_total`` of each worker, in order."""
    return [int(w.metrics()["sglang:num_requests_total"]) for w in workers]
