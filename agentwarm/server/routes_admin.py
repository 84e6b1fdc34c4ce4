"""Every endpoint of ``agentwarm serve`` but ``/generate``: aborting, the cache, health, model and
server information, load, ``/metrics``, tokenizing, the version.

These routes read the shared state (:class:`~agentwarm.server.state.ServerState`) and call the
engine; the only state they change is the engine's (abort, flush).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from agentwarm.engines.base import Priority
from agentwarm.engines.sglang.protocol import AbortRequest, DetokenizeRequest, TokenizeRequest
from agentwarm.errors import EngineError
from agentwarm.server.http import HTTPError, engine_error, error_reply, read_json, validate
from agentwarm.server.state import ServerState, package_version
from agentwarm.warmup.options import ready_answer

__all__ = ("AdminRoutes",)

log = logging.getLogger(__name__)


class AdminRoutes:
    """The endpoints other than ``/generate`` over ``state``."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.engine = state.engine

    def routes(self) -> list[Route]:
        """The ``/get_*`` spellings are SGLang's pre-0.5.5 aliases."""
        return [
            Route("/abort_request", self.abort_request, methods=["POST"]),
            Route("/flush_cache", self.flush_cache, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/health/ready", self.health_ready, methods=["GET"]),
            Route("/health_generate", self.health_generate, methods=["GET"]),
            Route("/model_info", self.model_info, methods=["GET"]),
            Route("/get_model_info", self.model_info, methods=["GET"]),
            Route("/server_info", self.server_info, methods=["GET"]),
            Route("/get_server_info", self.server_info, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/get_load", self.load, methods=["GET"]),
            Route("/metrics", self.render_metrics, methods=["GET"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/version", self.version, methods=["GET"]),
        ]

    async def _body(self, request: Request) -> Any:
        return await read_json(request, self.state.max_request_bytes)

    async def abort_request(self, request: Request) -> Response:
        try:
            req = validate(AbortRequest, await self._body(request))
        except HTTPError as exc:
            return error_reply(exc)
        if req.abort_all:
            for rid in self.state.inflight:
                await self.state.abort_quietly(rid)
            return Response(status_code=200)
        if req.rid not in self.state.inflight:  # empty, unknown or finished: SGLang answers 200
            return Response(status_code=200)
        try:
            await self.engine.abort(req.rid)
        except EngineError as exc:
            return error_reply(engine_error(exc))
        return Response(status_code=200)

    async def flush_cache(self, request: Request) -> Response:
        try:
            await self.engine.flush_cache()
        except EngineError as exc:
            return error_reply(engine_error(exc))
        return PlainTextResponse("Cache flushed.\n")

    async def health(self, request: Request) -> Response:
        return Response(status_code=503 if self.state.closing else 200)

    async def health_ready(self, request: Request) -> Response:
        status, body = ready_answer(self.state.keep_warm, closing=self.state.closing)
        return JSONResponse(body, status_code=status)

    async def health_generate(self, request: Request) -> Response:
        if self.state.closing:
            return Response(status_code=503)
        try:
            ids = self.engine.encode("ping")[:4] or [0]
            with anyio.fail_after(self.state.config.health_timeout_s):
                await self.engine.generate(
                    ids, max_tokens=1, priority=Priority.LIVE, namespace="agentwarm-health"
                )
        except (EngineError, TimeoutError) as exc:
            log.warning("health_generate failed: %s", exc)
            return Response(status_code=503)
        return Response(status_code=200)

    async def model_info(self, request: Request) -> Response:
        state = self.state
        return JSONResponse(
            {
                "model_path": state.name,
                "tokenizer_path": state.tokenizer_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "served_model_name": state.name,
                "agentwarm": state.extension(),
            }
        )

    async def server_info(self, request: Request) -> Response:
        state, config = self.state, self.state.config
        stats = await state.stats()
        return JSONResponse(
            {
                "model_path": state.name,
                "served_model_name": state.name,
                "tokenizer_path": state.tokenizer_path,
                "host": config.host,
                "port": config.port,
                "api_key_required": config.api_key is not None,
                "tp_size": 1,
                "dp_size": 1,
                "enable_priority_scheduling": True,
                "schedule_low_priority_values_first": False,
                "disable_radix_cache": False,
                "chunked_prefill_size": getattr(self.engine, "chunk_size", None),
                "max_total_num_tokens": stats.capacity_tokens if stats else None,
                "internal_states": [{"num_running_reqs": len(state.inflight)}],
                "version": f"agentwarm-{package_version()}",
                "agentwarm": state.extension(),
            }
        )

    async def models(self, request: Request) -> Response:
        name = self.state.name
        card = {
            "id": name,
            "object": "model",
            "created": int(self.state.started),
            "owned_by": "agentwarm",
            "root": name,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def load(self, request: Request) -> Response:
        stats = await self.state.stats()
        tokens = stats.cached_tokens if stats else 0
        load = {"dp_rank": 0, "num_reqs": len(self.state.inflight), "num_waiting_reqs": 0}
        return JSONResponse([{**load, "num_tokens": tokens}])

    async def render_metrics(self, request: Request) -> Response:
        metrics = self.state.metrics
        body = metrics.render(await self.state.stats(), len(self.state.inflight))
        return Response(body, media_type=metrics.content_type)

    async def tokenize(self, request: Request) -> Response:
        try:
            req = validate(TokenizeRequest, await self._body(request))
        except HTTPError as exc:
            return error_reply(exc)
        if isinstance(req.prompt, list):
            tokens: list[Any] = [self.engine.encode(p) for p in req.prompt]
            count = sum(len(t) for t in tokens)
        else:
            tokens = self.engine.encode(req.prompt)
            count = len(tokens)
        return JSONResponse({"tokens": tokens, "count": count, "max_model_len": None})

    async def detokenize(self, request: Request) -> Response:
        try:
            req = validate(DetokenizeRequest, await self._body(request))
        except HTTPError as exc:
            return error_reply(exc)
        if req.tokens and isinstance(req.tokens[0], list):
            return JSONResponse({"text": [self.engine.decode(t) for t in req.tokens]})  # type: ignore[arg-type]
        return JSONResponse({"text": self.engine.decode(req.tokens)})  # type: ignore[arg-type]

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": f"agentwarm-{package_version()}"})
