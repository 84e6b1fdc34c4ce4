"""Admission of speculative prefills: one rate and one budget per engine (DESIGN §5).

Every run and every workflow on one engine shares one :class:`Admission` (see
:func:`admission_for`): a token bucket of ``max_prefills_per_s`` (a burst of one second's
worth) and a budget of speculative requests in flight (``max_speculative_in_flight``, and, when
the engine reports its cache capacity, ``capacity_fraction`` of it in prompt tokens).

Admission never waits: :meth:`Admission.try_acquire` answers at once. Over the rate, the
request is refused; over the budget, the in-flight request of the lowest expected value
(probability) is preempted if it is worth less than the new one (the new request takes its slot
once it has ended, so the engine never holds more than the budget), else the new one is
refused. A refused request is *dropped* by the caller and counted, never queued. Confirmed
warm-ups and live requests never go through admission.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentwarm.engines.base import Engine
    from agentwarm.runtime.policy import PrefetchPolicy

__all__ = ("Admission", "Ticket", "admission_for")


@dataclass(eq=False)
class Ticket:
    """One admitted speculative request, held until :meth:`Admission.release`.

    ``after``, when set, is the end of the request whose slot this one takes over: send only
    once it is done. ``value`` is the expected value; ``math.inf`` makes it unpreemptible
    (a hit, which a live request is about to reuse)."""

    value: float
    tokens: int
    stop: Callable[[], None] | None = None
    after: asyncio.Future[None] | None = None
    done: asyncio.Future[None] | None = field(default=None, repr=False)
    replaced: bool = False
    released: bool = False


class Admission:
    """Non-blocking rate limit and in-flight budget of speculative prefills (module doc)."""

    def __init__(
        self,
        *,
        rate: float = 64.0,
        max_in_flight: int = 64,
        max_tokens: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.rate = rate
        self.burst = max(1.0, rate) if rate > 0 else 0.0
        self._level = self.burst
        self._stamp = clock()
        self.max_in_flight = max_in_flight
        self.max_tokens = max_tokens
        self.capacity_tokens: int | None = None
        self.sized = False
        self._held: dict[int, Ticket] = {}
        self._tokens = 0
        self._slots = 0
        self.admitted = 0
        self.dropped = 0
        self.preempted = 0
        self.peak_in_flight = 0

    def configure(self, policy: PrefetchPolicy) -> None:
        """Apply ``policy``'s rate and budget (the latest policy on the engine wins)."""
        if policy.max_prefills_per_s != self.rate:
            self.rate = policy.max_prefills_per_s
            self.burst = max(1.0, self.rate) if self.rate > 0 else 0.0
            self._level = min(self._level, self.burst)
        self.max_in_flight = policy.max_speculative_in_flight
        if self.capacity_tokens:
            self.max_tokens = int(self.capacity_tokens * policy.capacity_fraction)

    def size(self, capacity_tokens: int | None) -> None:
        """The engine's cache capacity (``None``: unbounded), known once per engine."""
        self.capacity_tokens = capacity_tokens
        self.sized = True

    @property
    def in_flight(self) -> int:
        """Slots in use: admitted requests not yet released (a preempted request and the one
        that takes over its slot hold one slot)."""
        return self._slots

    def may_admit(self, value: float) -> bool:
        """Whether a request of expected value ``value`` could be admitted now, whatever its
        size: false when the rate is spent or every slot is held by a request worth as much.
        A false answer is counted as a drop (the caller drops the request without rendering
        its prompt); a true one reserves nothing: :meth:`try_acquire` decides."""
        level = self._level
        if self.rate > 0:
            level = min(self.burst, level + (self._clock() - self._stamp) * self.rate)
        if level >= 1.0:
            if self._slots < self.max_in_flight:
                return True
            victim = self._lowest()
            if victim is not None and victim.value < value:
                return True
        self.dropped += 1
        return False

    def try_acquire(
        self,
        *,
        value: float,
        tokens: int,
        stop: Callable[[], None] | None = None,
        replace: Ticket | None = None,
    ) -> Ticket | None:
        """Admit a speculative request now, or refuse it (``None``: drop it and count it).

        ``replace`` is a ticket of the caller's own that the new request supersedes (a longer
        prefix of the same prefetch): its slot is handed over, and the caller stops it."""
        now = self._clock()
        if self.rate > 0:
            self._level = min(self.burst, self._level + (now - self._stamp) * self.rate)
        self._stamp = now
        if self._level < 1.0:
            self.dropped += 1
            return None
        victim: Ticket | None = None
        if replace is not None and not (replace.released or replace.replaced):
            victim = replace
        elif self._slots >= self.max_in_flight or not self._fits(tokens):
            victim = self._lowest()
            if victim is None or victim.value >= value or not self._fits(tokens - victim.tokens):
                self.dropped += 1
                return None
            self.preempted += 1
        self._level -= 1.0
        ticket = Ticket(value=value, tokens=tokens, stop=stop)
        ticket.done = asyncio.get_running_loop().create_future()
        self._held[id(ticket)] = ticket
        self._tokens += tokens
        self.admitted += 1
        if victim is None:
            self._slots += 1
            self.peak_in_flight = max(self.peak_in_flight, self._slots)
        else:
            victim.replaced = True
            self._tokens -= victim.tokens
            ticket.after = victim.done
            if victim is not replace and victim.stop is not None:
                victim.stop()
        return ticket

    def _fits(self, tokens: int) -> bool:
        return self.max_tokens is None or self._tokens + tokens <= self.max_tokens

    def _lowest(self) -> Ticket | None:
        """The preemptible request of the lowest value (not one already handing over)."""
        candidates = (t for t in self._held.values() if not t.replaced and t.after is None)
        return min(candidates, key=lambda t: t.value, default=None)

    def release(self, ticket: Ticket) -> None:
        """The request ended (sent and finished, or cancelled before it was sent)."""
        if ticket.released:
            return
        ticket.released = True
        if self._held.pop(id(ticket), None) is not None and not ticket.replaced:
            self._tokens -= ticket.tokens
            self._slots -= 1
        done = ticket.done
        if done is None or done.done():
            return
        if ticket.after is not None and not ticket.after.done():
            # Its slot is free only once the request it took the slot from has ended too.
            ticket.after.add_done_callback(lambda _: _set(done))
        else:
            _set(done)


def _set(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


_by_engine: weakref.WeakKeyDictionary[Engine, Admission] = weakref.WeakKeyDictionary()


def admission_for(engine: Engine) -> Admission:
    """The admission shared by every run on ``engine`` (released with the engine)."""
    admission = _by_engine.get(engine)
    if admission is None:
        admission = _by_engine[engine] = Admission()
    return admission
