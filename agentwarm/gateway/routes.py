"""``POST /v1/chat/completions`` of the gateway: forward the body unchanged, call the hooks
around it (the rules are in :mod:`agentwarm.gateway.app`).

A request's life: read and check the body → :class:`~agentwarm.gateway.types.ChatCall` →
``hooks.on_request`` → pick the worker → forward (the overhead is measured here) → the upstream's
answer to the client (a stream relayed event by event by :class:`Relay`, while
:class:`~agentwarm.gateway.streams.ReplyAssembler` reads it) → ``hooks.on_response`` in the
background. A client that goes away closes the upstream request, which aborts it there. A warm
request (``max_tokens: 0``) is checked and answered as :mod:`agentwarm.gateway.warm` says.

The answer keeps the upstream's status, body and the headers a client reads
(:func:`relayed_headers`: ``content-type``, ``retry-after`` and ``retry-after-ms``,
``x-should-retry``, ``x-request-id``, ``x-ratelimit-*``, ``ratelimit-*``, ``openai-*``), on a
stream too; no other header (hop-by-hop ones, ``content-length`` and ``content-encoding``, which
describe the gateway's own framing, cookies, the upstream's ``server``) is passed on.

A body that is not JSON, nests too deeply or holds a lone surrogate
(:func:`~agentwarm.server.http.read_json`), has no ``messages`` list, or has a tool call whose
``arguments`` no template can format (:func:`~agentwarm.chat.check_tool_arguments`) is answered
400 here, before any hook. What a hook cannot use logs one warning line; a hook's bug, one
record with a bounded traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agentwarm.chat import check_tool_arguments
from agentwarm.engines.base import new_rid
from agentwarm.engines.sglang.errors import transport_error
from agentwarm.errors import (
    AgentwarmError,
    ContextLengthExceeded,
    EngineError,
    EngineTimeout,
    InvalidRequest,
)
from agentwarm.gateway.metrics import GatewayMetrics
from agentwarm.gateway.streams import ReplyAssembler, SSEReader
from agentwarm.gateway.types import NODE_HEADER, SESSION_HEADER, ChatCall, Hooks, Reply
from agentwarm.gateway.upstream import CHAT_PATH, Upstream
from agentwarm.gateway.warm import warm_reply, warm_request
from agentwarm.server.http import HTTPError, error_reply, log_bug, one_line, read_json
from agentwarm.server.sse import disconnected, sse

__all__ = (
    "CLIENT_GONE",
    "Background",
    "ChatProxy",
    "relayed_headers",
    "session_hint",
    "upstream_error",
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The status a reply is counted with when its client went away first (nginx's convention).
CLIENT_GONE = 499
_DONE = b"data: [DONE]\n\n"
#: The upstream's reply headers a client reads (see the module docstring), by name or prefix.
_RELAYED_HEADERS = frozenset(
    {"content-type", "retry-after", "retry-after-ms", "x-should-retry", "x-request-id"}
)
_RELAYED_PREFIXES = ("x-ratelimit-", "ratelimit-", "openai-")


class ClientGone(Exception):
    """The client disconnected before its reply was ready."""


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


def relayed_headers(headers: httpx.Headers) -> dict[str, str]:
    """The headers of an upstream's reply that go on to the client (module docstring)."""
    return {
        name: value
        for name, value in headers.multi_items()
        if name in _RELAYED_HEADERS or name.startswith(_RELAYED_PREFIXES)
    }


def upstream_error(worker: str, exc: EngineError) -> HTTPError:
    """The reply to a failure to reach ``worker``: 504 when it did not answer in time, 400 for
    a body that cannot be sent, else 502; the message names the worker (without credentials)
    and the failure."""
    if isinstance(exc, InvalidRequest):
        return HTTPError(400, str(exc))
    if isinstance(exc, EngineTimeout):
        return HTTPError(504, f"upstream {worker} did not answer in time: {exc}", "GatewayTimeout")
    return HTTPError(502, f"upstream {worker} failed: {exc}", "BadGatewayError")


