"""Fixtures of the tests against a real vLLM server (the server: ``vllm_url`` in
``tests/conftest.py``, see :mod:`tests.vllm_server`). Every test here is marked ``vllm``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from agentwarm.engines.vllm import VLLMEngine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/vllm/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.vllm)
            item.add_marker(pytest.mark.slow)  # a real server: not the inner loop


@pytest.fixture
async def engine(vllm_url: str) -> AsyncIterator[VLLMEngine]:
    engine = await VLLMEngine.from_url(vllm_url, wait_s=10)
    try:
        yield engine
    finally:
        await engine.aclose()
