"""Session fixtures shared across test packages: only the one real vLLM server (issue 24), so
that the conformance suite (``tests/engines``) and ``tests/vllm`` share one process."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.vllm_server import URL_ENV, VLLMServer, missing


@pytest.fixture(scope="session")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of the session's one vLLM server (``AGENTWARM_VLLM_URL``, else started here
    from ``scripts/setup_vllm.sh``'s venv and model; skipped, naming that command, without)."""
    if url := os.environ.get(URL_ENV):
        yield url.rstrip("/")
        return
    if (why := missing()) is not None:
        pytest.skip(why)
    server = VLLMServer(tmp_path_factory.mktemp("vllm") / "server.log")
    print(f"\nvLLM server {server.url} healthy in {server.startup_s:.1f} s")
    try:
        yield server.url
    finally:
        server.stop()
