"""Server-sent events for ``POST /generate`` with ``stream: true``, and the client-disconnect
watch that aborts a request whose client went away."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ("DRAIN_AFTER_ABORT_S", "SSEResponse", "disconnected", "sse")

F = TypeVar("F", bound="asyncio.Future[Any]")

#: How long an aborted stream may take to report its outcome.
DRAIN_AFTER_ABORT_S = 10.0


def sse(payload: Mapping[str, Any]) -> bytes:
    """One ``data: {json}`` event."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def disconnected(receive: Receive) -> None:
    """Return when the client disconnects."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class SSEResponse(Response):
    """Streams ``events``; if the client goes away first, calls ``abort`` and drains the stream
    until it reports the aborted request (for the metrics), for up to ``DRAIN_AFTER_ABORT_S``,
    then closes it.

    Starlette's ``StreamingResponse`` leaves a generator suspended at ``yield`` to the garbage
    collector when the client disconnects; a prefill must be aborted at once instead.
    """

    media_type = "text/event-stream"

    def __init__(
        self, events: AsyncIterator[bytes], *, abort: Callable[[], Awaitable[None]]
    ) -> None:
        self.events = events
        self.abort = abort
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        gone = _quiet(asyncio.ensure_future(disconnected(receive)))
        events = self.events.__aiter__()
        try:
            while True:
                step = _quiet(asyncio.ensure_future(events.__anext__()))
                await asyncio.wait({step, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    await self._abort_and_drain(events, step)
                    return
                try:
                    chunk = step.result()
                except StopAsyncIteration:
                    break
                try:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except OSError:
                    await self._abort_and_drain(events, None)
                    return
            gone.cancel()
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await events.aclose()  # type: ignore[attr-defined]

    async def _abort_and_drain(
        self, events: AsyncIterator[bytes], step: asyncio.Future[bytes] | None
    ) -> None:
        """Abort the request, then read and drop the rest of ``events`` (tokens decoded before the
        abort took effect, then the aborted outcome, which records the request) until they end or
        ``DRAIN_AFTER_ABORT_S`` passes; ``step`` is a read already in progress."""
        await self.abort()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_AFTER_ABORT_S
        while True:
            if step is None:
                step = _quiet(asyncio.ensure_future(events.__anext__()))
            done, _ = await asyncio.wait({step}, timeout=max(0.0, deadline - loop.time()))
            if not done:
                step.cancel()
                with contextlib.suppress(BaseException):
                    await step
                return
            if step.cancelled() or step.exception() is not None:  # StopAsyncIteration: the end
                return
            step = None


def _quiet(fut: F) -> F:
    """``fut``, whose exception is marked as retrieved when nobody awaits it (no "Future
    exception was never retrieved" in the log for an abandoned read)."""
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())
    return fut
