"""``POST /v1/chat/completions`` of the gateway: forward the body unchanged, call the hooks
around it (the rules are in :mod:`agentwarm.gateway.app`).

A request's life: read and check the body → :class:`~agentwarm.gateway.types.ChatCall` →
``hooks.on_request`` → pick the worker → forward (the overhead is measured here) → the upstream's
answer to the client (a stream relayed event by event by :class:`~agentwarm.gateway.relay.
Relay`, while :class:`~agentwarm.gateway.streams.ReplyAssembler` reads it) →
``hooks.on_response`` in the background. A client that goes away closes the upstream request,
which aborts it there. A warm request (``max_tokens: 0``) is checked and answered as
:mod:`agentwarm.gateway.warm` says.

The answer keeps the upstream's status, body and the headers a client reads
(:func:`~agentwarm.gateway.relay.relayed_headers`: ``content-type``, ``retry-after`` and
``retry-after-ms``, ``x-should-retry``, ``x-request-id``, ``x-ratelimit-*``, ``ratelimit-*``,
``openai-*``), on a stream too; no other header (hop-by-hop ones, ``content-length`` and
``content-encoding``, which describe the gateway's own framing, cookies, the upstream's
``server``) is passed on.

A body that is not JSON, nests too deeply or holds a lone surrogate
(:func:`~agentwarm.server.http.read_json`), has no ``messages`` list, or has a tool call whose
``arguments`` no template can format (:func:`~agentwarm.chat.check_tool_arguments`) is answered
400 here, before any hook. What a hook cannot use logs one warning line; a hook's bug, one
record with a bounded traceback.

A request never waits forever: while it waits on its worker it also ends (a 5xx JSON error, or
an error event and ``[DONE]`` in a stream) when the worker stops answering (a 504 from
:class:`~agentwarm.gateway.liveness.Liveness`; a new request to such a worker gets a 503 with
``Retry-After`` at once) or when the shutdown grace of :class:`~agentwarm.server.drain.Drain`
is over (a 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentwarm.chat import check_tool_arguments
from agentwarm.engines.base import new_rid
from agentwarm.errors import AgentwarmError, ContextLengthExceeded, EngineError
from agentwarm.gateway.liveness import Watch
from agentwarm.gateway.metrics import GatewayMetrics
from agentwarm.gateway.relay import (
    CLIENT_GONE,
    ClientGone,
    Relay,
    relayed_headers,
    until_gone,
    upstream_error,
)
from agentwarm.gateway.relay import chat_error as _error
from agentwarm.gateway.streams import ReplyAssembler
from agentwarm.gateway.types import NODE_HEADER, SESSION_HEADER, ChatCall, Hooks, Reply
from agentwarm.gateway.upstream import CHAT_PATH, Upstream
from agentwarm.gateway.warm import warm_reply, warm_request
from agentwarm.server.drain import Drain
from agentwarm.server.http import HTTPError, error_reply, log_bug, one_line, read_json

__all__ = (
    "CLIENT_GONE",
    "Background",
    "ChatProxy",
    "relayed_headers",
    "session_hint",
    "upstream_error",
)

log = logging.getLogger(__name__)


class Background:
    """Tasks that run after a reply went out (``hooks.on_response``); kept until they end, so
    that none is garbage-collected half-way, and awaited (then cancelled) at shutdown."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def __len__(self) -> int:
        return len(self._tasks)

    async def aclose(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the tasks, then cancel the rest."""
        if not self._tasks:
            return
        _, late = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in late:
            task.cancel()
        if late:
            log.warning("cancelled %d hooks.on_response task(s) at shutdown", len(late))
            await asyncio.wait(late)


def session_hint(request: Request, body: dict[str, Any]) -> str | None:
    """The :data:`SESSION_HEADER` header, else the body's ``user``, else
    ``metadata.session_id``."""
    header = request.headers.get(SESSION_HEADER)
    if header:
        return header
    user = body.get("user")
    if isinstance(user, str) and user:
        return user
    metadata = body.get("metadata")
    session = metadata.get("session_id") if isinstance(metadata, dict) else None
    return session if isinstance(session, str) and session else None


class ChatProxy:
    """The chat route of one gateway app."""

    def __init__(
        self,
        upstream: Upstream,
        hooks: Hooks,
        metrics: GatewayMetrics,
        background: Background,
        max_request_bytes: int,
        drain: Drain | None = None,
    ) -> None:
        self.upstream = upstream
        self.hooks = hooks
        self.metrics = metrics
        self.background = background
        self.max_request_bytes = max_request_bytes
        #: Ends the requests still running when the shutdown grace is over.
        self.drain = drain or Drain(0.0)

    def routes(self) -> list[Route]:
        return [Route(CHAT_PATH, self.complete, methods=["POST"])]

    async def complete(self, request: Request) -> Response:
        received = time.perf_counter()
        try:
            body = await read_json(request, self.max_request_bytes)
            warm = warm_request(body) if isinstance(body, dict) else None
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise HTTPError(
                    400,
                    "body must be a JSON object with a 'messages' list (OpenAI's chat format), "
                    f"got {_shape(body)}",
                )
            _check_arguments(body["messages"])
        except HTTPError as exc:
            self.metrics.answered(exc.status, None)
            return error_reply(exc)
        call = ChatCall(
            body=body,
            rid=new_rid(),
            session_hint=session_hint(request, body),
            node_hint=request.headers.get(NODE_HEADER) or None,
            received=received,
        )
        if warm is not None:
            warmed = await self._warm(call)
            if isinstance(warmed, HTTPError):
                self.metrics.answered(warmed.status, None)
                return error_reply(warmed)
            if warmed is not None:
                self.metrics.answered(200, None)
                return warm_reply(warm, call.rid, warmed)
        await self._on_request(call)
        worker = self._worker(call)
        reply = ReplyAssembler(received, on_tool=lambda name: self._on_tool(call, name))
        self.metrics.forwarded(time.perf_counter() - received)
        refusal = self.upstream.liveness.refusal(worker)
        if refusal is not None:
            refused = self._failed(call, reply, refusal)
            refused.headers["Retry-After"] = self.upstream.liveness.retry_after
            return refused
        watch = self.upstream.liveness.watch(worker)
        leave = self.upstream.live(worker)  # waiting for its first token (a vLLM worker's gate)
        response: Response | None = None
        try:
            response = await self._forward(request, call, worker, reply, watch, leave)
            return response
        finally:
            if not isinstance(response, Relay):  # a relay ends both when its stream does
                watch.close()
                leave()

    async def _forward(
        self,
        request: Request,
        call: ChatCall,
        worker: str,
        reply: ReplyAssembler,
        watch: Watch,
        leave: Callable[[], None],
    ) -> Response:
        """Send ``call`` to ``worker``; its answer, or the error that ended the wait."""
        stops = (watch.stopped, self.drain.expired)
        try:
            upstream = await until_gone(
                request.receive,
                self.upstream.chat(worker, call.body, session=call.session or call.session_hint),
                stops,
            )
        except ClientGone:
            return self._gone(call, reply)
        except HTTPError as exc:
            return self._failed(call, reply, exc, quiet=True)
        except EngineError as exc:
            return self._failed(call, reply, upstream_error(worker, exc))
        watch.seen()
        content_type = upstream.headers.get("content-type", "")
        if upstream.status_code == 200 and content_type.startswith("text/event-stream"):
            done = lambda: self._finish(call, reply)  # noqa: E731
            return Relay(upstream, worker, reply, done=done, watch=watch, stops=stops, first=leave)
        try:
            raw = await until_gone(request.receive, upstream.aread(), stops)
        except ClientGone:
            return self._gone(call, reply)
        except HTTPError as exc:
            return self._failed(call, reply, exc, quiet=True)
        except httpx.HTTPError as exc:
            return self._failed(call, reply, upstream_error(worker, _error(worker, exc)))
        finally:
            await upstream.aclose()
        reply.status = upstream.status_code
        if upstream.status_code < 400:
            with contextlib.suppress(ValueError):
                reply.add_body(json.loads(raw))
        self._finish(call, reply)
        return Response(
            raw, status_code=upstream.status_code, headers=relayed_headers(upstream.headers)
        )

    # ------------------------------------------------------------------ hooks, never failing

    async def _warm(self, call: ChatCall) -> dict[str, Any] | HTTPError | None:
        try:
            return await self.hooks.warm(call)
        except ContextLengthExceeded as exc:  # cannot fit the model: forwarding cannot either
            log.warning("warm request %s refused: %s", call.rid, one_line(exc))
            return HTTPError(400, str(exc))
        except Exception as exc:
            _hook_failed("hooks.warm", f"request {call.rid} is forwarded", exc)
            return None

    async def _on_request(self, call: ChatCall) -> None:
        try:
            await self.hooks.on_request(call)
        except Exception as exc:
            _hook_failed("hooks.on_request", f"request {call.rid} goes on", exc)

    def _on_tool(self, call: ChatCall, name: str) -> None:
        try:
            self.hooks.on_tool_call(call, name)
        except Exception as exc:
            _hook_failed("hooks.on_tool_call", f"request {call.rid} goes on", exc)

    async def _on_response(self, call: ChatCall, reply: Reply) -> None:
        try:
            await self.hooks.on_response(call, reply)
        except Exception as exc:
            _hook_failed("hooks.on_response", f"request {call.rid}", exc)

    def _worker(self, call: ChatCall) -> str:
        if call.worker is not None and call.worker not in self.upstream.urls:
            log.warning("hooks chose %r, not an upstream; routing by session", call.worker)
            call.worker = None
        if call.worker is None:
            call.worker = self.upstream.worker_for(call.session or call.session_hint, call.rid)
        return call.worker

    def _finish(self, call: ChatCall, assembler: ReplyAssembler) -> None:
        """Count the reply and hand it to ``hooks.on_response`` in the background."""
        reply = assembler.reply()
        self.metrics.answered(reply.status, reply.ttft_s)
        self.background.spawn(self._on_response(call, reply))

    def _failed(
        self, call: ChatCall, assembler: ReplyAssembler, exc: HTTPError, *, quiet: bool = False
    ) -> Response:
        """Answer ``exc``, logged unless ``quiet`` (a failure already logged once for all)."""
        if not quiet:
            log.warning("request %s: %s", call.rid, exc.message)
        assembler.status = exc.status
        self._finish(call, assembler)
        return error_reply(exc)

    def _gone(self, call: ChatCall, assembler: ReplyAssembler) -> Response:
        assembler.status = CLIENT_GONE
        self._finish(call, assembler)
        return Response(status_code=CLIENT_GONE)


def _hook_failed(hook: str, then: str, exc: Exception) -> None:
    """One warning line for what a hook could not use (a body it cannot read, a chat template
    that cannot render it, an upstream failure); a bug's record has a bounded traceback."""
    if isinstance(exc, (ValueError, AgentwarmError)):
        log.warning("%s skipped (%s): %s: %s", hook, then, type(exc).__name__, one_line(exc))
    else:
        log_bug(log, f"{hook} failed ({then})", exc)


def _check_arguments(messages: list[Any]) -> None:
    """A 400 for a tool call's ``arguments`` no template can format (as the workers refuse it;
    the learner would render it too)."""
    try:
        check_tool_arguments(messages)
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None


def _shape(body: Any) -> str:
    if isinstance(body, dict):
        return "an object without a 'messages' list"
    return f"a JSON {type(body).__name__}"
