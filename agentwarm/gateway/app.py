"""The ASGI app of ``agentwarm gateway``: OpenAI's chat endpoint in front of upstream workers,
with :class:`~agentwarm.gateway.types.Hooks` called around every live request.

Endpoints:

* ``POST /v1/chat/completions`` — the body (a JSON object with a ``messages`` list, else 400)
  goes to the worker the session is routed to unchanged, and the worker's answer comes back
  unchanged: its status and JSON body, or its event stream relayed as it arrives, with the
  headers a client reads (``retry-after``, ``x-request-id``, rate limits)
  (:mod:`~agentwarm.gateway.routes`). The session is the ``X-Agentwarm-Session`` header, else the
  body's ``user``, else ``metadata.session_id`` (else the hooks infer one); the node is the
  ``X-Agentwarm-Node`` header. A worker that cannot be reached → **502** naming it, one that
  does not answer in time → **504**, its own 503 → 503; a stream cut mid-way ends with a
  ``data: {"error": ...}`` event and ``data: [DONE]``. A worker that stops answering (no byte,
  no answer to ``GET /health`` for ``--unresponsive-after`` s: :mod:`~agentwarm.gateway.
  liveness`) fails its requests in flight with **504** (a stream: the error event and
  ``[DONE]``) and its new ones with **503** and ``Retry-After`` (or they go to another worker)
  until it answers again. A client that goes away aborts the request upstream. A warm request
  (``max_tokens: 0``) is checked as ``agentwarm serve`` checks one (its 400s) and prefilled by
  the hooks (:mod:`~agentwarm.gateway.warm`).
* ``GET /v1/models`` — the first worker's answer that has one; when the reachable workers have
  no ``/v1/models``, a list of ``model_name`` (404 without one); **502** when none is reachable.
* ``GET /health`` — 200 ``{"status": "ok", "upstreams": {url: reachable}}`` while the gateway
  runs (its workers being down is reported, not a failure: the gateway itself is up).
* ``GET /health/ready`` — with a warm-up plan (``--warmup``: every worker warmed, then kept
  warm, :class:`~agentwarm.warmup.keepwarm.KeepWarm`), 503 until the plan is warm on every
  worker (200 once their warm-ups ended, unless every worker failed before warming anything),
  then 200, both with the progress as JSON; without one, 200 ``{"ready": true}``.
* ``GET /metrics`` — Prometheus text (:mod:`~agentwarm.gateway.metrics`).
* ``GET /v1/agentwarm/stats`` — ``hooks.stats()`` with the app's ``requests``, ``ttft_p50_s``,
  ``ttft_p95_s``, ``overhead_p50_s`` and ``overhead_p95_s`` (the app's figures win).

Rules: the hooks never delay or fail a live request (their errors are logged; ``on_response``
runs as a background task, awaited for up to ``shutdown_grace_s`` at shutdown, then cancelled).
Shutdown drains (:class:`~agentwarm.server.drain.Drain`): new connections are refused,
``/health/ready`` answers 503, requests in flight get ``shutdown_grace_s`` to finish, then the
rest end with a 503 (a JSON error, or an SSE error event and ``[DONE]``).
Security is ``agentwarm serve``'s (:mod:`agentwarm.server.security`): with ``api_key`` every
path but ``/health`` and ``/metrics`` needs ``Authorization: Bearer <key>`` (401), without one
the Host/Origin checks apply (421/403); bodies over ``max_request_bytes`` get 413, non-JSON ones
415, an ``X-Agentwarm-Session``/``X-Agentwarm-Node``/``X-SMG-Routing-Key`` header over 4 KiB (or
headers over 16 KiB) 431; every error is ``{"error": {"message", "type", "code"}}``. At shutdown
the hooks are closed, then the upstream connections.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentwarm.engines.sglang.protocol import ROUTING_KEY_HEADER
from agentwarm.errors import EngineUnavailable
from agentwarm.gateway.metrics import GatewayMetrics
from agentwarm.gateway.routes import Background, ChatProxy
from agentwarm.gateway.types import NODE_HEADER, SESSION_HEADER, Hooks
from agentwarm.gateway.upstream import Upstream
from agentwarm.server.drain import Drain
from agentwarm.server.http import HTTPError, error_reply, error_response, http_exception, unexpected
from agentwarm.server.security import (
    MAX_DEFAULT_REQUEST_BYTES,
    APIKeyGuard,
    HeaderLimit,
    HostGuard,
)
from agentwarm.warmup.keepwarm import KeepWarm
from agentwarm.warmup.options import WarmupSettings, ready_answer

__all__ = ("SHUTDOWN_GRACE_S", "GatewayConfig", "create_gateway_app")

log = logging.getLogger(__name__)

#: The headers that name a session, a node or a routing key: each at most
#: :data:`~agentwarm.server.security.MAX_ID_HEADER_BYTES` bytes, else 431.
ID_HEADERS = (SESSION_HEADER, NODE_HEADER, ROUTING_KEY_HEADER)
#: How long requests in flight may go on at shutdown, by default (below the 30 s that
#: orchestrators usually wait before SIGKILL, so the errors and the state save get out).
SHUTDOWN_GRACE_S = 25.0


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Settings of one gateway. ``host`` is the bound host the Host check accepts besides the
    loopback names (``port`` is only reported); ``model_name`` answers ``/v1/models`` when the
    workers have none; ``shutdown_grace_s`` is how long requests in flight may go on at
    shutdown (then the ``hooks.on_response`` tasks get as long)."""

    api_key: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    max_request_bytes: int = MAX_DEFAULT_REQUEST_BYTES
    model_name: str | None = None
    shutdown_grace_s: float = SHUTDOWN_GRACE_S


