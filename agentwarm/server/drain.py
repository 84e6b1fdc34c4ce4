"""Draining a server at shutdown: what a route needs to end its in-flight requests properly
instead of having them cut.

At SIGINT/SIGTERM :func:`~agentwarm.server.run.serve_app` stops accepting connections and calls
:meth:`Drain.begin`; requests in flight go on for ``grace_s`` seconds, then
:attr:`Drain.expired` resolves to a 503 that routes answer the requests still running with (a
JSON error, or an SSE error event and ``[DONE]``). uvicorn itself waits
``grace_s + MARGIN_S`` before it cancels what is left, so the errors have time to go out.
"""

from __future__ import annotations

import asyncio
import logging

from agentwarm.server.http import HTTPError

__all__ = ("MARGIN_S", "Drain")

log = logging.getLogger(__name__)

#: How long after the grace uvicorn waits before cancelling the requests still running.
MARGIN_S = 2.0


class Drain:
    """The shutdown of one server: in-flight requests get ``grace_s`` seconds to finish."""

    def __init__(self, grace_s: float) -> None:
        if grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s}")
        self.grace_s = grace_s
        self._expired: asyncio.Future[HTTPError] | None = None
        self.started = False

    @property
    def expired(self) -> asyncio.Future[HTTPError]:
        """Resolves, ``grace_s`` after :meth:`begin`, to the 503 for the requests still running
        (call inside the server's event loop)."""
        if self._expired is None:
            self._expired = asyncio.get_running_loop().create_future()
        return self._expired

    def begin(self) -> None:
        """The server stopped accepting: the grace starts (a second call does nothing)."""
        if self.started:
            return
        self.started = True
        asyncio.get_running_loop().call_later(self.grace_s, self._expire)

    def _expire(self) -> None:
        error = HTTPError(
            503,
            f"the server is shutting down and the request did not finish within the "
            f"{self.grace_s:g} s shutdown grace: retry it",
            "ServiceUnavailableError",
        )
        if not self.expired.done():
            self.expired.set_result(error)
