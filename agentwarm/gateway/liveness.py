"""Whether each worker still answers: the gateway's guard against a worker that hangs (a
frozen process, a stuck host) while its clients wait.

Rules (:class:`Liveness`):

* A worker is watched while requests wait on it (:meth:`Liveness.watch`). Anything it sends
  counts as an answer: the headers or a byte of a reply (:meth:`Watch.seen`), or an answer of
  any status to ``GET /health``. Every ``interval_s`` a worker that answered nothing in the
  last ``interval_s`` is probed (one probe at a time; a probe may take up to ``after_s``, so a
  slow ``/health`` — SGLang's waits for its scheduler — still counts).
* A worker that answered nothing for ``after_s`` seconds while requests waited on it is
  **unresponsive**: those requests are failed (each :attr:`Watch.stopped` resolves to a 504
  naming the worker and the reason; a stream ends with it as an error event and ``[DONE]``),
  one warning is logged, and until it answers a probe again (probed every ``interval_s``)
  :meth:`Liveness.refusal` answers its new requests with a 503 (``Retry-After``) and
  :attr:`Liveness.down` lists it (routing skips it when another worker is up).
* Silence alone never fails a request: a long prefill or a slow non-streamed reply goes on as
  long as the worker answers its probes (``--upstream-timeout`` bounds a single read); nor does
  the gateway's own loop being busy (a probe tick that comes late does not count the delay).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agentwarm.server.http import HTTPError

__all__ = ("HEALTH_INTERVAL_S", "UNRESPONSIVE_AFTER_S", "Liveness", "Watch")

log = logging.getLogger(__name__)

#: How often a silent worker is probed by default.
HEALTH_INTERVAL_S = 5.0
#: How long a worker may answer nothing before its requests fail, by default (with the
#: interval: failed within ~30 s; above SGLang's 20 s ``/health`` timeout).
UNRESPONSIVE_AFTER_S = 25.0

#: ``probe(worker, timeout_s)``: whether the worker answered ``GET /health`` (any status).
Probe = Callable[[str, float], Awaitable[bool]]


@dataclass(slots=True)
class _Worker:
    inflight: int = 0
    last: float = 0.0  # when it last answered anything
    reason: str | None = None  # why it is unresponsive (None: it answers)
    stopped: asyncio.Future[HTTPError] | None = None
    monitor: asyncio.Task[None] | None = None
    probe: asyncio.Task[None] | None = None
    since: float = 0.0  # when it was declared unresponsive


class Watch:
    """One request waiting on ``worker`` (see the module docstring); :meth:`close` it once the
    reply ended, however it ended (a second close does nothing)."""

    def __init__(self, liveness: Liveness, worker: str, state: _Worker) -> None:
        self.worker = worker
        self._liveness = liveness
        self._state = state
        assert state.stopped is not None
        #: Resolves to the error to answer with when the worker is declared unresponsive.
        self.stopped: asyncio.Future[HTTPError] = state.stopped
        self._open = True

    def seen(self) -> None:
        """The worker sent something for this request."""
        self._state.last = self._liveness.clock()

    def close(self) -> None:
        if self._open:
            self._open = False
            self._state.inflight -= 1


class Liveness:
    """The liveness of the workers probed by ``probe`` (see the module docstring)."""

    def __init__(
        self,
        probe: Probe,
        *,
        interval_s: float = HEALTH_INTERVAL_S,
        after_s: float = UNRESPONSIVE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (interval_s > 0 and after_s > 0):
            raise ValueError(f"interval_s and after_s must be > 0, got {interval_s}, {after_s}")
        self.interval_s = interval_s
        self.after_s = after_s
        self.clock = clock
        self._probe = probe
        self._workers: dict[str, _Worker] = {}

    @property
    def down(self) -> frozenset[str]:
        """The workers known to be unresponsive now."""
        return frozenset(w for w, s in self._workers.items() if s.reason is not None)

    def watch(self, worker: str) -> Watch:
        """A request now waits on ``worker`` (call inside the event loop)."""
        state = self._workers.setdefault(worker, _Worker())
        if state.stopped is None or (state.stopped.done() and state.reason is None):
            state.stopped = asyncio.get_running_loop().create_future()
        if state.monitor is None:
            state.last = self.clock()  # silence counts from when requests wait on it
            state.monitor = asyncio.ensure_future(self._monitor(worker, state))
        state.inflight += 1
        return Watch(self, worker, state)

    def refusal(self, worker: str) -> HTTPError | None:
        """The 503 for a new request to ``worker`` while it is unresponsive; else ``None``."""
        state = self._workers.get(worker)
        if state is None or state.reason is None:
            return None
        silent = self.clock() - state.since + self.after_s
        return HTTPError(
            503,
            f"upstream {worker} is not answering ({state.reason}; silent for {silent:.0f} s): "
            "retry later",
            "ServiceUnavailableError",
        )

    @property
    def retry_after(self) -> str:
        """The ``Retry-After`` of a :meth:`refusal` (whole seconds: the probe interval)."""
        return str(max(1, math.ceil(self.interval_s)))

    async def aclose(self) -> None:
        """Stop probing."""
        tasks = [t for s in self._workers.values() for t in (s.monitor, s.probe) if t]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ------------------------------------------------------------------------------------

    async def _monitor(self, worker: str, state: _Worker) -> None:
        try:
            while state.inflight > 0 or state.reason is not None:
                before = self.clock()
                await asyncio.sleep(self.interval_s)
                late = self.clock() - before - self.interval_s
                if late > self.interval_s:  # this loop was busy: that is not the worker's silence
                    state.last += late
                silent = self.clock() - state.last
                if state.probe is None and (silent >= self.interval_s or state.reason):
                    state.probe = asyncio.ensure_future(self._ask(worker, state))
                if state.reason is None and silent >= self.after_s and state.inflight > 0:
                    self._declare(worker, state)
        finally:
            state.monitor = None
            if state.probe is not None:
                state.probe.cancel()
                state.probe = None

    async def _ask(self, worker: str, state: _Worker) -> None:
        try:
            answered = await self._probe(worker, self.after_s)
        except Exception as exc:  # a probe must never kill the monitor
            log.warning("probing %s failed: %s", worker, exc)
            answered = False
        finally:
            state.probe = None
        if answered:
            state.last = self.clock()
            if state.reason is not None:
                log.warning("upstream %s answers again: routing to it resumes", worker)
                state.reason = None

    def _declare(self, worker: str, state: _Worker) -> None:
        state.reason = f"no reply and no answer to GET /health for {self.after_s:g} s"
        state.since = self.clock()
        log.warning(
            "upstream %s stopped answering (%s): failing its %d request(s) in flight; new "
            "ones go to another worker or get 503 until it answers",
            worker,
            state.reason,
            state.inflight,
        )
        error = HTTPError(
            504,
            f"upstream {worker} stopped answering ({state.reason}); the request was failed",
            "GatewayTimeout",
        )
        assert state.stopped is not None
        if not state.stopped.done():
            state.stopped.set_result(error)
