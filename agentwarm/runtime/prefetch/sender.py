"""Sending and stopping one run's prefill requests (speculative ones through admission).

A request is a task that waits for what it must follow (a running hit, the end of the slot it
took over), then prefills; stopping it cancels it before it reaches the engine, or aborts it
there. Nothing here raises into the workflow: a failed request is logged and marked failed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agentwarm.engines.base import Engine, PrefillResult, Priority, new_rid
from agentwarm.runtime.prefetch.state import Prefetch, Request

if TYPE_CHECKING:
    from agentwarm.runtime.admission import RunAdmission

__all__ = ("Sender",)

log = logging.getLogger(__name__)


class Sender:
    """Starts, stops and aborts the prefill requests of one run on one engine; owns the aborts
    still running (``background``). ``on_prefill(tokens, seconds)`` hears of each prefill that
    finished (not aborted) having computed ``tokens`` in ``seconds``: its service time, from its
    send or the end of the run's previous prefill, whichever came later (the engine serves a
    run's speculative prefills first come, first served: a wait behind the run's own earlier
    prefill is not this one's time). A prefill during which the run made a live call
    (:meth:`live`) is not heard of: the live request preempted it, and its time is the live
    request's, not a measure of prefill throughput."""

    def __init__(
        self,
        *,
        engine: Engine,
        admission: RunAdmission,
        namespace: str,
        run_id: str,
        timeout_s: float,
        on_prefill: Callable[[int, float], None] | None = None,
    ) -> None:
        self.engine = engine
        self.admission = admission
        self.namespace = namespace
        self.run_id = run_id
        self.timeout_s = timeout_s
        self.on_prefill = on_prefill
        self.background: set[asyncio.Task[Any]] = set()
        self.failures = 0
        self._live_calls = 0
        self._last_end = -math.inf

    def live(self) -> None:
        """The run makes a live call now: a prefill still running is no throughput sample."""
        self._live_calls += 1

    def submit(
        self,
        pf: Prefetch,
        ids: list[int],
        priority: int,
        after: asyncio.Task[Any] | None = None,
        key: int = 0,
        replace: Request | None = None,
        work: int | None = None,
    ) -> Request | None:
        """Start a request for ``ids``; a speculative one only if admission admits it now
        (``None`` otherwise: it is dropped, never queued). ``work``: the tokens its prefill is
        expected to compute (admission's ``work_in_flight``; default all of ``ids``)."""
        req = Request(rid=new_rid(), ids_len=len(ids), key=key, credit=pf)
        if priority < Priority.LIVE:  # speculation is admitted per engine, confirmed warm-ups not
            ticket = self.admission.try_acquire(
                value=pf.record.probability,
                tokens=len(ids),
                stop=lambda: self.stop(req),  # preempted for a likelier prefetch
                replace=replace.ticket if replace is not None else None,
                work=work,
            )
            if ticket is None:
                return None
            req.ticket = ticket
        req.task = asyncio.get_running_loop().create_task(
            self._prefill(pf, req, ids, priority, after)
        )
        if req.ticket is not None:
            held = req.ticket
            req.task.add_done_callback(lambda _: self.admission.release(held))
        pf.requests.append(req)
        pf.record.tokens = max(pf.record.tokens, len(ids))
        pf.record.requests += 1
        return req

    async def _prefill(
        self,
        pf: Prefetch,
        req: Request,
        ids: list[int],
        priority: int,
        after: asyncio.Task[Any] | None,
    ) -> PrefillResult | None:
        try:
            if after is not None:
                await asyncio.wait([after])
            if req.ticket is not None and req.ticket.after is not None:
                # This request took over the slot of one being stopped: send once it has ended.
                await asyncio.wait([req.ticket.after])
            if req.dropped:
                return None
            req.sent = True
            started = time.perf_counter()
            live_calls = self._live_calls
            result = await asyncio.wait_for(
                self.engine.prefill(
                    ids,
                    priority=priority,
                    rid=req.rid,
                    namespace=self.namespace,
                    session=self.run_id,
                ),
                timeout=self.timeout_s,
            )
        except asyncio.CancelledError:
            req.dropped = True
            raise
        except Exception as exc:
            req.failed = True
            self.failures += 1
            log.warning(
                "prefetch of %r failed (%s: %s); the workflow continues without it",
                pf.record.target,
                type(exc).__name__,
                exc,
            )
            if isinstance(exc, TimeoutError):
                self.spawn(self._quiet_abort(req.rid))
            return None
        req.result = result
        ended = time.perf_counter()
        served_from = max(started, self._last_end)
        self._last_end = ended
        if (
            self.on_prefill is not None
            and result.done
            and result.computed_tokens > 0
            and live_calls == self._live_calls
        ):
            self.on_prefill(result.computed_tokens, ended - served_from)
        return result

    def stop(self, req: Request) -> None:
        """Stop a request: cancel it before it reaches the engine, else abort it there."""
        if not req.running or req.stopping:
            return
        req.stopping = True
        if not req.sent:
            req.dropped = True
            assert req.task is not None
            req.task.cancel()
            if req.ticket is not None:
                # Its slot is free now (it never reached the engine): a request that took the
                # slot over need not wait a loop turn for the cancellation.
                self.admission.release(req.ticket)
        else:
            self.spawn(self._quiet_abort(req.rid))

    async def _quiet_abort(self, rid: str) -> None:
        try:
            await self.engine.abort(rid)
        except Exception as exc:
            log.debug("abort of %s failed: %s", rid, exc)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    async def cancel_background(self) -> None:
        """Cancel the aborts still running and wait for them to end."""
        leftover = list(self.background)
        for t in leftover:
            t.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)
