"""The ASGI app of ``agentwarm serve``: any :class:`~agentwarm.engines.base.Engine` behind SGLang's
native HTTP API, so that :class:`~agentwarm.engines.sglang.SGLangEngine` and sglang-router can
use it as if it were an SGLang worker.

Endpoints (SGLang 0.5.x names; the ``/get_*`` spellings are the pre-0.5.5 aliases):

* ``POST /generate`` — ``input_ids`` or ``text``; ``sampling_params.max_new_tokens: 0`` is a
  prefill-only request (``Engine.prefill``, priority SPECULATIVE unless given), anything else a
  generation (priority LIVE unless given). ``stream: true`` answers SSE ``data: {json}`` events,
  each with the whole output so far (SGLang's default), then ``data: [DONE]``.
* ``POST /v1/chat/completions`` — OpenAI's chat endpoint: the messages and tools rendered with
  the engine's chat template, tool calls parsed for known model families, streamed or not,
  ``usage.prompt_tokens_details.cached_tokens``; ``max_tokens: 0`` warms the prompt
  (:mod:`~agentwarm.server.routes_chat`).
* ``POST /abort_request`` — ``{"rid"}`` of a request in flight or ``{"abort_all": true}``; 200
  also for an empty, unknown or finished rid (as SGLang). A client that disconnects also aborts
  its request.
* ``GET /health/ready`` — readiness: with a warm-up plan (``--warmup``), 503 until the plan is
  warm (and while the warm-up failed before warming anything), then 200, both with the progress
  as JSON (:func:`~agentwarm.warmup.options.ready_answer`); without one, 200
  ``{"ready": true}``.
  ``/health`` stays liveness.
* ``POST /flush_cache`` (POST only: it changes state), ``GET /health``, ``GET /health_generate``,
  ``GET /model_info``, ``GET /server_info`` (sglang-router probes these three at start-up),
  ``GET /v1/models``, ``GET /get_load``, ``GET /metrics`` (see :mod:`agentwarm.server.metrics`),
  ``POST /tokenize``, ``POST /detokenize``, ``GET /version``.

Rules: every error is a JSON ``{"error": {"message", "type", "code"}}`` with a 4xx status for a
bad request (malformed JSON, wrong types, missing prompt, body over ``max_request_bytes``: 413,
JSON body without ``Content-Type: application/json``: 415, wrong method: 405, missing API key:
401, headers too long: 431) and 5xx only for engine failures; a bad request never stops the
server. With ``api_key`` set, every path except ``/health*`` and ``/metrics`` needs
``Authorization: Bearer <key>`` (as SGLang's ``--api-key``); without one, the Host/Origin checks
of :mod:`agentwarm.server.security` apply (421/403). ``max_request_bytes=None`` derives the limit
from the engine's ``max_context`` (:func:`~agentwarm.server.security.default_max_request_bytes`).

Where each piece lives: this module assembles the app (routes, middleware, lifespan);
:mod:`~agentwarm.server.routes_generate` serves ``/generate`` (with
:mod:`~agentwarm.server.sse` for streams) and runs the jobs of
:mod:`~agentwarm.server.routes_chat`, :mod:`~agentwarm.server.routes_admin` every other
endpoint; :mod:`~agentwarm.server.state` holds the settings and the shared state, each with one
owner; :mod:`~agentwarm.server.http` words the errors and reads JSON bodies.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from agentwarm.engines.base import Engine
from agentwarm.engines.sglang.protocol import ROUTING_KEY_HEADER
from agentwarm.server.http import error_response, http_exception, unexpected
from agentwarm.server.routes_admin import AdminRoutes
from agentwarm.server.routes_chat import ChatRoutes
from agentwarm.server.routes_generate import GenerateRoutes
from agentwarm.server.security import APIKeyGuard, HeaderLimit, HostGuard
from agentwarm.server.state import ServerConfig, ServerState
from agentwarm.warmup.options import WarmupSettings

__all__ = ("ServerConfig", "create_app")


def create_app(
    engine: Engine,
    config: ServerConfig | None = None,
    *,
    close_engine: bool = True,
    warmup: WarmupSettings | None = None,
) -> Starlette:
    """The Starlette app serving ``engine``; closes the engine at shutdown if ``close_engine``.
    With ``warmup``, the plan is warmed once the app starts (``/health/ready``).
    ``app.state.server`` is the :class:`~agentwarm.server.state.ServerState`."""
    config = config or ServerConfig()
    state = ServerState(engine, config, warmup=warmup)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.start()
        try:
            yield
        finally:
            await state.close(close_engine=close_engine)

    generate = GenerateRoutes(state)
    app = Starlette(
        routes=[
            *generate.routes(),
            *ChatRoutes(state, generate).routes(),
            *AdminRoutes(state).routes(),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_exception, Exception: unexpected},
    )
    app.state.server = state
    if config.api_key:
        app.add_middleware(APIKeyGuard, api_key=config.api_key, error=error_response)
    else:
        app.add_middleware(HostGuard, bound_host=config.host, error=error_response)
    app.add_middleware(HeaderLimit, headers=(ROUTING_KEY_HEADER,), error=error_response)
    return app
