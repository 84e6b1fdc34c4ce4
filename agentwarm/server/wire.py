"""What ``agentwarm serve`` and ``agentwarm gateway`` answer a request their HTTP parser refuses.

uvicorn's h11 protocol answers any unparsable request with a plain-text 400 and closes the
socket at once, while the client may still be sending: a request whose head (request line and
headers) is over the parser's limit then gets a TCP reset instead of an answer, as the kernel
discards the unread bytes. :class:`LimitedH11Protocol` (the servers' ``http`` protocol, see
:func:`~agentwarm.server.run.serve_app`) answers instead with the status h11 hints — **431** for
a head over :data:`MAX_HEAD_BYTES` — as the servers' JSON error, naming the limit and the fix,
then closes gracefully: it half-closes its side and reads (and drops) what the client still
sends, for up to :data:`LINGER_S` seconds or :data:`LINGER_BYTES` bytes, so that the answer
arrives. uvicorn logs one warning line per refusal (``Invalid HTTP request received.``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ("LINGER_BYTES", "LINGER_S", "MAX_HEAD_BYTES", "LimitedH11Protocol", "refusal")

#: The longest request head (request line and headers) the servers parse: uvicorn's default.
MAX_HEAD_BYTES = 16 * 1024
#: How long a refused connection is read (and dropped) before it is closed.
LINGER_S = 2.0
#: How much of a refused connection is read (and dropped) before it is closed.
LINGER_BYTES = 8 << 20


def refusal(status: int, detail: str) -> tuple[str, str]:
    """``(message, type)`` of the JSON error for a request the parser refused with ``status``
    (h11's ``detail``)."""
    if status == 431:
        return (
            f"request line and headers over {MAX_HEAD_BYTES} bytes, this server's limit: send "
            "shorter headers (a session, node or routing-key header takes an id of at most a "
            "few hundred bytes, not a payload)",
            "RequestHeaderFieldsTooLargeError",
        )
    return f"invalid HTTP request: {detail}", "BadRequestError"


class _Connection(h11.Connection):
    """h11's server connection, keeping the first protocol error it raised (its
    ``error_status_hint`` is 431 for a head over the size limit)."""

    error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            if self.error is None:
                self.error = exc
            raise


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, answering what it cannot parse as described in the module
    docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = self.config.h11_max_incomplete_event_size or MAX_HEAD_BYTES
        self.conn = _Connection(h11.SERVER, max_incomplete_event_size=limit)
        self._linger: asyncio.TimerHandle | None = None
        self._dropped = 0

    def send_400_response(self, msg: str) -> None:
        error = self.conn.error if isinstance(self.conn, _Connection) else None
        status = error.error_status_hint if error is not None else 400
        message, kind = refusal(status, str(error or msg))
        body = json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            for event in (
                h11.Response(status_code=status, headers=headers),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event) or b"")
        except h11.LocalProtocolError:  # a response had started: nothing more can be said
            self.transport.close()
            return
        self._start_lingering()

    def _start_lingering(self) -> None:
        self._linger = self.loop.call_later(LINGER_S, self.transport.close)
        if self.transport.can_write_eof():
            self.transport.write_eof()

    def data_received(self, data: bytes) -> None:
        if self._linger is None:
            super().data_received(data)
            return
        self._dropped += len(data)
        if self._dropped > LINGER_BYTES:
            self.transport.close()

    def eof_received(self) -> None:
        if self._linger is not None:
            self.transport.close()  # the client has sent everything and read the answer
            return
        super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)
