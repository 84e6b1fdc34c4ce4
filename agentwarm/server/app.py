"""The ASGI app of ``agentwarm serve``: any :class:`~agentwarm.engines.base.Engine` behind SGLang's
native HTTP API, so that :class:`~agentwarm.engines.sglang.SGLangEngine` and sglang-router can
use it as if it were an SGLang worker.

Endpoints (SGLang 0.5.x names; the ``/get_*`` spellings are the pre-0.5.5 aliases):

* ``POST /generate`` — ``input_ids`` or ``text``; ``sampling_params.max_new_tokens: 0`` is a
  prefill-only request (``Engine.prefill``, priority SPECULATIVE unless given), anything else a
  generation (priority LIVE unless given). ``stream: true`` answers SSE ``data: {json}`` events,
  each with the whole output so far (SGLang's default), then ``data: [DONE]``.
* ``POST /abort_request`` — ``{"rid"}`` of a request in flight or ``{"abort_all": true}``; 200
  also for an empty, unknown or finished rid (as SGLang). A client that disconnects also aborts
  its request.
* ``POST /flush_cache`` (POST only: it changes state), ``GET /health``, ``GET /health_generate``,
  ``GET /model_info``, ``GET /server_info`` (sglang-router probes these three at start-up),
  ``GET /v1/models``, ``GET /get_load``, ``GET /metrics`` (see :mod:`agentwarm.server.metrics`),
  ``POST /tokenize``, ``POST /detokenize``, ``GET /version``.

Rules: every error is a JSON ``{"error": {"message", "type", "code"}}`` with a 4xx status for a
bad request (malformed JSON, wrong types, missing prompt, body over ``max_request_bytes``: 413,
JSON body without ``Content-Type: application/json``: 415, wrong method: 405, missing API key:
401) and 5xx only for engine failures; a bad request never stops the server. With ``api_key``
set, every path except ``/health*`` and ``/metrics`` needs ``Authorization: Bearer <key>`` (as
SGLang's ``--api-key``); without one, the Host/Origin checks of
:mod:`agentwarm.server.security` apply (421/403). ``max_request_bytes=None`` derives the limit
from the engine's ``max_context`` (:func:`~agentwarm.server.security.default_max_request_bytes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    PrefillStatus,
    Priority,
    new_rid,
)
from agentwarm.engines.namespace import check_field, namespace_key
from agentwarm.engines.sglang.protocol import (
    ROUTING_KEY_HEADER,
    AbortRequest,
    DetokenizeRequest,
    FinishReason,
    GenerateReply,
    GenerateRequest,
    MetaInfo,
    SamplingParams,
    TokenizeRequest,
)
from agentwarm.errors import (
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    InvalidRequest,
    RequestAborted,
)
from agentwarm.server.metrics import ServerMetrics
from agentwarm.server.schemas import describe_validation_error
from agentwarm.server.security import HostGuard, default_max_request_bytes, is_json_content_type

__all__ = ("ServerConfig", "create_app")

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound="asyncio.Future[Any]")

_PUBLIC_PATHS = ("/health", "/metrics")
_ABORT = FinishReason(type="abort", message="Abort before completion")
_DRAIN_AFTER_ABORT_S = 10.0  # how long an aborted stream may take to report its outcome


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Settings of one server. ``model_path``/``tokenizer_path`` are what ``/model_info`` reports
    (default: the engine's ``model_name``, and the tokenizer directory when one is known);
    ``host`` is the bound host the Host check accepts besides loopback names; ``port`` is only
    reported. ``max_request_bytes=None``: derived from the engine's context length."""

    api_key: str | None = None
    max_request_bytes: int | None = None
    max_new_tokens: int = 4096
    model_path: str | None = None
    tokenizer_path: str | None = None
    health_timeout_s: float = 20.0
    host: str = "127.0.0.1"
    port: int = 0


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


@dataclass(frozen=True, slots=True)
class _Job:
    rid: str
    ids: list[int]
    sampling: SamplingParams
    priority: int | None
    namespace: str
    session: str | None
    log_metrics: bool

    @property
    def max_new_tokens(self) -> int:
        return self.sampling.max_new_tokens or 0

    @property
    def prefill_only(self) -> bool:
        return self.max_new_tokens == 0


def create_app(
    engine: Engine, config: ServerConfig | None = None, *, close_engine: bool = True
) -> Starlette:
    """The Starlette app serving ``engine``; closes the engine at shutdown if ``close_engine``."""
    server = _Server(engine, config or ServerConfig(), close_engine=close_engine)
    return server.app


