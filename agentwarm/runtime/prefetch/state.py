"""What the prefetcher keeps per request, per prefetch and per step: plain data, no engine.

A :class:`HitProbe` is a branch hit's prefetch, checked when its step's live request comes
(:mod:`.misses`). A :class:`Prefetch` is everything sent for one target node in one step (a
refresh supersedes its previous :class:`Request`); a :class:`StepScope` is the prefetcher's view
of one running step, made by the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from agentwarm import telemetry as tm
from agentwarm._spec import Miss, MissReason, PrefetchKind
from agentwarm.engines.base import PrefillResult, PrefillStatus
from agentwarm.runtime.prefetch.spend import common_prefix_len
from agentwarm.runtime.records import PrefetchRecord

if TYPE_CHECKING:
    from agentwarm._spec import NodeSpec
    from agentwarm.predictors import StepContext
    from agentwarm.runtime.admission import Ticket
    from agentwarm.runtime.records import StepRecord

__all__ = ("HitProbe", "Prefetch", "Request", "StepScope", "Where", "open_prefetch")

#: Where a token index of a node's prompt falls: ``(segment, message index)`` (see
#: :meth:`~agentwarm.runtime.prompt.PromptRenderer.boundary`).
Where = Callable[[int], tuple[str | None, int | None]]


@dataclass(eq=False)
class Request:
    """One prefill request sent (or about to be sent) for a prefetch.

    Candidates whose known prefixes are identical (e.g. one agent whose prompt does not depend
    on the tool it calls next) share one request; ``credit`` is the prefetch its computed
    tokens are accounted to: the one that sent it, or the winner that shares it.
    """

    rid: str
    ids_len: int
    key: int = 0
    credit: Prefetch | None = None
    task: asyncio.Task[PrefillResult | None] | None = None
    sent: bool = False
    dropped: bool = False
    stopping: bool = False
    failed: bool = False
    ticket: Ticket | None = None
    result: PrefillResult | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def waiting(self) -> bool:
        """Not sent yet, waiting for the speculative slot it took over to be freed."""
        after = self.ticket.after if self.ticket is not None else None
        return self.running and not self.sent and after is not None and not after.done()

    @property
    def stopped(self) -> bool:
        aborted = self.result is not None and self.result.status is PrefillStatus.ABORTED
        return self.dropped or aborted

    @property
    def shareable(self) -> bool:
        return not (self.stopping or self.stopped or self.failed)


@dataclass(eq=False)
class Prefetch:
    """All requests for one target in one step (a refresh supersedes the previous request)."""

    record: PrefetchRecord
    span: trace.Span
    requests: list[Request] = field(default_factory=list)
    settled: bool = False
    ids: list[int] | None = None
    """The ids its latest request sent, until the step resolves (a hit's go to its probe)."""

    @property
    def latest(self) -> Request | None:
        return self.requests[-1] if self.requests else None

    @property
    def failed(self) -> bool:
        return self.latest is not None and self.latest.failed

    def tasks(self) -> list[asyncio.Task[PrefillResult | None]]:
        return [r.task for r in self.requests if r.task is not None]


def open_prefetch(
    tracer: trace.Tracer,
    workflow: str,
    run_id: str,
    scope: StepScope,
    target: str,
    kind: PrefetchKind,
    p: float,
    rank: int,
    tokens: int,
) -> Prefetch:
    """A new :class:`Prefetch` of ``target`` in ``scope``'s step: its record (appended to the
    step's) and its prefill span, started now."""
    record = PrefetchRecord(
        target=target,
        probability=p,
        rank=rank,
        kind=kind,
        tokens=tokens,
        issued_after_s=time.perf_counter() - scope.started,
    )
    speculative = kind == PrefetchKind.SPECULATIVE
    span = tracer.start_span(
        tm.SPAN_PREFILL,
        attributes=tm.prefill_attributes(
            workflow=workflow,
            run_id=run_id,
            source=scope.spec.name,
            target=target,
            kind=kind,
            tokens=tokens,
            probability=p if speculative else None,
            rank=rank if speculative else None,
        ),
    )
    scope.prefetch_records.append(record)
    return Prefetch(record=record, span=span)


@dataclass(eq=False)
class HitProbe:
    """A branch hit's latest request and the ids it sent, carried to the step it hit:
    :meth:`at_live` when that step's first live request starts, :meth:`short` once it has
    answered."""

    request: Request
    ids: Sequence[int]
    late: str | None = None
    """``running`` or ``stopped`` when the request was not done as the live request came."""

    def at_live(self) -> None:
        """The live request starts now: was the prefetch done?"""
        req = self.request
        if req.running:
            self.late = "running"
        elif req.stopped or req.result is None or not req.result.done:
            self.late = "stopped"

    def short(self, live_ids: Sequence[int], cached_tokens: int, where: Where) -> Miss | None:
        """The hit's :class:`Miss` once its live request (``live_ids``) found
        ``cached_tokens`` cached: ``prefix_mismatch`` when the prefetched ids are not a prefix
        of the live ids (``where`` names the boundary), ``late`` when it was not done; ``None``
        when it paid in full."""
        sent = len(self.ids)
        missing = max(0, sent - cached_tokens)
        k = common_prefix_len(self.ids, live_ids)
        if k < sent:
            cause, message = where(k)
            return Miss(
                MissReason.PREFIX_MISMATCH,
                cause=cause,
                token=k,
                message=message,
                missing_tokens=missing,
            )
        if self.late is not None:
            return Miss(MissReason.LATE, cause=self.late, missing_tokens=missing)
        return None


@dataclass(eq=False)
class StepScope:
    """The prefetcher's view of one running step (made by the run).

    ``step_record`` is read here, never written: the run writes it (``step_record.llm_calls``
    is the one count of the step's LLM calls). ``prefetch_records`` is where this step's
    prefetch records go, in the order they are issued: the run lends its
    ``StepRecord.prefetches`` list.
    """

    step_record: StepRecord
    spec: NodeSpec
    path: tuple[str, ...]
    state: Mapping[str, Any]
    prefetch_records: list[PrefetchRecord]
    started: float = field(default_factory=time.perf_counter)
    predictions: list[tuple[str, float]] = field(default_factory=list)
    first_predictions: list[tuple[str, float]] = field(default_factory=list)
    """The step's predictions at its start (``predictions`` are renewed by each re-ranking)."""
    prefetches: dict[str, Prefetch] = field(default_factory=dict)
    deferred: bool = False
    lead_s: float | None = None
    """When the step's first LLM call started (seconds after ``started``; set by the run)."""
    context: StepContext | None = None
    """The conversation ``predictions`` were made in (``None``: no transcript read)."""
    hinted: str | None = None
    """The successor the step's output named (mid-decode or after an LLM call), if any."""
    mid_hint: tuple[str, float, float | None] | None = None
    """The successor the step's streamed output named before its LLM call returned, when, and
    when that call returned (``time.perf_counter()``; ``None`` until it has): a mid-decode
    hint."""
    fallen: set[str] = field(default_factory=set)
    """Targets stopped because a re-ranking put them below ``min_p`` (not extended any more)."""
    verdicts: dict[str, Miss] = field(default_factory=dict)
    """Why the latest choice did not send each ranked target it refused
    (:func:`~agentwarm.runtime.prefetch.misses.verdicts`)."""
    probe: HitProbe | None = None
    """The prefetch that made this step a branch hit, checked at its first live request."""
    held: dict[str, float] = field(default_factory=dict)
    """Targets a choice of the step took but did not send, with their probability: held back
    by a tightened guardrail (cautious, paused) or stopped by the step's budget. The guardrail
    scores them as chosen (:func:`~agentwarm.runtime.prefetch.rules.chosen_of`)."""

    @property
    def requests_running(self) -> int:
        """How many of this step's prefetch requests are still running (sent or about to be)."""
        return len({t for pf in self.prefetches.values() for t in pf.tasks() if not t.done()})
