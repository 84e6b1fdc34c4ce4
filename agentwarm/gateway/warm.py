"""Warm requests at the gateway: which bodies are one, how they are checked, how they are
answered (the hooks prefill them: :meth:`Hooks.warm <agentwarm.gateway.types.Hooks.warm>`).

Rules, the same as ``agentwarm serve``'s chat endpoint (:mod:`agentwarm.server.routes_chat`):

* A body whose ``max_tokens`` or ``max_completion_tokens`` is the number 0 (``0.0`` included)
  asks for a warm request, and is checked as serve checks a chat request
  (:func:`~agentwarm.server.chat_protocol.parse_chat_request`): one it refuses gets serve's own
  400 from the gateway, whatever would answer it. ``max_tokens: 0.0`` is such a refusal (serve's
  limits are integers), not a warm request.
* A body that passes is warm when its limit is 0 (``max_completion_tokens`` wins, as in serve);
  else (``max_tokens: 0`` with ``max_completion_tokens: 5``) it is a live request.
* The answer is the hooks' ``chat.completion`` (usage, no choices); with ``stream: true`` it is
  sent as serve streams a warm request: one ``chat.completion.chunk`` with that usage and no
  choices, then ``data: [DONE]``.
* Routing is the live requests' rule (the learner's: the session id a live request with the
  same hints gets, the same worker and ``X-SMG-Routing-Key``).
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from agentwarm.server.chat_protocol import ChatRequest, chat_chunk, parse_chat_request
from agentwarm.server.sse import sse

__all__ = ("warm_reply", "warm_request")

_LIMITS = ("max_tokens", "max_completion_tokens")


def warm_request(body: dict[str, Any]) -> ChatRequest | None:
    """``body`` as a warm request, ``None`` when it is not one; an ``HTTPError`` 400 (serve's)
    when it asks for one and is not a valid chat request (module docstring)."""
    if not any(_zero(body.get(key)) for key in _LIMITS):
        return None
    request = parse_chat_request(body)
    return request if request.limit == 0 else None


def _zero(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 0


def warm_reply(request: ChatRequest, rid: str, completion: dict[str, Any]) -> Response:
    """The answer to the warm ``request`` (the gateway's ``rid``) that the hooks prefilled:
    ``completion`` as JSON, or as an event stream with ``stream: true``."""
    if not request.stream:
        return JSONResponse(completion)
    model = str(completion.get("model") or request.model or "")
    chunk = chat_chunk(rid, model, None, usage_=completion.get("usage") or {})
    return Response(
        sse(chunk) + b"data: [DONE]\n\n",
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )
