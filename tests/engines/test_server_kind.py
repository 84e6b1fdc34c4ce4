"""A plain ``--engine http://HOST:PORT`` is told apart by what the server answers
(:func:`agentwarm.engines.registry.server_kind`, issue 24): SGLang / ``agentwarm serve`` have
``/model_info``, vLLM has not but answers ``/version``; a server that is neither is an error
naming both. Real loopback servers: ``agentwarm serve``, and scripted ones for the other cases
(the real vLLM server's case is in ``tests/vllm/test_engine.py``)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest

from agentwarm.engines.registry import open_engine, server_kind
from agentwarm.engines.sglang import SGLangEngine
from agentwarm.errors import ConfigError
from tests.conftest_server import free_port, http_server, serve


def answering(routes: dict[str, object]) -> type[BaseHTTPRequestHandler]:
    """A handler that answers ``routes[path]`` as JSON, else 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = routes.get(self.path)
            data = json.dumps(body if body is not None else {"detail": "Not Found"}).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


async def test_agentwarm_serve_is_an_sglang_server() -> None:
    with serve("--engine", "fake") as worker:
        assert await server_kind(worker.url) == "sglang"
        engine = await open_engine(worker.url, "tiny")
        try:
            assert isinstance(engine, SGLangEngine)
            # What the server's engine does, read from its /model_info (an SGLang server
            # says neither: both stay False there).
            assert engine.supports_promotion is True
            assert engine.preempts_speculation is True
        finally:
            await engine.aclose()


async def test_get_model_info_alone_is_sglang_as_sglang_router_answers() -> None:
    with http_server(answering({"/get_model_info": {"model_path": "m"}})) as url:
        assert await server_kind(url) == "sglang"


async def test_no_model_info_but_a_version_is_vllm() -> None:
    with http_server(answering({"/version": {"version": "0.32.0"}})) as url:
        assert await server_kind(url) == "vllm"


async def test_a_server_that_is_neither_is_an_error_naming_both() -> None:
    with http_server(answering({})) as url:
        with pytest.raises(ConfigError, match=r"neither SGLang / agentwarm serve .* nor vLLM"):
            await server_kind(url)
        with pytest.raises(ConfigError, match="vllm:URL"):
            await open_engine(url, "tiny")


async def test_an_unreachable_server_is_left_to_the_engine_to_report() -> None:
    assert await server_kind(f"http://127.0.0.1:{free_port()}", timeout_s=5) is None
