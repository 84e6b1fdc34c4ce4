"""How a vLLM server's failures become :mod:`agentwarm.errors` types.

The transport rules and the reading of an error body are SGLang's
(:mod:`agentwarm.engines.sglang.errors`: unreachable or 502/503/504 →
:class:`~agentwarm.errors.EngineUnavailable`, a read timeout →
:class:`~agentwarm.errors.EngineTimeout`, 400/413/422 → :class:`~agentwarm.errors.InvalidRequest`).
vLLM's own wordings:

* over the context → :class:`~agentwarm.errors.ContextLengthExceeded` with the lengths read from
  the message (``This model's maximum context length is L tokens. However, you requested T
  tokens (N in the messages, M in the completion)``, ``... your prompt contains at least N
  input tokens``, ``... your request has N input tokens``,
  ``'max_tokens' ... is too large: M. This model's maximum context length is L tokens and your
  request has N input tokens``);
* a ``priority`` refused because the server runs first-come-first-served (``Priority scheduling
  is not enabled``) → :class:`PriorityRefused`, which the client answers by sending none.

Every message names the URL, the path and the HTTP status, and never shows credentials.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from agentwarm.engines.sglang.errors import error_message
from agentwarm.errors import (
    ContextLengthExceeded,
    EngineError,
    EngineUnavailable,
    InvalidRequest,
)

__all__ = ("PriorityRefused", "context_error", "event_error", "status_error")

_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
_INVALID_STATUSES = frozenset({400, 413, 422})
_PRIORITY_REFUSED = re.compile(r"[Pp]riority scheduling is not enabled")
_LIMIT = re.compile(r"maximum context length is (?P<limit>\d+) tokens")
_REQUESTED = re.compile(
    r"you requested (?P<total>\d+) tokens \((?P<prompt>\d+) in the messages, "
    r"(?P<max_tokens>\d+) in the completion\)"
)
_INPUT = re.compile(r"(?:request has|contains at least) (?P<prompt>\d+) input tokens")
_TOO_LARGE = re.compile(r"is too large: (?P<max_tokens>\d+)")


class PriorityRefused(InvalidRequest):
    """The server refused ``priority`` (started without ``--scheduling-policy priority``)."""


def context_error(detail: str, message: str) -> ContextLengthExceeded | None:
    """The :class:`~agentwarm.errors.ContextLengthExceeded` for a vLLM refusal ``detail`` that
    says the request is over the context, else ``None``."""
    limit = _LIMIT.search(detail)
    if limit is None:
        return None
    requested = _REQUESTED.search(detail)
    if requested is not None:
        prompt, max_tokens = int(requested["prompt"]), int(requested["max_tokens"])
    else:
        found = _INPUT.search(detail)
        too_large = _TOO_LARGE.search(detail)
        prompt = int(found["prompt"]) if found else 0
        max_tokens = int(too_large["max_tokens"]) if too_large else 0
    return ContextLengthExceeded(
        message, prompt_tokens=prompt, max_tokens=max_tokens, limit=int(limit["limit"])
    )


def _classify(status: int | None, detail: str, message: str) -> EngineError:
    if _PRIORITY_REFUSED.search(detail):
        return PriorityRefused(message)
    if status in _UNAVAILABLE_STATUSES:
        return EngineUnavailable(message)
    if status is None or status in _INVALID_STATUSES:
        exceeded = context_error(detail, message)
        if exceeded is not None:
            return exceeded
    if status in _INVALID_STATUSES:
        return InvalidRequest(message)
    return EngineError(message)


def status_error(resp: httpx.Response, url: str, path: str) -> EngineError:
    """The error for an error status of ``url`` + ``path``."""
    detail = error_message(resp)
    return _classify(resp.status_code, detail, f"{url}{path}: HTTP {resp.status_code}: {detail}")


def event_error(error: Any, url: str, path: str) -> EngineError:
    """The error event (``{"error": {"message", "code"}}``) of a stream."""
    message = error.get("message") if isinstance(error, dict) else error
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) else None
    return _classify(status, str(message), f"{url}{path}: stream error: {message}")
