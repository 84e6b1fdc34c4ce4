"""How an SGLang server's failures become :mod:`agentwarm.errors` types (one rule, client-wide).

* Unreachable (connection errors, connect timeouts) or 502/503/504 →
  :class:`~agentwarm.errors.EngineUnavailable`; a read timeout →
  :class:`~agentwarm.errors.EngineTimeout`; 400/413/422 → :class:`~agentwarm.errors.InvalidRequest`;
  any other failure → :class:`~agentwarm.errors.EngineError`.
* A ``/generate`` error whose message says "abort" → :class:`~agentwarm.errors.RequestAborted`
  (SGLang versions answer an aborted request with a 400 or 500 error).
* A refusal of ``priority`` (``--abort-on-priority-when-disabled``) → :class:`PriorityDisabled`,
  which the client answers by retrying without it.

Every message names the URL and the HTTP status, and never shows credentials.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from agentwarm.errors import (
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    InvalidRequest,
    RequestAborted,
)
from agentwarm.redact import redact_credentials

__all__ = (
    "PRIORITY_DISABLED",
    "PriorityDisabled",
    "error_message",
    "event_error",
    "status_error",
    "transport_error",
)

#: What SGLang answers to a request with ``priority`` when priority scheduling is off.
PRIORITY_DISABLED = "Using priority is disabled"
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
_INVALID_STATUSES = frozenset({400, 413, 422})


class PriorityDisabled(InvalidRequest):
    """The server refused ``priority`` (SGLang ``--abort-on-priority-when-disabled``)."""


def transport_error(exc: httpx.HTTPError, where: str) -> EngineError:
    """The error for an httpx failure of the request to ``where`` (URL and path)."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return EngineTimeout(f"{where}: no answer in time ({type(exc).__name__})")
    if isinstance(exc, httpx.TransportError):
        return EngineUnavailable(
            f"{where}: cannot reach the server "
            f"({type(exc).__name__}: {redact_credentials(str(exc))})"
        )
    return EngineError(f"{where}: {type(exc).__name__}: {redact_credentials(str(exc))}")


def status_error(resp: httpx.Response, url: str, path: str) -> EngineError:
    """The error for an error status of ``url`` + ``path``."""
    detail = error_message(resp)
    message = f"{url}{path}: HTTP {resp.status_code}: {detail}"
    if PRIORITY_DISABLED in detail:
        return PriorityDisabled(message)
    if path == "/generate" and "abort" in detail.lower():
        return RequestAborted(message)
    if resp.status_code in _UNAVAILABLE_STATUSES:
        return EngineUnavailable(message)
    if resp.status_code in _INVALID_STATUSES:
        return InvalidRequest(message)
    return EngineError(message)


def event_error(error: Any, url: str) -> EngineError:
    """The error event (``{"error": ...}``) of a stream; its ``code`` (``agentwarm serve`` sends
    the HTTP status it would have answered) picks the type, as for an error status."""
    message = error.get("message") if isinstance(error, Mapping) else error
    code = error.get("code") if isinstance(error, Mapping) else None
    text = f"{url}/generate: stream error: {message}"
    if code in _INVALID_STATUSES:
        return InvalidRequest(text)
    if code in _UNAVAILABLE_STATUSES:
        return EngineUnavailable(text)
    return EngineError(text)


def error_message(resp: httpx.Response) -> str:
    """The message of an error reply (SGLang's, OpenAI's or Starlette's shape), at most 300
    characters."""
    try:
        data = resp.json()
    except ValueError:
        return resp.text.strip()[:300] or resp.reason_phrase
    if isinstance(data, Mapping):
        error = data.get("error")
        if isinstance(error, Mapping) and "message" in error:
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
        if "message" in data:
            return str(data["message"])[:300]
        if "detail" in data:
            return str(data["detail"])[:300]
    return json.dumps(data)[:300]
