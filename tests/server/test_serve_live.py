"""``agentwarm serve`` as a process on loopback: disconnects abort, auth, limits, shutdown, CLI."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Awaitable, Iterator

import httpx
import pytest
import typer
from typer.testing import CliRunner

from agentwarm.engines.base import new_rid
from agentwarm.engines.sglang import SGLangEngine
from agentwarm.errors import EngineError
from tests.conftest_server import ServeProcess, serve
from tests.waiting import until

# 7,968 tokens (within the fake engine's 8,192-token context): ~4 s of prefill at 5e-4 s/token.
LONG = list(range(1, 250)) * 32


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with serve("--max-request-bytes", "200000", "--fake-seconds-per-token", "5e-4") as proc:
        yield proc


async def wait_for(server: ServeProcess, name: str, value: float) -> None:
    await until(lambda: server.metrics()[name] == value, what=f"{name} reaching {value}")


async def test_cancelled_client_request_is_aborted_on_the_server(server: ServeProcess) -> None:
    engine = SGLangEngine(server.url, tokenizer="byte")
    aborted = server.metrics()["sglang:num_aborted_requests_total"]
    for stream in (False, True):
        call: Awaitable[object]
        if stream:
            call = engine.generate_stream(LONG, max_tokens=4, rid=new_rid()).__anext__()
        else:
            call = engine.prefill(LONG, rid=new_rid())
        task = asyncio.ensure_future(call)
        await wait_for(server, "sglang:num_running_reqs", 1)
        task.cancel()  # what the runtime does to a prefetch that lost
        with pytest.raises(asyncio.CancelledError):
            await task
        aborted += 1
        await wait_for(server, "sglang:num_aborted_requests_total", aborted)
        await wait_for(server, "sglang:num_running_reqs", 0)
    await engine.aclose()


def raw_http(url: str, payload: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(payload)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_malformed_requests_over_the_wire_leave_the_server_serving(
    server: ServeProcess,
) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        as_json = {"content-type": "application/json"}
        bad_json = client.post("/generate", content=b'{"input_ids": [1,', headers=as_json)
        assert bad_json.status_code == 400 and "invalid JSON" in bad_json.json()["error"]["message"]
        huge = b'{"input_ids": [' + b"7," * 200_000 + b"7]}"
        assert client.post("/generate", content=huge, headers=as_json).status_code == 413
        wrong = client.post("/generate", json={"input_ids": [1], "sampling_params": []})
        assert wrong.status_code == 400 and "sampling_params" in wrong.json()["error"]["message"]
        unknown = client.post("/abort_request", json={"rid": new_rid()})
        assert unknown.status_code == 200
    garbage = raw_http(server.url, b"NOT-HTTP\r\n\r\n")
    assert garbage.startswith(b"HTTP/1.1 400")
    engine = SGLangEngine(server.url, tokenizer="byte")
    out = await engine.generate(engine.encode("still serving"), max_tokens=3)
    assert len(out.token_ids) == 3
    await engine.aclose()


async def test_api_key_from_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTWARM_API_KEY", "from-env")
    with serve() as env_keyed, serve("--api-key", "from-flag") as flag_keyed:
        for proc, key in ((env_keyed, "from-env"), (flag_keyed, "from-flag")):
            anonymous = SGLangEngine(proc.url, tokenizer="byte")
            with pytest.raises(EngineError, match="HTTP 401: missing or wrong API key"):
                await anonymous.prefill([1, 2, 3])
            assert await anonymous.health()  # probes stay open, as in SGLang
            await anonymous.aclose()
            engine = await SGLangEngine.from_url(proc.url, api_key=key)
            assert (await engine.prefill([1, 2, 3])).done
            assert engine.encode("a") == [97]
            await engine.aclose()


def test_sigterm_shuts_down_cleanly() -> None:
    proc = ServeProcess(["--engine", "fake"])
    assert httpx.get(f"{proc.url}/health", timeout=5).status_code == 200
    proc.stop()
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status says SIGTERM.
    assert proc.proc.returncode in (0, -signal.SIGTERM)
    assert "Traceback" not in "".join(proc.output)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{proc.url}/health", timeout=2)


def test_unusable_port_is_a_clean_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = ServeProcess.__new__(ServeProcess)
        with pytest.raises(RuntimeError, match=r"cannot listen on 127\.0\.0\.1"):
            ServeProcess.__init__(proc, ["--engine", "fake", "--port", str(port)], timeout_s=20)


def test_serve_command_registers_on_a_typer_app() -> None:
    from agentwarm.cli.serve import register

    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    result = CliRunner().invoke(app, ["serve", "--help"])
    assert result.exit_code == 0
    for flag in ("--model", "--host", "--port", "--api-key", "--max-request-bytes"):
        assert flag in result.output
    for flag in ("--chunk-size", "--max-cached-tokens", "--engine"):
        assert flag in result.output
    bad = CliRunner().invoke(app, ["serve", "--engine", "gpu", "--port", "0"])
    assert bad.exit_code != 0
    assert "use 'local' or 'fake'" in str(bad.exception)
