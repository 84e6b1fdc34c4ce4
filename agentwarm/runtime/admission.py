"""Admission of speculative prefills: one rate and one budget per engine (DESIGN §5).

Every run and every workflow on one engine shares one :class:`Admission` (see
:func:`admission_for`): a token bucket of ``max_prefills_per_s`` (a burst of one second's
worth) and a budget of speculative requests in flight (``max_speculative_in_flight``, and, when
the engine reports its cache capacity, ``capacity_fraction`` of it in prompt tokens).

The :class:`Admission` owns the counts (the bucket's level, the tickets held); the limits come
from each run's policy, as a :class:`Limits` value passed with every question
(:meth:`Admission.bind` gives a run its :class:`RunAdmission`). Runs with different policies on
one engine share the counts and each is held to its own limits; no run reconfigures another's.

Admission never waits: :meth:`Admission.try_acquire` answers at once. Over the rate, the
request is refused; over the budget, the in-flight request of the lowest expected value
(probability) is preempted if it is worth less than the new one (the new request takes its slot
once it has ended, so the engine never holds more than the budget), else the new one is
refused. A refused request is *dropped* by the caller and counted, never queued. Confirmed
warm-ups and live requests never go through admission.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentwarm.engines.base import Engine
    from agentwarm.runtime.policy import PrefetchPolicy

__all__ = ("Admission", "Limits", "RunAdmission", "Ticket", "admission_for")


@dataclass(eq=False)
class Ticket:
    """One admitted speculative request, held until :meth:`Admission.release`.

    ``after``, when set, is the end of the request whose slot this one takes over: send only
    once it is done. ``value`` is the expected value; ``math.inf`` makes it unpreemptible
    (a hit, which a live request is about to reuse). ``tokens`` is its prompt's length (what it
    holds of the cache), ``work`` what its prefill is expected to compute (the prompt less what
    was sent before: the engine time it takes; :attr:`Admission.work_in_flight`)."""

    value: float
    tokens: int
    work: int = 0
    stop: Callable[[], None] | None = None
    after: asyncio.Future[None] | None = None
    done: asyncio.Future[None] | None = field(default=None, repr=False)
    replaced: bool = False
    released: bool = False


@dataclass(frozen=True, slots=True)
class Limits:
    """One run's limits on speculation: prefills per second (a burst of one second's worth),
    requests in flight, and prompt tokens in flight (``None``: no token budget)."""

    rate: float = 64.0
    max_in_flight: int = 64
    max_tokens: int | None = None

    @property
    def burst(self) -> float:
        return max(1.0, self.rate) if self.rate > 0 else 0.0

    @classmethod
    def of(cls, policy: PrefetchPolicy, capacity_tokens: int | None) -> Limits:
        """``policy``'s limits on an engine whose cache holds ``capacity_tokens``."""
        return cls(
            rate=policy.max_prefills_per_s,
            max_in_flight=policy.max_speculative_in_flight,
            max_tokens=(
                int(capacity_tokens * policy.capacity_fraction) if capacity_tokens else None
            ),
        )


