"""The values the gateway's parts hand each other (:mod:`agentwarm.gateway`).

* :class:`ChatCall` — one live ``POST /v1/chat/completions`` as the gateway received it.
* :class:`Reply` — what the upstream answered it (the assistant message, usage, timing).
* :class:`Hooks` — what the app calls around each live request; the learner
  (:mod:`agentwarm.gateway.learner`) implements it, :class:`NoHooks` does nothing (a plain proxy).

Rule: nothing a hook does may delay or fail a live request. ``on_request`` runs before the
request is forwarded and must only look up and schedule (its cost is the gateway's overhead per
request, measured); ``on_tool_call`` and ``on_response`` run after the bytes they concern went to
the client. The app catches and logs any exception a hook raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentwarm.chat import Message
from agentwarm.gateway.tenants import Tenant

__all__ = ("ChatCall", "Hooks", "NoHooks", "Reply")

#: Request headers a client may send to name its session and its node (the agent's role).
SESSION_HEADER = "X-Agentwarm-Session"
NODE_HEADER = "X-Agentwarm-Node"


@dataclass(slots=True)
class ChatCall:
    """One live chat request. ``body`` is the parsed JSON body as the client sent it (the app
    forwards it unchanged); ``rid`` the gateway's id for it; ``session_hint`` the
    :data:`SESSION_HEADER` header, else the body's ``user``, else ``metadata.session_id``
    (``None``: the learner infers the session from the conversation); ``node_hint`` the
    :data:`NODE_HEADER` header. ``session``, ``node`` and ``worker`` are filled in by
    ``on_request`` (``worker``: the upstream URL the session is routed to, ``None`` when the
    app chooses)."""

    body: dict[str, Any]
    rid: str
    session_hint: str | None = None
    node_hint: str | None = None
    received: float = 0.0
    session: str | None = None
    node: str | None = None
    worker: str | None = None

    @property
    def messages(self) -> list[Message]:
        messages = self.body.get("messages")
        return list(messages) if isinstance(messages, list) else []

    @property
    def tenant(self) -> Tenant | None:
        """The tenant of the body's ``cache_salt`` / ``extra_key`` (``None``: invalid salts,
        which the upstream refuses; :mod:`agentwarm.gateway.tenants`)."""
        return Tenant.of(self.body)

    @property
    def tools(self) -> list[dict[str, Any]]:
        tools = self.body.get("tools")
        return list(tools) if isinstance(tools, list) else []


@dataclass(slots=True)
class Reply:
    """The upstream's answer to a :class:`ChatCall`: ``status`` (HTTP), the assistant
    ``message`` (``{"role": "assistant", "content", "tool_calls"?}``; for a stream, assembled
    from its deltas), ``usage`` as the upstream sent it (``prompt_tokens``,
    ``prompt_tokens_details.cached_tokens``, ...; empty when it sent none), ``ttft_s`` (first
    content byte after the request was received; ``None`` for an error) and ``duration_s``."""

    status: int
    message: Message = field(default_factory=dict)
    usage: Mapping[str, Any] = field(default_factory=dict)
    ttft_s: float | None = None
    duration_s: float = 0.0

    @property
    def prompt_tokens(self) -> int:
        return int(self.usage.get("prompt_tokens") or 0)

    @property
    def cached_tokens(self) -> int:
        details = self.usage.get("prompt_tokens_details") or {}
        return int(details.get("cached_tokens") or 0) if isinstance(details, Mapping) else 0


class Hooks(Protocol):
    """What the gateway app calls around each live request (see the module docstring)."""

    async def on_request(self, call: ChatCall) -> None:
        """Before forwarding: identify the call's node and session, settle the session's
        prefetches (the next step is known now), pick the worker."""
        ...

    def on_tool_call(self, call: ChatCall, name: str) -> None:
        """While a stream runs: the reply started a call of tool ``name`` (a hint of the next
        node; prefetching may start before the reply ends)."""
        ...

    async def on_response(self, call: ChatCall, reply: Reply) -> None:
        """After the reply went to the client: learn from it and prefetch the likely next
        requests of the session."""
        ...

    async def warm(self, call: ChatCall) -> dict[str, Any] | None:
        """A warm request (``max_tokens: 0``): prefill its prompt at speculative priority and
        return the ``chat.completion`` to answer it with (usage only, no choices), or ``None``
        to forward it to the upstream as it is; :class:`~agentwarm.errors.ContextLengthExceeded`
        refuses it (answered 400 with its message)."""
        ...

    def stats(self) -> dict[str, Any]:
        """``GET /v1/agentwarm/stats``: the keys of ``agentwarm run --json`` that apply, plus
        ``requests``, ``sessions``, ``nodes``."""
        ...

    async def aclose(self) -> None:
        """Stop prefetching, abort what is in flight, save learned state."""
        ...


class NoHooks:
    """Hooks that do nothing: the gateway is then a plain proxy (for tests and overhead)."""

    async def on_request(self, call: ChatCall) -> None:
        return None

    def on_tool_call(self, call: ChatCall, name: str) -> None:
        return None

    async def on_response(self, call: ChatCall, reply: Reply) -> None:
        return None

    async def warm(self, call: ChatCall) -> dict[str, Any] | None:
        return None

    def stats(self) -> dict[str, Any]:
        return {}

    async def aclose(self) -> None:
        return None
