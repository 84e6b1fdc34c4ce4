"""A real vLLM server for the tests marked ``vllm`` (issue 24): one process per test session.

``AGENTWARM_VLLM_URL`` names a running server to use instead. Otherwise the server is started
from what ``bash scripts/setup_vllm.sh`` builds (``.vllm/venv``, ``.vllm/smollm2``), on loopback,
with the flags agentwarm needs (prefix caching, cached-token counts, priority scheduling) and
vLLM's defaults for everything that splits long prefills (the chunking is agentwarm's).
``--enforce-eager`` starts it in ~45 s instead of 2-3 min (prefill ~13% slower);
``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV) keeps it small. Without either, the tests skip with a
reason that names the setup command. The process group is ended by its id at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from tests.conftest_server import ROOT, free_port

__all__ = ("SETUP", "URL_ENV", "VLLMServer", "missing")

URL_ENV = "AGENTWARM_VLLM_URL"
SETUP = "bash scripts/setup_vllm.sh"
VLLM_DIR = ROOT / os.environ.get("AGENTWARM_VLLM_DIR", ".vllm")
PYTHON = VLLM_DIR / "venv" / "bin" / "python"
MODEL = VLLM_DIR / "smollm2"
START_TIMEOUT_S = 600.0


def missing() -> str | None:
    """Why no vLLM server can be started here, or ``None``."""
    if not PYTHON.exists():
        return f"no vLLM venv at {PYTHON.parent.parent}: run `{SETUP}` (or set {URL_ENV})"
    if not (MODEL / ".complete").exists():
        return f"no converted model at {MODEL}: run `{SETUP}` (or set {URL_ENV})"
    return None


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1, in a process group of its
    own (vLLM forks an engine core); its output goes to ``log``. Construction starts it and
    returns at once, so that its ~1 min start-up overlaps other tests; :meth:`wait_healthy`
    waits for it. ``args`` are added to the command (a test's own server: a KV connector, a
    small cache), ``env`` to its environment."""

    def __init__(
        self, log: Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [
            str(PYTHON),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(MODEL),
            "--enforce-eager",
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--scheduling-policy",
            "priority",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *args,
        ]
        environ = {**os.environ, **(env or {})}
        environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=environ,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started = time.monotonic()
        self.startup_s: float | None = None

    def wait_healthy(self) -> None:
        """Returns once ``/health`` answers 200 (at once after the first time); stops the
        server and raises if it exits or is not healthy within ``START_TIMEOUT_S``."""
        if self.startup_s is not None:
            return
        try:
            self._wait_healthy(self.started + START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - self.started

    def _wait_healthy(self, deadline: float) -> None:
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM not healthy in {START_TIMEOUT_S:.0f} s:\n{self.tail()}")
            time.sleep(0.5)

    def tail(self, lines: int = 40) -> str:
        return "".join(self.log.read_text(errors="replace").splitlines(True)[-lines:])

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 30 s."""
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
