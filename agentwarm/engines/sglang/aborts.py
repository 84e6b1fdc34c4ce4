"""Aborts of an SGLang client: which requests are in flight, which of them were aborted.

* A request whose rid was aborted here is reported as aborted whatever the server answers
  (SGLang versions answer an aborted request with 200 and an abort ``finish_reason``, or with a
  400/500 error): :meth:`AbortTracker.check`.
* An abort can overtake its request on the wire (the server does not know the rid yet and ignores
  it); while the aborted request is still in flight here, the abort is re-sent a few times. Only
  while *that* request is: a later request that reuses the rid is not aborted by a late re-send.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from agentwarm.engines.sglang.connection import Connection
from agentwarm.errors import EngineError, RequestAborted

__all__ = ("AbortTracker",)

#: Delays (s) after which an abort of a request still in flight is sent again.
ABORT_RESEND_S = (0.05, 0.2, 1.0)


class AbortTracker:
    """The in-flight requests of one client on ``http`` and the aborts it sent."""

    def __init__(self, http: Connection) -> None:
        self._http = http
        self._pending: dict[str, int] = {}
        self._aborted: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()

    @contextlib.contextmanager
    def tracking(self, rid: str) -> Iterator[None]:
        """Mark ``rid`` in flight for the duration of the block."""
        self._pending[rid] = self._pending.get(rid, 0) + 1
        try:
            yield
        finally:
            left = self._pending.pop(rid) - 1
            if left:
                self._pending[rid] = left
            else:
                self._aborted.discard(rid)

    def aborted(self, rid: str) -> bool:
        """``rid`` is in flight and was aborted here."""
        return rid in self._aborted

    def check(self, rid: str, exc: EngineError) -> None:
        """Raise :class:`~agentwarm.errors.RequestAborted` for ``exc`` if ``rid`` was aborted."""
        if rid in self._aborted and not isinstance(exc, RequestAborted):
            raise RequestAborted(f"{self._http.url}: request {rid} aborted ({exc})") from exc

    async def abort(self, rid: str) -> None:
        """``POST /abort_request``, re-sent while ``rid`` is in flight (see the module doc)."""
        self._http.check_open()
        if rid in self._pending:
            self._aborted.add(rid)
        if not self._http.abort_supported:
            return
        await self._http.abort_request(rid)
        if rid in self._pending:
            task = asyncio.get_running_loop().create_task(self._resend(rid))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _resend(self, rid: str) -> None:
        for delay in ABORT_RESEND_S:
            await asyncio.sleep(delay)
            if rid not in self._aborted or self._http.closed:
                return  # the aborted request ended (a later one may reuse its rid)
            with contextlib.suppress(EngineError):
                await self._http.abort_request(rid)

    async def aclose(self) -> None:
        """Stop re-sending aborts."""
        background = list(self._background)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