class _Server:
    def __init__(self, engine: Engine, config: ServerConfig, *, close_engine: bool) -> None:
        self.engine = engine
        self.config = config
        self.close_engine = close_engine
        self.name = config.model_path or engine.model_name
        self.metrics = ServerMetrics(self.name)
        self.inflight: dict[str, int] = {}
        self.closing = False
        self.started = time.time()
        self.tokenizer_kind, tokenizer_path = _describe_tokenizer(engine)
        self.tokenizer_path = config.tokenizer_path or tokenizer_path
        self.max_request_bytes = config.max_request_bytes or default_max_request_bytes(
            getattr(engine, "max_context", None)
        )
        routes = [
            Route("/generate", self.generate, methods=["POST", "PUT"]),
            Route("/abort_request", self.abort_request, methods=["POST"]),
            Route("/flush_cache", self.flush_cache, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
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
        app = Starlette(
            routes=routes,
            lifespan=self.lifespan,
            exception_handlers={HTTPException: _http_exception, Exception: _unexpected},
        )
        self.app: Starlette = app
        if config.api_key:
            app.add_middleware(_APIKeyMiddleware, api_key=config.api_key)
        else:
            app.add_middleware(HostGuard, bound_host=config.host, error=_error_response)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self.closing = True
            if self.close_engine:
                await self.engine.aclose()

    # ------------------------------------------------------------------ /generate

    async def generate(self, request: Request) -> Response:
        try:
            req = _validate(GenerateRequest, await self._json(request))
            job = self._job(request, req)
        except _HTTPError as exc:
            return _error(exc)
        if req.stream:
            return _SSEResponse(self._events(job), abort=lambda: self._abort_quietly(job.rid))
        if job.rid in self.inflight:
            return _error(
                _HTTPError(400, f"duplicate rid {job.rid!r}: a request with it is running")
            )
        self.inflight[job.rid] = self.inflight.get(job.rid, 0) + 1
        try:
            out = await self._until_disconnect(request, job.rid, self._run(job))
        except _HTTPError as exc:
            return _error(exc)
        finally:
            self._leave(job.rid)
        return JSONResponse(out)

    def _job(self, request: Request, req: GenerateRequest) -> _Job:
        if req.text is not None and req.input_ids is not None:
            raise _HTTPError(400, "give either text or input_ids, not both")
        if isinstance(req.text, list) or (req.input_ids and isinstance(req.input_ids[0], list)):
            raise _HTTPError(400, "batch requests are not supported: send one prompt per request")
        if isinstance(req.rid, list):
            raise _HTTPError(400, "rid must be a string (batch requests are not supported)")
        if req.text is not None:
            ids = self.engine.encode(req.text)
        elif req.input_ids is not None:
            ids = [int(i) for i in req.input_ids]  # type: ignore[arg-type]
        else:
            raise _HTTPError(400, "missing input: give input_ids (a list of token ids) or text")
        if not ids:
            raise _HTTPError(400, "empty prompt: input_ids/text must give at least one token")
        if min(ids) < 0:
            raise _HTTPError(400, f"input_ids must be >= 0, got {min(ids)}")
        sampling = req.sampling_params or SamplingParams()
        limit = self.config.max_new_tokens
        if sampling.max_new_tokens is None:
            sampling = sampling.model_copy(update={"max_new_tokens": min(128, limit)})
        elif sampling.max_new_tokens > limit:
            raise _HTTPError(
                400,
                f"sampling_params.max_new_tokens={sampling.max_new_tokens} exceeds this server's "
                f"limit of {limit}",
            )
        namespace = namespace_key(req.cache_salt, req.extra_key)
        header = request.headers.get(ROUTING_KEY_HEADER)
        if header:
            try:
                check_field("X-SMG-Routing-Key header", header)
            except ValueError as exc:
                raise _HTTPError(400, str(exc)) from None
        session = header or req.routing_key or req.session_id
        return _Job(
            rid=req.rid or new_rid(),
            ids=ids,
            sampling=sampling,
            priority=req.priority,
            namespace=namespace,
            session=session,
            log_metrics=req.log_metrics,
        )

    async def _run(self, job: _Job) -> GenerateReply:
        start = time.perf_counter()
        try:
            if job.prefill_only:
                result = await self.engine.prefill(
                    job.ids,
                    priority=Priority.SPECULATIVE if job.priority is None else job.priority,
                    rid=job.rid,
                    namespace=job.namespace,
                    session=job.session,
                )
                aborted = result.status is PrefillStatus.ABORTED
                finish = _ABORT if aborted else FinishReason(type="length", length=0)
                self._record(
                    job,
                    result.prompt_tokens,
                    result.cached_tokens,
                    result.computed_tokens,
                    0,
                    aborted,
                )
                return _response(
                    job.rid,
                    "",
                    [],
                    prompt=result.prompt_tokens,
                    cached=result.cached_tokens,
                    computed=result.computed_tokens,
                    finish=finish,
                    e2e=time.perf_counter() - start,
                )
            completion = await self.engine.generate(
                job.ids,
                max_tokens=job.max_new_tokens,
                temperature=job.sampling.temperature,
                priority=Priority.LIVE if job.priority is None else job.priority,
                rid=job.rid,
                namespace=job.namespace,
                session=job.session,
                seed=job.sampling.sampling_seed,
            )
        except RequestAborted as exc:
            cached, computed = exc.cached_tokens, exc.computed_tokens
            self._record(job, len(job.ids), cached, computed, 0, True)
            finish = FinishReason(type="abort", message=str(exc) or "aborted")
            return _response(
                job.rid, "", [], len(job.ids), cached, computed, finish, time.perf_counter() - start
            )
        except asyncio.CancelledError:  # the handler went away before the engine answered
            self._record(job, len(job.ids), 0, 0, 0, True)
            raise
        except EngineError as exc:
            raise _engine_error(exc) from exc
        except Exception as exc:  # an engine bug must not look like a dropped connection
            raise _internal_error(exc) from exc
        self._record_completion(job, completion)
        return _completion_response(job.rid, completion, time.perf_counter() - start)

    async def _events(self, job: _Job) -> AsyncIterator[bytes]:
        if job.rid in self.inflight:
            yield _sse({"error": {"message": f"duplicate rid {job.rid!r}", "code": 400}})
            yield b"data: [DONE]\n\n"
            return
        self.inflight[job.rid] = self.inflight.get(job.rid, 0) + 1
        try:
            if job.prefill_only:
                yield _sse(await self._run(job))
            else:
                async for event in self._stream_generate(job):
                    yield _sse(event)
        except _HTTPError as exc:
            yield _sse({"error": {"message": exc.message, "type": exc.kind, "code": exc.status}})
        finally:
            self._leave(job.rid)
        yield b"data: [DONE]\n\n"

    async def _stream_generate(self, job: _Job) -> AsyncIterator[GenerateReply]:
        start = time.perf_counter()
        out_ids: list[int] = []
        text = ""
        stream = self.engine.generate_stream(
            job.ids,
            max_tokens=job.max_new_tokens,
            temperature=job.sampling.temperature,
            priority=Priority.LIVE if job.priority is None else job.priority,
            rid=job.rid,
            namespace=job.namespace,
            session=job.session,
            seed=job.sampling.sampling_seed,
        )
        recorded = False
        try:
            async for chunk in stream:
                out_ids.extend(chunk.token_ids)
                text += chunk.text
                if chunk.completion is not None:
                    recorded = True
                    self._record_completion(job, chunk.completion)
                    yield _completion_response(
                        job.rid, chunk.completion, time.perf_counter() - start
                    )
                    return
                yield GenerateReply(
                    text=text,
                    output_ids=list(out_ids),
                    meta_info=MetaInfo(
                        id=job.rid,
                        prompt_tokens=len(job.ids),
                        completion_tokens=len(out_ids),
                        finish_reason=None,
                    ),
                )
        except RequestAborted as exc:
            recorded = True
            cached, computed = exc.cached_tokens, exc.computed_tokens
            self._record(job, len(job.ids), cached, computed, len(out_ids), True)
            finish = FinishReason(type="abort", message=str(exc) or "aborted")
            e2e = time.perf_counter() - start
            yield _response(job.rid, text, out_ids, len(job.ids), cached, computed, finish, e2e)
            return
        except (GeneratorExit, asyncio.CancelledError):
            # Closed before the engine reported an outcome (the drain after an abort timed out,
            # or shutdown): still an aborted request, with no processed prompt tokens known.
            if not recorded:
                self._record(job, len(job.ids), 0, 0, len(out_ids), True)
            raise
        except EngineError as exc:
            raise _engine_error(exc) from exc
        except Exception as exc:  # an engine bug must not look like a dropped connection
            raise _internal_error(exc) from exc
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()  # type: ignore[attr-defined]
        raise _HTTPError(500, "engine stream ended without a completion", "InternalServerError")

    async def _until_disconnect(
        self, request: Request, rid: str, work: Awaitable[GenerateReply]
    ) -> GenerateReply:
        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(_disconnected(request.receive))
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await self._abort_quietly(rid)
            return await task
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()

    async def _abort_quietly(self, rid: str) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.engine.abort(rid)
            except EngineError as exc:
                log.warning("abort of %s after client disconnect failed: %s", rid, exc)

    def _leave(self, rid: str) -> None:
        left = self.inflight.pop(rid, 1) - 1
        if left > 0:
            self.inflight[rid] = left

    def _record(
        self, job: _Job, prompt: int, cached: int, computed: int, generated: int, aborted: bool
    ) -> None:
        if job.log_metrics:
            self.metrics.record(
                prompt_tokens=prompt,
                cached_tokens=cached,
                computed_tokens=computed,
                generation_tokens=generated,
                aborted=aborted,
                prefill_only=job.prefill_only,
            )

    def _record_completion(self, job: _Job, completion: Completion) -> None:
        aborted = completion.finish_reason == "abort"
        self._record(
            job,
            completion.prompt_tokens,
            completion.cached_tokens,
            completion.computed_tokens,
            len(completion.token_ids),
            aborted,
        )

    # ------------------------------------------------------------------ other endpoints

    async def abort_request(self, request: Request) -> Response:
        try:
            req = _validate(AbortRequest, await self._json(request))
        except _HTTPError as exc:
            return _error(exc)
        if req.abort_all:
            for rid in list(self.inflight):
                await self._abort_quietly(rid)
            return Response(status_code=200)
        if req.rid not in self.inflight:  # empty, unknown or finished: nothing to do (SGLang: 200)
            return Response(status_code=200)
        try:
            await self._abort_engine(req.rid)
        except _HTTPError as exc:
            return _error(exc)
        return Response(status_code=200)

    async def _abort_engine(self, rid: str) -> None:
        try:
            await self.engine.abort(rid)
        except EngineError as exc:
            raise _engine_error(exc) from exc

    async def flush_cache(self, request: Request) -> Response:
        try:
            await self.engine.flush_cache()
        except EngineError as exc:
            return _error(_engine_error(exc))
        return PlainTextResponse("Cache flushed.\n")

    async def health(self, request: Request) -> Response:
        return Response(status_code=503 if self.closing else 200)

    async def health_generate(self, request: Request) -> Response:
        if self.closing:
            return Response(status_code=503)
        try:
            ids = self.engine.encode("ping")[:4] or [0]
            with anyio.fail_after(self.config.health_timeout_s):
                await self.engine.generate(
                    ids, max_tokens=1, priority=Priority.LIVE, namespace="agentwarm-health"
                )
        except (EngineError, TimeoutError) as exc:
            log.warning("health_generate failed: %s", exc)
            return Response(status_code=503)
        return Response(status_code=200)

    async def model_info(self, request: Request) -> Response:
        return JSONResponse(
            {
                "model_path": self.name,
                "tokenizer_path": self.tokenizer_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "served_model_name": self.name,
                "agentwarm": self._extension(),
            }
        )

    async def server_info(self, request: Request) -> Response:
        stats = await self._stats()
        return JSONResponse(
            {
                "model_path": self.name,
                "served_model_name": self.name,
                "tokenizer_path": self.tokenizer_path,
                "host": self.config.host,
                "port": self.config.port,
                "api_key_required": self.config.api_key is not None,
                "tp_size": 1,
                "dp_size": 1,
                "enable_priority_scheduling": True,
                "schedule_low_priority_values_first": False,
                "disable_radix_cache": False,
                "chunked_prefill_size": getattr(self.engine, "chunk_size", None),
                "max_total_num_tokens": stats.capacity_tokens if stats else None,
                "internal_states": [{"num_running_reqs": len(self.inflight)}],
                "version": f"agentwarm-{_version()}",
                "agentwarm": self._extension(),
            }
        )

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.name,
            "object": "model",
            "created": int(self.started),
            "owned_by": "agentwarm",
            "root": self.name,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def load(self, request: Request) -> Response:
        stats = await self._stats()
        tokens = stats.cached_tokens if stats else 0
        load = {"dp_rank": 0, "num_reqs": len(self.inflight), "num_waiting_reqs": 0}
        return JSONResponse([{**load, "num_tokens": tokens}])

    async def render_metrics(self, request: Request) -> Response:
        body = self.metrics.render(await self._stats(), len(self.inflight))
        return Response(body, media_type=self.metrics.content_type)

    async def tokenize(self, request: Request) -> Response:
        try:
            req = _validate(TokenizeRequest, await self._json(request))
        except _HTTPError as exc:
            return _error(exc)
        if isinstance(req.prompt, list):
            tokens: list[Any] = [self.engine.encode(p) for p in req.prompt]
            count = sum(len(t) for t in tokens)
        else:
            tokens = self.engine.encode(req.prompt)
            count = len(tokens)
        return JSONResponse({"tokens": tokens, "count": count, "max_model_len": None})

    async def detokenize(self, request: Request) -> Response:
        try:
            req = _validate(DetokenizeRequest, await self._json(request))
        except _HTTPError as exc:
            return _error(exc)
        if req.tokens and isinstance(req.tokens[0], list):
            return JSONResponse({"text": [self.engine.decode(t) for t in req.tokens]})  # type: ignore[arg-type]
        return JSONResponse({"text": self.engine.decode(req.tokens)})  # type: ignore[arg-type]

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": f"agentwarm-{_version()}"})

    # ------------------------------------------------------------------ helpers

    def _extension(self) -> dict[str, Any]:
        return {
            "version": _version(),
            "engine": type(self.engine).__name__,
            "tokenizer": self.tokenizer_kind,
            "supports_promotion": bool(getattr(self.engine, "supports_promotion", False)),
        }

    async def _stats(self) -> EngineStats | None:
        try:
            return await self.engine.stats()
        except EngineError as exc:
            log.warning("engine stats failed: %s", exc)
            return None

    async def _json(self, request: Request) -> Any:
        content_type = request.headers.get("content-type")
        if not is_json_content_type(content_type):
            raise _HTTPError(
                415,
                f"Content-Type must be application/json, got {content_type or 'none'!r}: "
                "send the body as JSON with that header",
                "UnsupportedMediaTypeError",
            )
        limit = self.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise _HTTPError(400, f"bad Content-Length header {declared!r}")
            if int(declared) > limit:
                raise _too_large(int(declared), limit)
        size = 0
        chunks: list[bytes] = []
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit)
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            raise _HTTPError(400, "empty body: expected a JSON object")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise _HTTPError(400, f"invalid JSON body: {exc}") from exc
        except RecursionError as exc:
            raise _HTTPError(400, "invalid JSON body: nested too deeply") from exc


def _validate(model: type[M], body: Any) -> M:
    if not isinstance(body, dict):
        raise _HTTPError(400, f"body must be a JSON object, got {type(body).__name__}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _HTTPError(400, describe_validation_error(exc)) from exc


def _too_large(size: int, limit: int) -> _HTTPError:
    return _HTTPError(
        413,
        f"request body of {size}+ bytes exceeds this server's limit of {limit} bytes "
        "(agentwarm serve --max-request-bytes)",
        "PayloadTooLargeError",
    )


def _engine_error(exc: EngineError) -> _HTTPError:
    if isinstance(exc, InvalidRequest):
        return _HTTPError(400, str(exc))
    if isinstance(exc, EngineUnavailable):
        return _HTTPError(503, str(exc), "ServiceUnavailableError")
    if isinstance(exc, EngineTimeout):
        return _HTTPError(504, str(exc), "GatewayTimeoutError")
    return _HTTPError(500, f"{type(exc).__name__}: {exc}", "InternalServerError")


def _internal_error(exc: Exception) -> _HTTPError:
    log.error("engine failed", exc_info=exc)
    return _HTTPError(500, f"internal error: {type(exc).__name__}: {exc}", "InternalServerError")


def _error(exc: _HTTPError) -> JSONResponse:
    body = {"error": {"message": exc.message, "type": exc.kind, "code": exc.status}}
    return JSONResponse(body, status_code=exc.status)


def _error_response(status: int, message: str, kind: str) -> Response:
    return _error(_HTTPError(status, message, kind))


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    message = f"{request.method} {request.url.path}: {exc.detail}"
    allowed = (exc.headers or {}).get("Allow")
    if status == 405 and allowed:
        message += f" (use {allowed})"
    return _error(_HTTPError(status, message, "NotFoundError" if status == 404 else "HTTPError"))


async def _unexpected(request: Request, exc: Exception) -> Response:
    return _error(_internal_error(exc))


def _response(
    rid: str,
    text: str,
    out_ids: Sequence[int],
    prompt: int,
    cached: int,
    computed: int,
    finish: FinishReason,
    e2e: float,
    ttft: float | None = None,
) -> GenerateReply:
    meta = MetaInfo(
        id=rid,
        finish_reason=finish,
        prompt_tokens=prompt,
        completion_tokens=len(out_ids),
        cached_tokens=cached,
        computed_tokens=computed,
        e2e_latency=e2e,
    )
    if ttft is not None:
        meta["ttft"] = ttft
    return GenerateReply(text=text, output_ids=list(out_ids), meta_info=meta)


def _completion_response(rid: str, completion: Completion, e2e: float) -> GenerateReply:
    ids = list(completion.token_ids)
    if completion.finish_reason == "length":
        finish = FinishReason(type="length", length=len(ids))
    elif completion.finish_reason == "abort":
        finish = FinishReason(**_ABORT)
    else:
        finish = FinishReason(type="stop", matched=ids[-1] if ids else None)
    return _response(
        rid,
        completion.text,
        ids,
        completion.prompt_tokens,
        completion.cached_tokens,
        completion.computed_tokens,
        finish,
        e2e,
        completion.ttft_s,
    )


def _sse(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class _SSEResponse(Response):
    """Streams ``events``; if the client goes away first, calls ``abort`` and drains the stream
    until it reports the aborted request (for the metrics), for up to ``_DRAIN_AFTER_ABORT_S``,
    then closes it.

    Starlette's ``StreamingResponse`` leaves a generator suspended at ``yield`` to the garbage
    collector when the client disconnects; a prefill must be aborted at once instead.
    """

    media_type = "text/event-stream"

    def __init__(
        self, events: AsyncIterator[bytes], *, abort: Callable[[], Awaitable[None]]
    ) -> None:
        self.events = events
        self.abort = abort
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        gone = _quiet(asyncio.ensure_future(_disconnected(receive)))
        events = self.events.__aiter__()
        try:
            while True:
                step = _quiet(asyncio.ensure_future(events.__anext__()))
                await asyncio.wait({step, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    await self._abort_and_drain(events, step)
                    return
                try:
                    chunk = step.result()
                except StopAsyncIteration:
                    break
                try:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except OSError:
                    await self._abort_and_drain(events, None)
                    return
            gone.cancel()
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await events.aclose()  # type: ignore[attr-defined]

    async def _abort_and_drain(
        self, events: AsyncIterator[bytes], step: asyncio.Future[bytes] | None
    ) -> None:
        """Abort the request, then read and drop the rest of ``events`` (tokens decoded before the
        abort took effect, then the aborted outcome, which records the request) until they end or
        ``_DRAIN_AFTER_ABORT_S`` passes; ``step`` is a read already in progress."""
        await self.abort()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _DRAIN_AFTER_ABORT_S
        while True:
            if step is None:
                step = _quiet(asyncio.ensure_future(events.__anext__()))
            done, _ = await asyncio.wait({step}, timeout=max(0.0, deadline - loop.time()))
            if not done:
                step.cancel()
                with contextlib.suppress(BaseException):
                    await step
                return
            if step.cancelled() or step.exception() is not None:  # StopAsyncIteration: the end
                return
            step = None


def _quiet(fut: F) -> F:
    """``fut``, whose exception is marked as retrieved when nobody awaits it (no "Future
    exception was never retrieved" in the log for an abandoned read)."""
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())
    return fut


class _APIKeyMiddleware:
    """``Authorization: Bearer <api_key>`` on every path but ``/health*`` and ``/metrics``."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(_PUBLIC_PATHS):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        response = _error(
            _HTTPError(
                401, "missing or wrong API key: send Authorization: Bearer <key>", "AuthError"
            )
        )
        await response(scope, receive, send)


def _describe_tokenizer(engine: Engine) -> tuple[str | None, str | None]:
    """(``"byte"`` | ``"hf"`` | ``None``, tokenizer directory or ``None``)."""
    sample = "agentwarm é ✓\n{}"
    try:
        raw = list(sample.encode("utf-8"))
        if engine.encode(sample) == raw and engine.decode(raw) == sample:
            return "byte", None
    except Exception:  # an engine without a tokenizer cannot describe one
        return None, None
    tokenizer = getattr(engine, "tokenizer", None)
    hf = getattr(tokenizer, "hf_tokenizer", None)
    path = getattr(hf, "name_or_path", None) or getattr(engine, "tokenizer_path", None)
    return ("hf" if hf is not None else None), (str(path) if path else None)


def _version() -> str:
    try:
        return metadata.version("agentwarm")
    except metadata.PackageNotFoundError:
        return "0+unknown"
