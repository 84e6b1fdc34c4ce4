"""How an SGLang server's failures become :mod:`agentwarm.errors` types (one rule, client-wide).

* Unreachable (connection errors, connect timeouts) or 502/503/504 →
  :class:`~agentwarm.errors.EngineUnavailable`; a read timeout →
  :class:`~agentwarm.errors.EngineTimeout`; 400/413/422 → :class:`~agentwarm.errors.InvalidRequest`;
  any other failure → :class:`~agentwarm.errors.EngineError`.
* A refusal of a request over the model context → :class:`~agentwarm.errors.ContextLengthExceeded`
  with the lengths read from the message: SGLang's (``The input (N tokens) is longer than the
  model's context length (L tokens).``, ``Requested token count exceeds the model's maximum
  context length of L tokens. You requested a total of T tokens: N tokens from the input messages
  and M tokens for the completion. ...``, a 400 or, in a stream, an error event without a code)
  and ``agentwarm serve``'s (:func:`~agentwarm.engines.base.check_context`'s text). ``max_tokens``
  is 0 when the message does not state it.
* A ``/generate`` error whose message says "abort" → :class:`~agentwarm.errors.RequestAborted`
  (SGLang versions answer an aborted request with a 400 or 500 error).
* A refusal of ``priority`` (``--abort-on-priority-when-disabled``) → :class:`PriorityDisabled`,
  which the client answers by retrying without it.

Every message names the URL and the HTTP status, and never shows credentials.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from agentwarm.errors import (
    ContextLengthExceeded,
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
#: How servers word a refusal over the context, with named groups ``prompt``, ``limit`` and
#: (when stated) ``max_tokens``: SGLang's two checks, then ``agentwarm serve``'s
#: (``engines/base.py`` ``check_context``).
_CONTEXT_REFUSALS = tuple(
    re.compile(pattern)
    for pattern in (
        r"The input \((?P<prompt>\d+) tokens\) is longer than the model's context length "
        r"\((?P<limit>\d+) tokens\)",
        r"Requested token count exceeds the model's maximum context length of (?P<limit>\d+) "
        r"tokens\. You requested a total of \d+ tokens: (?P<prompt>\d+) tokens from the input "
        r"messages and (?P<max_tokens>\d+) tokens for the completion",
        r"prompt of (?P<prompt>\d+) tokens (?:\+ max_tokens (?P<max_tokens>\d+) )?exceeds the "
        r"model context of (?P<limit>\d+) tokens",
    )
)


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
        return _context_length_error(detail, message) or InvalidRequest(message)
    return EngineError(message)


def event_error(error: Any, url: str) -> EngineError:
    """The error event (``{"error": ...}``) of a stream; its ``code`` (``agentwarm serve`` sends
    the HTTP status it would have answered) picks the type, as for an error status."""
    message = error.get("message") if isinstance(error, Mapping) else error
    code = error.get("code") if isinstance(error, Mapping) else None
    text = f"{url}/generate: stream error: {message}"
    if code is None or code in _INVALID_STATUSES:  # SGLang's error events carry no code
        exceeded = _context_length_error(str(message), text)
        if exceeded is not None:
            return exceeded
    if code in _INVALID_STATUSES:
        return InvalidRequest(text)
    if code in _UNAVAILABLE_STATUSES:
        return EngineUnavailable(text)
    return EngineError(text)


def _context_length_error(detail: str, message: str) -> ContextLengthExceeded | None:
    """The :class:`~agentwarm.errors.ContextLengthExceeded` (with ``message``) for a server's
    refusal ``detail`` when it says the request is over the context, else ``None``."""
    for pattern in _CONTEXT_REFUSALS:
        found = pattern.search(detail)
        if found is not None:
            return ContextLengthExceeded(
                message,
                prompt_tokens=int(found["prompt"]),
                max_tokens=int(found.groupdict().get("max_tokens") or 0),
                limit=int(found["limit"]),
            )
    return None


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
