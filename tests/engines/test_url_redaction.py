"""Credentials in engine URLs never reach a message: SGLangEngine, MultiWorkerEngine, the CLI."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from agentwarm.engines.routing import MultiWorkerEngine
from agentwarm.engines.sglang import SGLangEngine, check_url
from agentwarm.errors import EngineUnavailable
from agentwarm.redact import redact_credentials
from tests.conftest_server import ROOT

SECRET = "hunter2"


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections (bound, not listening) for the test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://admin:hunter2@host:8000/x", "http://***@host:8000/x"),
        ("https://tok@host", "https://***@host"),
        ("http://a:p@ss@host/path?q=a@b", "http://***@host/path?q=a@b"),
        (
            "workers http://u:hunter2@a:1, https://v:hunter2@b:2/generate: down",
            "workers http://***@a:1, https://***@b:2/generate: down",
        ),
        ("http://host:8000/x?user=a@b", "http://host:8000/x?user=a@b"),
        ("http://admin:p#ss@127.0.0.1:1", "http://***@127.0.0.1:1"),  # raw "#" in a password
        ("http://admin:hunter2?x@host/y", "http://***@host/y"),
        ("mail me at admin@example.com", "mail me at admin@example.com"),
    ],
)
def test_redact_credentials(text: str, expected: str) -> None:
    assert redact_credentials(text) == expected


async def test_unreachable_url_with_credentials_is_redacted(closed_port: int) -> None:
    url = f"http://admin:{SECRET}@127.0.0.1:{closed_port}"
    with pytest.raises(EngineUnavailable) as err:
        await SGLangEngine.from_url(url)
    message = str(err.value)
    assert SECRET not in message and "admin" not in message
    assert message.startswith(f"http://***@127.0.0.1:{closed_port}/health: ")

    engine = SGLangEngine(url, tokenizer="byte")
    assert engine.url == f"http://***@127.0.0.1:{closed_port}"
    assert SECRET not in repr(engine) and SECRET not in engine.model_name
    with pytest.raises(EngineUnavailable) as err:
        await engine.prefill([1, 2, 3])
    assert SECRET not in str(err.value) and "http://***@127.0.0.1" in str(err.value)
    await engine.aclose()

    with pytest.raises(ValueError) as bad:
        SGLangEngine(f"ftp://admin:{SECRET}@127.0.0.1:{closed_port}")
    assert SECRET not in str(bad.value) and "ftp://***@127.0.0.1" in str(bad.value)


async def test_multi_worker_names_and_errors_are_redacted(closed_port: int) -> None:
    urls = [f"http://admin:{SECRET}@127.0.0.1:{closed_port}", "http://127.0.0.1:1"]
    workers = MultiWorkerEngine(urls, tokenizer="byte")
    assert list(workers.workers) == [f"http://***@127.0.0.1:{closed_port}", "http://127.0.0.1:1"]
    await workers.aclose()
    with pytest.raises(EngineUnavailable) as err:
        await MultiWorkerEngine.from_urls(urls)
    assert SECRET not in str(err.value)


async def test_credentials_still_go_to_the_server_as_basic_auth() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx.Response(200, json={"model_path": "m"})

    engine = SGLangEngine(
        f"http://admin:{SECRET}@sglang.test:30000",
        tokenizer="byte",
        transport=httpx.MockTransport(handler),
    )
    await engine.model_info()
    await engine.aclose()
    assert seen == ["Basic " + base64.b64encode(f"admin:{SECRET}".encode()).decode()]


@pytest.mark.parametrize("n_urls", [1, 2])
def test_cli_run_against_unreachable_url_redacts_credentials(
    closed_port: int, tmp_path, n_urls: int
) -> None:
    urls = [f"http://admin:{SECRET}@127.0.0.1:{closed_port}"] * n_urls
    if n_urls == 2:
        urls[1] = f"http://other:{SECRET}9@127.0.0.1:{closed_port}/"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentwarm.cli",
            "run",
            "examples/support_bot.py",
            "--engine",
            ",".join(urls),
            "--state-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert SECRET not in proc.stdout + proc.stderr
    assert f"http://***@127.0.0.1:{closed_port}/health" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_invalid_engine_spec_redacts_credentials(tmp_path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentwarm.cli",
            "run",
            "examples/support_bot.py",
            "--engine",
            f"htp://admin:{SECRET}@127.0.0.1:9",
            "--state-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert SECRET not in proc.stdout + proc.stderr
    assert "--engine 'htp://***@127.0.0.1:9' is not valid" in proc.stderr


@pytest.mark.parametrize(
    ("url", "password", "problem"),
    [
        (f"http://admin:{SECRET}@127.0.0.1:99999", SECRET, "port 99999 is outside 1-65535"),
        ("http://admin:p#ss@127.0.0.1:1", "p#ss", "it cannot be parsed"),
        (f"http://admin:{SECRET}@[::1", SECRET, "it cannot be parsed"),
        (f"http://admin:{SECRET}#x@127.0.0.1:1", SECRET, "it cannot be parsed"),
        (f"http://admin:{SECRET}@127.0.0.1:0", SECRET, "port 0 is outside 1-65535"),
        (f"http://admin:{SECRET}@:8000", SECRET, "it has no host"),
        (f"http://127.0.0.1:1,http://admin:{SECRET}@127.0.0.1:70000", SECRET, "port 70000"),
    ],
)
def test_cli_malformed_engine_url_is_one_redacted_error_line(
    tmp_path, url: str, password: str, problem: str
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentwarm.cli",
            "run",
            "examples/support_bot.py",
            "--engine",
            url,
            "--state-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    output = proc.stdout + proc.stderr
    assert password not in output and "Traceback" not in output
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: --engine: engine URL 'http://")
    assert f"is not valid: {problem}" in lines[0]
    assert "***@" in lines[0]
    assert "percent-encoded (e.g. %23 for '#')" in lines[0]


def test_check_url_accepts_what_names_a_server_and_refuses_the_rest() -> None:
    assert check_url("http://127.0.0.1:30000/") == "http://127.0.0.1:30000"
    assert check_url("https://u:p%23ss@[::1]:443/prefix") == "https://u:p%23ss@[::1]:443/prefix"
    assert check_url("http://sglang.internal") == "http://sglang.internal"
    for bad, problem in [
        ("ftp://h:1", "the scheme must be http or https"),
        ("http://h:1/x?y=1", "it has a query or fragment"),
        ("http://h:65536", "port 65536 is outside 1-65535"),
        ("http://", "it has no host"),
    ]:
        with pytest.raises(ValueError, match=problem):
            check_url(bad)
    with pytest.raises(ValueError) as err:
        SGLangEngine(f"http://admin:{SECRET}@127.0.0.1:99999", tokenizer="byte")
    assert SECRET not in str(err.value) and "http://***@127.0.0.1:99999" in str(err.value)