class Admission:
    """Non-blocking rate limit and in-flight budget of speculative prefills (module doc): the
    counts of one engine, questioned with the caller's :class:`Limits`."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._level: float | None = None  # None: full (the burst of whichever limits ask first)
        self._stamp = clock()
        self.capacity_tokens: int | None = None
        self.sized = False
        self._held: dict[int, Ticket] = {}
        self._tokens = 0
        self._work = 0
        self._slots = 0
        self.admitted = 0
        self.dropped = 0
        self.preempted = 0
        self.peak_in_flight = 0
        #: What refused the latest request refused: ``rate``, ``in_flight`` or ``tokens``.
        self.refusal: str | None = None

    def bind(self, limits: Limits) -> RunAdmission:
        """This admission, questioned with ``limits`` (one run's view)."""
        return RunAdmission(self, limits)

    def size(self, capacity_tokens: int | None) -> None:
        """The engine's cache capacity (``None``: unbounded), known once per engine."""
        self.capacity_tokens = capacity_tokens
        self.sized = True

    def _refilled(self, limits: Limits, now: float) -> float:
        level = limits.burst if self._level is None else self._level
        if limits.rate > 0:
            level += (now - self._stamp) * limits.rate
        return min(limits.burst, level)

    @property
    def in_flight(self) -> int:
        """Slots in use: admitted requests not yet released (a preempted request and the one
        that takes over its slot hold one slot)."""
        return self._slots

    @property
    def tokens_in_flight(self) -> int:
        """Prompt tokens of the admitted requests not yet released (queued or prefilling)."""
        return self._tokens

    @property
    def work_in_flight(self) -> int:
        """Tokens the admitted requests not yet released were expected to compute (their
        ``work``: what was new in each prompt when it was sent), the engine time they hold:
        a prompt sent before in full but for its last message counts only that message."""
        return self._work

    def may_admit(self, value: float, limits: Limits) -> bool:
        """Whether a request of expected value ``value`` could be admitted now, whatever its
        size: false when the rate is spent or every slot is held by a request worth as much.
        A false answer is counted as a drop (the caller drops the request without rendering
        its prompt); a true one reserves nothing: :meth:`try_acquire` decides."""
        self.refusal = "rate"
        if self._refilled(limits, self._clock()) >= 1.0:
            if self._slots < limits.max_in_flight:
                return True
            victim = self._lowest()
            if victim is not None and victim.value < value:
                return True
            self.refusal = "in_flight"
        self.dropped += 1
        return False

    def try_acquire(
        self,
        *,
        value: float,
        tokens: int,
        limits: Limits,
        stop: Callable[[], None] | None = None,
        replace: Ticket | None = None,
        work: int | None = None,
    ) -> Ticket | None:
        """Admit a speculative request now, or refuse it (``None``: drop it and count it).

        ``work`` is what its prefill is expected to compute (default: all ``tokens``).
        ``replace`` is a ticket of the caller's own that the new request supersedes (a longer
        prefix of the same prefetch): its slot is handed over, and the caller stops it."""
        now = self._clock()
        self._level = self._refilled(limits, now)
        self._stamp = now
        if self._level < 1.0:
            self.dropped += 1
            self.refusal = "rate"
            return None
        victim: Ticket | None = None
        if replace is not None and not (replace.released or replace.replaced):
            victim = replace
        elif self._slots >= limits.max_in_flight or not self._fits(tokens, limits):
            victim = self._lowest()
            if (
                victim is None
                or victim.value >= value
                or not self._fits(tokens - victim.tokens, limits)
            ):
                self.dropped += 1
                self.refusal = "in_flight" if self._slots >= limits.max_in_flight else "tokens"
                return None
            self.preempted += 1
        self._level -= 1.0
        work = tokens if work is None else max(0, work)
        ticket = Ticket(value=value, tokens=tokens, stop=stop, work=work)
        ticket.done = asyncio.get_running_loop().create_future()
        self._held[id(ticket)] = ticket
        self._tokens += tokens
        self._work += work
        self.admitted += 1
        if victim is None:
            self._slots += 1
            self.peak_in_flight = max(self.peak_in_flight, self._slots)
        else:
            victim.replaced = True
            self._tokens -= victim.tokens
            self._work -= victim.work
            ticket.after = victim.done
            if victim is not replace and victim.stop is not None:
                victim.stop()
        return ticket

    def promote(self, ticket: Ticket) -> None:
        """A live request is about to reuse ``ticket``'s request (a branch hit): it is never
        preempted from now on, and what is left of its prefill is live work, not speculation
        in flight (its ``work`` leaves :attr:`work_in_flight`)."""
        ticket.value = math.inf
        if not (ticket.released or ticket.replaced):
            self._work -= ticket.work
        ticket.work = 0

    def _fits(self, tokens: int, limits: Limits) -> bool:
        return limits.max_tokens is None or self._tokens + tokens <= limits.max_tokens

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
            self._work -= ticket.work
            self._slots -= 1
        done = ticket.done
        if done is None or done.done():
            return
        if ticket.after is not None and not ticket.after.done():
            # Its slot is free only once the request it took the slot from has ended too.
            ticket.after.add_done_callback(lambda _: _set(done))
        else:
            _set(done)


@dataclass(frozen=True, slots=True)
class RunAdmission:
    """An :class:`Admission` questioned with one run's :class:`Limits`: what the prefetcher of
    that run holds. The counts are the engine's, shared with every other run."""

    admission: Admission
    limits: Limits

    def may_admit(self, value: float) -> bool:
        return self.admission.may_admit(value, self.limits)

    def try_acquire(
        self,
        *,
        value: float,
        tokens: int,
        stop: Callable[[], None] | None = None,
        replace: Ticket | None = None,
        work: int | None = None,
    ) -> Ticket | None:
        return self.admission.try_acquire(
            value=value, tokens=tokens, limits=self.limits, stop=stop, replace=replace, work=work
        )

    def release(self, ticket: Ticket) -> None:
        self.admission.release(ticket)

    def promote(self, ticket: Ticket) -> None:
        self.admission.promote(ticket)

    @property
    def in_flight(self) -> int:
        return self.admission.in_flight

    @property
    def tokens_in_flight(self) -> int:
        return self.admission.tokens_in_flight

    @property
    def work_in_flight(self) -> int:
        return self.admission.work_in_flight

    @property
    def admitted(self) -> int:
        return self.admission.admitted

    @property
    def dropped(self) -> int:
        return self.admission.dropped

    @property
    def preempted(self) -> int:
        return self.admission.preempted

    @property
    def refusal(self) -> str | None:
        return self.admission.refusal


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