def create_gateway_app(
    upstream: Upstream,
    hooks: Hooks,
    config: GatewayConfig | None = None,
    *,
    warmup: WarmupSettings | None = None,
) -> Starlette:
    """The Starlette app (see the module docstring); its lifespan starts the warm-up of every
    worker (with ``warmup``) and closes ``hooks`` and ``upstream`` at shutdown.
    ``app.state.gateway`` is the :class:`Gateway` (its ``aclose`` is what the lifespan runs)."""
    gateway = Gateway(upstream, hooks, config or GatewayConfig(), warmup=warmup)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if gateway.keep_warm is not None:
            gateway.keep_warm.start()
        try:
            yield
        finally:
            await gateway.aclose()

    app = Starlette(
        routes=[*gateway.chat.routes(), *gateway.routes()],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_exception, Exception: unexpected},
    )
    app.state.gateway = gateway
    if gateway.config.api_key:
        app.add_middleware(APIKeyGuard, api_key=gateway.config.api_key, error=error_response)
    else:
        app.add_middleware(HostGuard, bound_host=gateway.config.host, error=error_response)
    app.add_middleware(HeaderLimit, headers=ID_HEADERS, error=error_response)
    return app


class Gateway:
    """What the routes of one app share: the upstream, the hooks, the metrics, the background
    tasks and the warm-up (each owned here, closed by :meth:`aclose`)."""

    def __init__(
        self,
        upstream: Upstream,
        hooks: Hooks,
        config: GatewayConfig,
        *,
        warmup: WarmupSettings | None = None,
    ) -> None:
        self.upstream = upstream
        self.hooks = hooks
        self.config = config
        self.background = Background()
        self.metrics = GatewayMetrics(self.hook_stats)
        #: Begun by the server as it stops accepting (:func:`~agentwarm.server.run.serve_app`).
        self.drain = Drain(config.shutdown_grace_s)
        self.chat = ChatProxy(
            upstream, hooks, self.metrics, self.background, config.max_request_bytes, self.drain
        )
        #: Warms every worker through its prefill client (``--warmup``).
        self.keep_warm: KeepWarm | None = None
        if warmup is not None:
            warmers = {url: warmup.warmer(upstream.engine(url), url) for url in upstream.urls}
            self.keep_warm = warmup.keeper(warmers)
        self.closed = False

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/health/ready", self.ready, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
            Route("/v1/agentwarm/stats", self.stats, methods=["GET"]),
        ]

    def hook_stats(self) -> dict[str, Any]:
        """``hooks.stats()``, or ``{}`` when it fails (logged)."""
        try:
            return dict(self.hooks.stats())
        except Exception:
            log.exception("hooks.stats failed")
            return {}

    async def models(self, request: Request) -> Response:
        try:
            answer = await self.upstream.models()
        except EngineUnavailable as exc:
            return error_reply(HTTPError(502, str(exc), "BadGatewayError"))
        if answer is not None:
            return JSONResponse(answer)
        name = self.config.model_name
        if name is None:
            message = "no upstream serves /v1/models (start the gateway with --model NAME)"
            return error_reply(HTTPError(404, message, "NotFoundError"))
        model = {"id": name, "object": "model", "created": 0, "owned_by": "agentwarm"}
        return JSONResponse({"object": "list", "data": [model]})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "upstreams": await self.upstream.health()})

    async def ready(self, request: Request) -> Response:
        status, body = ready_answer(self.keep_warm, closing=self.closed or self.drain.started)
        return JSONResponse(body, status_code=status)

    async def prometheus(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=self.metrics.content_type)

    async def stats(self, request: Request) -> Response:
        return JSONResponse({**self.hook_stats(), **self.metrics.summary()})

    async def aclose(self) -> None:
        """Let the ``on_response`` tasks finish (for up to ``shutdown_grace_s``), close the hooks,
        then the upstream; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.keep_warm is not None:
                await self.keep_warm.aclose()
            await self.background.aclose(self.config.shutdown_grace_s)
            try:
                await self.hooks.aclose()
            except Exception:
                log.exception("hooks.aclose failed")
        finally:
            await self.upstream.aclose()
