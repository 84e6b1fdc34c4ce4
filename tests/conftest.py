"""Session fixtures shared across test packages: only the one real vLLM server (issue 24), so
that the conformance suite (``tests/engines``) and ``tests/vllm`` share one process.

The server is started as soon as collection shows that a selected test needs it, so that its
~1 min start-up overlaps the tests that run before the first one that does. Under pytest-xdist
(the README's test command: ``-n 2 --dist loadgroup``) the tests are grouped by file, as
``--dist loadfile`` would, so a module's fixtures start once, and every test that needs the vLLM
server is in the one group ``vllm``, so one worker runs them all against one server; that worker
starts it at the first such test while the other goes on with the rest."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vllm_server import URL_ENV, VLLMServer, missing

_SERVER = pytest.StashKey[VLLMServer]()


def _needs_vllm(item: pytest.Item) -> bool:
    """Whether ``item`` uses the server: by its fixtures, or by a ``vllm`` mark (the conformance
    suite's vLLM case asks for ``vllm_url`` only when it runs)."""
    marked = item.get_closest_marker("vllm") is not None or "tests/vllm/" in item.nodeid
    return marked or "vllm_url" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (it renames the node ids)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = "vllm" if _needs_vllm(item) else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


def _start(config: pytest.Config) -> VLLMServer:
    """Starts the session's server (it returns before the server is healthy), its log in a
    temporary directory of its own."""
    log = Path(tempfile.mkdtemp(prefix="agentwarm-vllm-")) / "server.log"
    server = config.stash[_SERVER] = VLLMServer(log)
    return server


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get(URL_ENV) or missing() is not None:
        return
    if session.config.option.collectonly or not any(map(_needs_vllm, session.items)):
        return
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker starts it at its first test that needs it (see above)
    _start(session.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if (server := session.config.stash.get(_SERVER, None)) is not None:
        server.stop()


@pytest.fixture(scope="session")
def vllm_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of the session's one vLLM server (``AGENTWARM_VLLM_URL``, else the one started
    at collection, or under xdist here, from ``scripts/setup_vllm.sh``'s venv and model;
    skipped, naming that command, without)."""
    if url := os.environ.get(URL_ENV):
        yield url.rstrip("/")
        return
    if (why := missing()) is not None:
        pytest.skip(why)
    server = request.config.stash.get(_SERVER, None) or _start(request.config)
    server.wait_healthy()
    print(f"\nvLLM server {server.url} healthy {server.startup_s:.1f} s after it was started")
    yield server.url
