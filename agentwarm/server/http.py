"""What every route of ``agentwarm serve`` answers a bad request or a failure with, and how it
reads a JSON body.

Every error is ``{"error": {"message", "type", "code"}}`` (:func:`error_reply`), with a 4xx status
for a bad request and 5xx only for an engine failure (:func:`engine_error`); the rules are listed
in :mod:`agentwarm.server.app`.

A JSON body (:func:`read_json`) is refused with a 400 naming the path when it nests deeper than
:data:`~agentwarm._jsonfile.MAX_DEPTH` levels or a string in it holds a lone surrogate (no UTF-8
text can carry it): checked once here, before any code walks the body recursively.

Logging: a refused request logs nothing here (its answer says what is wrong); a bug logs one
record with a bounded traceback (:func:`log_bug`: its last frames, at most
:data:`TRACEBACK_CHARS` characters), so that a request cannot flood the log.
"""

from __future__ import annotations

import json
import logging
import traceback
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentwarm._jsonfile import MAX_DEPTH, Flaw, find_flaw, may_hold_surrogates
from agentwarm.errors import EngineError, EngineTimeout, EngineUnavailable, InvalidRequest
from agentwarm.server.security import is_json_content_type

__all__ = (
    "HTTPError",
    "describe_validation_error",
    "engine_error",
    "error_reply",
    "error_response",
    "http_exception",
    "internal_error",
    "log_bug",
    "one_line",
    "read_json",
    "unexpected",
    "validate",
)

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

#: The frames of a bug's traceback that are logged (the innermost ones).
TRACEBACK_FRAMES = 12
#: The most characters of a bug's traceback that are logged.
TRACEBACK_CHARS = 4000
#: The most characters of an exception's message in a one-line log record.
MESSAGE_CHARS = 300


class HTTPError(Exception):
    """A request answered with ``status`` and the JSON error ``message`` of type ``kind``."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind

    def body(self) -> dict[str, Any]:
        """The JSON error object (also sent as an SSE event by a failing stream)."""
        return {"error": {"message": self.message, "type": self.kind, "code": self.status}}


def error_reply(exc: HTTPError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def error_response(status: int, message: str, kind: str) -> Response:
    """:data:`~agentwarm.server.security.ErrorResponse` for the security middleware."""
    return error_reply(HTTPError(status, message, kind))


def engine_error(exc: EngineError) -> HTTPError:
    """The reply to an engine failure: 400 for a request it refuses, 503/504 when it is gone or
    slow, else 500."""
    if isinstance(exc, InvalidRequest):
        return HTTPError(400, str(exc))
    if isinstance(exc, EngineUnavailable):
        return HTTPError(503, str(exc), "ServiceUnavailableError")
    if isinstance(exc, EngineTimeout):
        return HTTPError(504, str(exc), "GatewayTimeoutError")
    return HTTPError(500, f"{type(exc).__name__}: {exc}", "InternalServerError")


def internal_error(exc: Exception) -> HTTPError:
    """The reply to a bug (logged with a bounded traceback, :func:`log_bug`)."""
    log_bug(log, "engine failed", exc)
    return HTTPError(
        500, f"internal error: {type(exc).__name__}: {one_line(exc)}", "InternalServerError"
    )


def one_line(exc: BaseException, limit: int = MESSAGE_CHARS) -> str:
    """``str(exc)`` on one line, cut to ``limit`` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def log_bug(logger: logging.Logger, message: str, exc: BaseException) -> None:
    """Log ``message`` and ``exc`` as one error record with its traceback bounded: the last
    :data:`TRACEBACK_FRAMES` frames of each exception in the chain, at most
    :data:`TRACEBACK_CHARS` characters (a ``RecursionError``'s thousand frames would otherwise
    add over 100 KB per request)."""
    text = "".join(traceback.format_exception(exc, limit=-TRACEBACK_FRAMES)).rstrip()
    if len(text) > TRACEBACK_CHARS:
        text = "(traceback cut)\n..." + text[-TRACEBACK_CHARS:]
    logger.error("%s: %s: %s\n%s", message, type(exc).__name__, one_line(exc), text)


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's 404/405 as the JSON error (a 405 names the methods allowed)."""
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    message = f"{request.method} {request.url.path}: {exc.detail}"
    allowed = (exc.headers or {}).get("Allow")
    if status == 405 and allowed:
        message += f" (use {allowed})"
    kind = "NotFoundError" if status == 404 else "HTTPError"
    return error_reply(HTTPError(status, message, kind))


async def unexpected(request: Request, exc: Exception) -> Response:
    return error_reply(internal_error(exc))


def validate(model: type[M], body: Any) -> M:
    """``body`` (parsed JSON) as ``model``, else a 400 saying what is wrong."""
    if not isinstance(body, dict):
        raise HTTPError(400, f"body must be a JSON object, got {type(body).__name__}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise HTTPError(400, describe_validation_error(exc)) from exc


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body: 415 without a JSON ``Content-Type``, 413 over ``limit`` bytes
    (declared or read), 400 when empty or not JSON."""
    content_type = request.headers.get("content-type")
    if not is_json_content_type(content_type):
        raise HTTPError(
            415,
            f"Content-Type must be application/json, got {content_type or 'none'!r}: "
            "send the body as JSON with that header",
            "UnsupportedMediaTypeError",
        )
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HTTPError(400, f"bad Content-Length header {declared!r}")
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
        raise HTTPError(400, "empty body: expected a JSON object")
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise HTTPError(400, f"invalid JSON body: {exc}") from exc
    except RecursionError:
        raise HTTPError(
            400, f"invalid JSON body: {Flaw('depth', (), MAX_DEPTH).problem()}"
        ) from None
    flaw = _flaw(raw, body)
    if flaw is not None:
        raise HTTPError(400, flaw.describe())
    return body


def _flaw(raw: bytes, body: Any) -> Flaw | None:
    """:func:`~agentwarm._jsonfile.find_flaw` of the body, when its text can hold one (most
    bodies have neither enough brackets nor a surrogate escape: nothing is walked)."""
    deep = raw.count(b"[") + raw.count(b"{") > MAX_DEPTH
    surrogates = may_hold_surrogates(raw)
    if not deep and not surrogates:
        return None
    return find_flaw(body, max_depth=MAX_DEPTH if deep else None, surrogates=surrogates)


def _too_large(size: int, limit: int) -> HTTPError:
    return HTTPError(
        413,
        f"request body of {size}+ bytes exceeds this server's limit of {limit} bytes "
        "(agentwarm serve --max-request-bytes)",
        "PayloadTooLargeError",
    )


# --- validation errors: one line for a 400 reply ------------------------------------------------


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``sampling_params.max_new_tokens: Input should be a valid integer``."""
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"] if not _is_union_tag(part))
        lines.append(f"{loc or 'body'}: {error['msg']}")
    unique = list(dict.fromkeys(lines))
    return "; ".join(unique[:8]) + (f" (+{len(unique) - 8} more)" if len(unique) > 8 else "")


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part in _UNION_TAGS)


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
