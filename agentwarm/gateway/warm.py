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
  same hints and tenant gets, the same worker and ``X-SMG-Routing-Key``), and the prefill goes to
  the tenant's namespace (:func:`prefill_warm`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.responses import JSONResponse, Response

from agentwarm._spec import PrefetchKind
from agentwarm.chat import Message
from agentwarm.gateway.heads import Head
from agentwarm.gateway.prompts import Renderer
from agentwarm.gateway.sessions import session_of_hint
from agentwarm.gateway.tenants import Tenant
from agentwarm.gateway.types import ChatCall
from agentwarm.gateway.upstream import Upstream
from agentwarm.server.chat_protocol import (
    ChatRequest,
    chat_chunk,
    chat_completion,
    parse_chat_request,
    usage,
)
from agentwarm.server.sse import sse
from agentwarm.warmup.explicit import traced_prefill

__all__ = ("prefill_warm", "warm_reply", "warm_request")

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


async def prefill_warm(
    call: ChatCall,
    head: Head,
    conversation: Sequence[Message],
    tenant: Tenant,
    renderer: Renderer,
    upstream: Upstream,
) -> dict[str, Any]:
    """Prefill the stable part of a warm request's prompt now, at speculative priority, in
    ``tenant``'s namespace, on the worker a live request of its session goes to; traced as
    ``agentwarm.warm``'s are (one ``explicit`` prefill span, :func:`~agentwarm.warmup.explicit.
    traced_prefill`, its target the node). The reply holds only ``usage`` (its
    ``cached_tokens``: what the upstream already had). An upstream failure raises (the app
    forwards the request instead), as does a prompt too long for the model
    (``ContextLengthExceeded``, a 400: see :mod:`~agentwarm.gateway.prompts`)."""
    ids = await renderer.prompt_ids(head, conversation, refuse=True)
    hint = call.session_hint
    session = session_of_hint(hint, tenant.tag) if hint else None  # as a live one
    worker = upstream.worker_for(session, call.rid)
    result = await traced_prefill(
        len(ids),
        lambda: upstream.prefill(
            worker, ids, rid=call.rid, session=session, namespace=tenant.namespace
        ),
        abort=lambda: upstream.abort(worker, call.rid),
        kind=PrefetchKind.EXPLICIT,
        session=session,
        target=head.name,
    )
    model = str(call.body.get("model") or "")
    used = usage(len(ids), 0, result.cached_tokens)
    return chat_completion(
        call.rid, model, content=None, tool_calls=[], finish_reason=None, usage_=used, warm=True
    )
