"""The upstream's reply on its way to the client: :func:`until_gone` waits for it (unless the
client goes away, or a stop comes first), :class:`Relay` relays a stream event by event, and
:func:`upstream_error` says what a failure of the worker is answered with.

Rules: a client that goes away cancels the wait (which closes the upstream request, aborting it
there) and is counted as :data:`CLIENT_GONE`; a stop — the worker declared unresponsive
(:class:`~agentwarm.gateway.liveness.Liveness`), the shutdown grace over
(:class:`~agentwarm.server.drain.Drain`) — resolves to the :class:`~agentwarm.server.http.
HTTPError` to answer with; a stream that fails or is stopped mid-way ends with its error as an
``{"error": ...}`` event and ``data: [DONE]``, never cut.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentwarm.engines.sglang.errors import transport_error
from agentwarm.errors import EngineError, EngineTimeout, InvalidRequest
from agentwarm.gateway.liveness import Watch
from agentwarm.gateway.streams import ReplyAssembler, SSEReader
from agentwarm.gateway.upstream import CHAT_PATH
from agentwarm.server.http import HTTPError
from agentwarm.server.sse import disconnected, sse

__all__ = (
    "CLIENT_GONE",
    "ClientGone",
    "Relay",
    "chat_error",
    "relayed_headers",
    "until_gone",
    "upstream_error",
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The status a reply is counted with when its client went away first (nginx's convention).
CLIENT_GONE = 499
_DONE = b"data: [DONE]\n\n"
#: The upstream's reply headers a client reads, by name or prefix (:func:`relayed_headers`).
_RELAYED_HEADERS = frozenset(
    {"content-type", "retry-after", "retry-after-ms", "x-should-retry", "x-request-id"}
)
_RELAYED_PREFIXES = ("x-ratelimit-", "ratelimit-", "openai-")


class ClientGone(Exception):
    """The client disconnected before its reply was ready."""


def relayed_headers(headers: httpx.Headers) -> dict[str, str]:
    """The headers of an upstream's reply that go on to the client: ``content-type``,
    ``retry-after`` (``-ms``), ``x-should-retry``, ``x-request-id``, ``x-ratelimit-*``,
    ``ratelimit-*``, ``openai-*``; not hop-by-hop ones, nor the framing (``content-length``,
    ``content-encoding``), cookies or ``server``."""
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


async def until_gone(
    receive: Receive, work: Awaitable[T], stops: Iterable[asyncio.Future[HTTPError]] = ()
) -> T:
    """``await work``, unless the client disconnects first or one of ``stops`` resolves
    first: then ``work`` is cancelled (which closes its upstream connection) and
    :class:`ClientGone` raised, or the stop's :class:`HTTPError`."""
    stops = tuple(stops)
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(disconnected(receive))
    try:
        waiting: set[asyncio.Future[Any]] = {task, gone, *stops}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        await asyncio.wait({task})
        stopped = next((stop.result() for stop in stops if stop.done()), None)
        if stopped is not None:
            raise stopped
        raise ClientGone
    return task.result()


class Relay(Response):
    """The upstream's event stream, relayed to the client chunk by chunk as it arrives and
    read by ``assembler`` on the way (each chunk is news of the worker for ``watch``). A failure
    of the upstream mid-stream, or one of ``stops`` resolving first, ends the stream with an
    ``{"error": ...}`` event and ``[DONE]``; a client that goes away closes the upstream
    request. ``first`` runs once, at the first chunk from the upstream or when the stream
    ends without one; ``done`` runs once (and ``watch`` is closed), when the stream ended
    however it ended."""

    media_type = "text/event-stream"

    def __init__(
        self,
        upstream: httpx.Response,
        worker: str,
        assembler: ReplyAssembler,
        *,
        done: Callable[[], None],
        watch: Watch | None = None,
        stops: Sequence[asyncio.Future[HTTPError]] = (),
        first: Callable[[], None] = lambda: None,
    ) -> None:
        self.upstream = upstream
        self.first = first
        self.worker = worker
        self.assembler = assembler
        self.done = done
        self.watch = watch
        self.stops = tuple(stops)
        self.status_code = 200
        self.background = None
        self.init_headers({**relayed_headers(upstream.headers), "Cache-Control": "no-cache"})
        self._reader = SSEReader()
        self._started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump = asyncio.ensure_future(self._pump(send))
        gone = asyncio.ensure_future(disconnected(receive))
        stopped: HTTPError | None = None
        try:
            waiting: set[asyncio.Future[Any]] = {pump, gone, *self.stops}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if not pump.done() and not gone.done():
                stopped = next((stop.result() for stop in self.stops if stop.done()), None)
        finally:
            gone.cancel()
            if not pump.done():
                pump.cancel()
                self.assembler.status = CLIENT_GONE
            with anyio.CancelScope(shield=True):
                await asyncio.wait({pump})
                await self.upstream.aclose()
                if stopped is not None:
                    await self._end(send, stopped)
            if not pump.cancelled() and pump.exception() is not None:
                log.error("relaying a stream failed", exc_info=pump.exception())
            self.first()
            if self.watch is not None:
                self.watch.close()
            self.done()

    async def _pump(self, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            self._started = True
            try:
                async for chunk in self.upstream.aiter_bytes():
                    self.first()
                    if self.watch is not None:
                        self.watch.seen()
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    for data in self._reader.feed(chunk):
                        self.assembler.add_event(data)
            except httpx.HTTPError as exc:
                error = upstream_error(self.worker, chat_error(self.worker, exc))
                log.warning("stream cut: %s", error.message)
                await self._end(send, error)
                return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away while we wrote to it
            self.assembler.status = CLIENT_GONE

    async def _end(self, send: Send, error: HTTPError) -> None:
        """End the stream with ``error`` as an event, then ``[DONE]``."""
        self.assembler.status = error.status
        tail = (b"\n\n" if self._reader.mid_event else b"") + sse(error.body()) + _DONE
        try:
            if not self._started:
                start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                await send(start)
                self._started = True
            await send({"type": "http.response.body", "body": tail, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away while we wrote to it
            self.assembler.status = CLIENT_GONE


def chat_error(worker: str, exc: httpx.HTTPError) -> EngineError:
    """The error of an httpx failure of ``worker``'s chat endpoint."""
    return transport_error(exc, worker + CHAT_PATH)