async def until_gone(receive: Receive, work: Awaitable[T]) -> T:
    """``await work``, unless the client disconnects first: then ``work`` is cancelled (which
    closes its upstream connection) and :class:`ClientGone` raised."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(disconnected(receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        await asyncio.wait({task})
        raise ClientGone
    return task.result()


class ChatProxy:
    """The chat route of one gateway app."""

    def __init__(
        self,
        upstream: Upstream,
        hooks: Hooks,
        metrics: GatewayMetrics,
        background: Background,
        max_request_bytes: int,
    ) -> None:
        self.upstream = upstream
        self.hooks = hooks
        self.metrics = metrics
        self.background = background
        self.max_request_bytes = max_request_bytes

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
        try:
            upstream = await until_gone(
                request.receive,
                self.upstream.chat(worker, body, session=call.session or call.session_hint),
            )
        except ClientGone:
            return self._gone(call, reply)
        except EngineError as exc:
            return self._failed(call, reply, upstream_error(worker, exc))
        content_type = upstream.headers.get("content-type", "")
        if upstream.status_code == 200 and content_type.startswith("text/event-stream"):
            return Relay(upstream, worker, reply, done=lambda: self._finish(call, reply))
        try:
            raw = await until_gone(request.receive, upstream.aread())
        except ClientGone:
            return self._gone(call, reply)
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

    def _failed(self, call: ChatCall, assembler: ReplyAssembler, exc: HTTPError) -> Response:
        log.warning("request %s: %s", call.rid, exc.message)
        assembler.status = exc.status
        self._finish(call, assembler)
        return error_reply(exc)

    def _gone(self, call: ChatCall, assembler: ReplyAssembler) -> Response:
        assembler.status = CLIENT_GONE
        self._finish(call, assembler)
        return Response(status_code=CLIENT_GONE)


class Relay(Response):
    """The upstream's event stream, relayed to the client chunk by chunk as it arrives and
    read by ``assembler`` on the way. A failure of the upstream mid-stream ends the stream with
    an ``{"error": ...}`` event and ``[DONE]``; a client that goes away closes the upstream
    request. ``done`` runs once, when the stream ended however it ended."""

    media_type = "text/event-stream"

    def __init__(
        self,
        upstream: httpx.Response,
        worker: str,
        assembler: ReplyAssembler,
        *,
        done: Callable[[], None],
    ) -> None:
        self.upstream = upstream
        self.worker = worker
        self.assembler = assembler
        self.done = done
        self.status_code = 200
        self.background = None
        self.init_headers({**relayed_headers(upstream.headers), "Cache-Control": "no-cache"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump = asyncio.ensure_future(self._pump(send))
        gone = asyncio.ensure_future(disconnected(receive))
        try:
            await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not pump.done():
                pump.cancel()
                self.assembler.status = CLIENT_GONE
            with anyio.CancelScope(shield=True):
                await asyncio.wait({pump})
                await self.upstream.aclose()
            if not pump.cancelled() and pump.exception() is not None:
                log.error("relaying a stream failed", exc_info=pump.exception())
            self.done()

    async def _pump(self, send: Send) -> None:
        reader = SSEReader()
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            try:
                async for chunk in self.upstream.aiter_bytes():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    for data in reader.feed(chunk):
                        self.assembler.add_event(data)
            except httpx.HTTPError as exc:
                error = upstream_error(self.worker, _error(self.worker, exc))
                log.warning("stream cut: %s", error.message)
                self.assembler.status = error.status
                tail = (b"\n\n" if reader.mid_event else b"") + sse(error.body())
                await send(
                    {
                        "type": "http.response.body",
                        "body": tail + b"data: [DONE]\n\n",
                        "more_body": True,
                    }
                )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away while we wrote to it
            self.assembler.status = CLIENT_GONE


def _error(worker: str, exc: httpx.HTTPError) -> EngineError:
    return transport_error(exc, worker + CHAT_PATH)


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
