"""Fixtures of the tests against a real vLLM server (see :mod:`tests.vllm_server`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from agentwarm.engines.vllm import VLLMEngine
from tests.vllm_server import URL_ENV, VLLMServer, missing


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/vllm/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of the session's one vLLM server (``AGENTWARM_VLLM_URL``, else started here)."""
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


@pytest.fixture
async def engine(vllm_url: str) -> AsyncIterator[VLLMEngine]:
    engine = await VLLMEngine.from_url(vllm_url, wait_s=10)
    try:
        yield engine
    finally:
        await engine.aclose()
