"""Settling prefetches: each one's outcome, computed tokens, counters and span, fixed once its
requests have ended (now when they have, else from their done callbacks; never waited for)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agentwarm import telemetry as tm
from agentwarm._spec import PrefetchKind, PrefetchOutcome
from agentwarm.runtime.prefetch.rules import computed_tokens, outcome
from agentwarm.runtime.prefetch.state import Prefetch

__all__ = ("Settler",)


class Settler:
    """Settles the prefetches of one run; ``on_error(exc, what, *args)`` is told of a failure
    to settle one (which still ends its span)."""

    def __init__(
        self,
        *,
        workflow: str,
        instruments: tm.Instruments,
        on_error: Callable[..., None],
    ) -> None:
        self.workflow = workflow
        self._instruments = instruments
        self._on_error = on_error
        self._unsettled: dict[Prefetch, bool] = {}  # waiting for requests: hit or not

    def settle(self, pf: Prefetch, *, hit: bool) -> None:
        """Fix ``pf``'s outcome and end its span once its requests have ended: now if they
        have (no task, no wait), else from their done callbacks."""
        pending = [t for t in pf.tasks() if not t.done()]
        if not pending:
            self.finish(pf, hit=hit)
            return
        self._unsettled[pf] = hit
        left = len(pending)

        def one_done(_: object) -> None:
            nonlocal left
            left -= 1
            if left == 0:
                self.finish(pf, hit=hit)

        for task in pending:
            task.add_done_callback(one_done)

    def finish(self, pf: Prefetch, *, hit: bool) -> None:
        """Final outcome, computed tokens and span end of ``pf`` (once; never raises)."""
        if pf.settled:
            return
        pf.settled = True
        self._unsettled.pop(pf, None)
        try:
            self._record(pf, hit=hit)
        except Exception as exc:
            self._on_error(exc, "settling the prefetch of %r", pf.record.target)
        finally:
            pf.span.end()

    def _record(self, pf: Prefetch, *, hit: bool) -> None:
        record = pf.record
        record.computed_tokens = computed_tokens(pf)
        record.outcome = outcome(pf, hit=hit)
        if not hit and record.kind != PrefetchKind.CONFIRMED:
            if record.outcome == PrefetchOutcome.DROPPED:
                self._instruments.record_dropped(self.workflow)
            self._instruments.record_wasted(self.workflow, record.computed_tokens)
        pf.span.set_attribute(tm.AW_PREFILL_OUTCOME, record.outcome or PrefetchOutcome.FAILED)
        pf.span.set_attribute(tm.AW_PREFILL_COMPUTED_TOKENS, record.computed_tokens)
        pf.span.set_attribute(tm.AW_PREFILL_TOKENS, record.tokens)

    def pending(self) -> list[asyncio.Task[Any]]:
        """Requests of the prefetches not settled yet that are still running."""
        return [t for pf in self._unsettled for t in pf.tasks() if not t.done()]

    def finish_all(self) -> None:
        """Settle what is left now (done callbacks of requests that ended last may not have
        run yet)."""
        for pf, hit in list(self._unsettled.items()):
            self.finish(pf, hit=hit)
