"""The requests one :class:`~agentwarm.engines.vllm.VLLMEngine` has in flight, how they are
aborted, and the gate that keeps speculation behind live requests.

* vLLM aborts a request whose client disconnects (within about a second): an abort here cancels
  the task reading that request's stream, which closes its connection. A chunked prefill is one
  :class:`Flight` across its chunks; an abort also stops it between chunks.
* :class:`LiveGate` counts this engine's live requests that have not had their first token yet
  ("waiting"). vLLM does not preempt a running prefill for a higher-priority arrival, so the
  next chunk of a speculative prefill is sent only while none is waiting: a live request waits
  behind at most the one chunk already running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

__all__ = ("Flight", "Flights", "LiveGate")


class Flight:
    """One request (or one chunked prefill) in flight under ``rid``."""

    __slots__ = ("aborted", "rid", "task")

    def __init__(self, rid: str) -> None:
        self.rid = rid
        self.aborted = False
        #: The task reading the current HTTP stream of this request, while there is one.
        self.task: asyncio.Task[None] | None = None

    def abort(self) -> None:
        self.aborted = True
        if self.task is not None:
            self.task.cancel()


class Flights:
    """The flights of one engine by rid (a rid may be reused once its request is over)."""

    def __init__(self) -> None:
        self._by_rid: dict[str, list[Flight]] = {}

    @contextlib.contextmanager
    def tracking(self, rid: str) -> Iterator[Flight]:
        flight = Flight(rid)
        self._by_rid.setdefault(rid, []).append(flight)
        try:
            yield flight
        finally:
            flights = self._by_rid.get(rid, [])
            if flight in flights:
                flights.remove(flight)
            if not flights:
                self._by_rid.pop(rid, None)

    def abort(self, rid: str) -> None:
        """Abort every flight of ``rid``; an unknown rid is ignored."""
        for flight in list(self._by_rid.get(rid, ())):
            flight.abort()

    def abort_all(self) -> None:
        for rid in list(self._by_rid):
            self.abort(rid)


class LiveGate:
    """Live requests of one engine that have not had their first token yet."""

    def __init__(self) -> None:
        self._waiting = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def waiting(self) -> int:
        return self._waiting

    def enter(self) -> None:
        self._waiting += 1
        self._idle.clear()

    def leave(self) -> None:
        self._waiting -= 1
        if self._waiting == 0:
            self._idle.set()

    async def idle(self) -> None:
        """Return once no live request is waiting."""
        while self._waiting:
            await self._idle.wait()


def next_chunk_end(done: int, total: int, *, block: int, chunk: int) -> int:
    """Where the next request of a chunked prefill of ``total`` ids ends, the first ``done``
    (a whole number of blocks) cached: ``chunk`` more tokens rounded down to whole blocks (at
    least one), **plus one token**, and never past ``total``.

    vLLM recomputes the last token of a prompt even when it is cached, and caches whole blocks
    only: a request of ``m`` blocks + 1 token caches all ``m`` blocks, and the next request
    reuses them and recomputes just that one token (a block-aligned end would make it recompute
    a whole block)."""
    return min(total, (done + max(chunk, block)) // block * block + 1)
