"""The prefetcher: owns every in-flight speculative prefill of a run (DESIGN §5).

Lifecycle per step::

    begin_step   predict successors → choose candidates (top-N, min_p, token budget)
                 → submit speculative prefills (admitted per engine, low priority), or hold
                 them until the step's first LLM call returns (``timing``)
    refresh      after each LLM call of the step: submit held candidates, or re-send the
                 candidates' now longer prefixes
                 (the step's own output is in the transcript) and add a successor the output
                 names, if any
    resolve      the step returned its next node(s): winners are hits (left running, the real
                 request reuses them), losers are stopped; the predictor and guardrail observe
    warm         the actual next node's full known prefix is sent at once (a "confirmed" warm-up)

``resolve`` never waits for the engine: losers are stopped (a request not yet sent is cancelled
before it reaches the engine, one already sent is aborted) and settled in the background, so a
wrong guess adds nothing to the critical path. Records and spans are final once the run's
``aclose()`` returns.

Nothing a live step awaits depends on speculation's rate or queues: admission
(:mod:`agentwarm.runtime.admission`, one per engine) answers at once, and a prefetch it refuses
is dropped (outcome ``dropped``), never queued; a hit whose request was not sent yet is cancelled
at resolve, and the live request (or the confirmed warm-up) takes over its prefix at once.

Nothing here may break a workflow: every speculative failure is logged and counted as outcome
``failed``; only the live request path raises.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import (
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from agentwarm import telemetry as tm
from agentwarm._spec import END, NodeSpec
from agentwarm.engines.base import Engine, PrefillResult, PrefillStatus, Priority, new_rid
from agentwarm.runtime.admission import Admission, Ticket
from agentwarm.runtime.guardrail import Guardrail
from agentwarm.runtime.policy import PrefetchPolicy, choose_candidates
from agentwarm.runtime.prompt import PromptRenderer
from agentwarm.runtime.result import CONFIRMED, SPECULATIVE, Outcome, PrefetchRecord, StepRecord
from agentwarm.runtime.timing import StepTiming

if TYPE_CHECKING:
    from agentwarm.graphs import CompiledGraph
    from agentwarm.predictors import Predictor

__all__ = ("Prefetcher", "StepScope")

log = logging.getLogger(__name__)

_CLOSE_WAIT_S = 5.0
#: Shorter node names ("a", "go") occur in text by chance; they are not taken as hints.
_MIN_HINT_LEN = 3


@dataclass(eq=False)
class _Request:
    """One prefill request sent (or about to be sent) for a prefetch.

    Candidates whose known prefixes are identical (e.g. one agent whose prompt does not depend
    on the tool it calls next) share one request; ``credit`` is the prefetch its computed
    tokens are accounted to: the one that sent it, or the winner that shares it.
    """

    rid: str
    ids_len: int
    key: int = 0
    credit: _Prefetch | None = None
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
class _Prefetch:
    """All requests for one target in one step (a refresh supersedes the previous request)."""

    record: PrefetchRecord
    span: trace.Span
    requests: list[_Request] = field(default_factory=list)
    settled: bool = False

    @property
    def latest(self) -> _Request | None:
        return self.requests[-1] if self.requests else None

    @property
    def failed(self) -> bool:
        return self.latest is not None and self.latest.failed

    def tasks(self) -> list[asyncio.Task[PrefillResult | None]]:
        return [r.task for r in self.requests if r.task is not None]


@dataclass(eq=False)
class StepScope:
    """The prefetcher's view of one running step (made by the run).

    ``step`` is read here, never written: the run writes it (``step.llm_calls`` is the one count
    of the step's LLM calls). ``records`` is where this step's prefetch records go, in the order
    they are issued: the run lends its ``StepRecord.prefetches`` list.
    """

    step: StepRecord
    spec: NodeSpec
    path: tuple[str, ...]
    state: Mapping[str, Any]
    records: list[PrefetchRecord]
    started: float = field(default_factory=time.perf_counter)
    predictions: list[tuple[str, float]] = field(default_factory=list)
    prefetches: dict[str, _Prefetch] = field(default_factory=dict)
    deferred: bool = False
    lead_s: float | None = None
    """When the step's first LLM call started (seconds after ``started``; set by the run)."""


class Prefetcher:
    """Speculative prefetching for one workflow run on one engine."""

    def __init__(
        self,
        *,
        workflow: CompiledGraph,
        engine: Engine,
        renderer: PromptRenderer,
        predictor: Predictor,
        guardrail: Guardrail,
        timing: StepTiming,
        policy: PrefetchPolicy,
        admission: Admission,
        run_id: str,
        namespace: str,
        capacity_tokens: int | None,
    ) -> None:
        self.workflow = workflow
        self.engine = engine
        self.renderer = renderer
        self.predictor = predictor
        self.guardrail = guardrail
        self.timing = timing
        self.policy = policy
        self.admission = admission
        self.run_id = run_id
        self.namespace = namespace
        self.budget = policy.max_prefetch_tokens
        if capacity_tokens:
            self.budget = min(self.budget, int(capacity_tokens * policy.capacity_fraction))
        self._tracer = tm.get_tracer()
        self._instruments = tm.instruments()
        self._open: set[StepScope] = set()
        self._all: list[_Prefetch] = []
        self._confirmed: dict[str, _Prefetch] = {}
        # Speculative hits that sent a node's whole known prefix (no confirmed warm-up needed):
        # its live request waits for them on engines that cannot reuse an in-flight prefill.
        self._covered: dict[str, asyncio.Task[PrefillResult | None]] = {}
        self._unsettled: dict[_Prefetch, bool] = {}  # waiting for requests: hit or not
        self._background: set[asyncio.Task[Any]] = set()
        self.failures = 0

    # --- choose and submit ------------------------------------------------------------------

    def begin_step(self, scope: StepScope) -> None:
        """Predict the successors of ``scope``'s node; submit speculative prefills now, or hold
        them until the step's first LLM call returns (see :mod:`agentwarm.runtime.timing`)."""
        self._open.add(scope)
        try:
            candidates = self.workflow.successors(scope.spec.name)
            scope.predictions = list(
                self.predictor.predict(scope.path, scope.state, candidates=candidates)
            )
            if self.timing.defer(scope.spec.name, self.policy.timing):
                scope.deferred = True
                return
            self._speculate(scope)
        except Exception as exc:
            self._swallow(exc, "choosing prefetch candidates in step %r", scope.spec.name)

    def _speculate(self, scope: StepScope, hinted: str | None = None) -> None:
        """Submit the chosen candidates' known prefixes (and ``hinted``, if not chosen)."""
        try:
            limits = self.guardrail.limits(self.policy)
            if limits.paused:
                return
            # A node seen not to call the LLM reads no prompt: it takes no candidate's place.
            reads = self.timing.reads_prompt
            predictions = [(n, p) for n, p in scope.predictions if n == END or reads(n)]
            chosen = choose_candidates(
                predictions, top_n=limits.top_n, min_p=limits.min_p, top_p=limits.top_p
            )
            if hinted is not None and hinted not in {name for _, name, _ in chosen}:
                chosen.append((-1, hinted, dict(scope.predictions).get(hinted, 0.0)))
            ranked = {name: (rank, p) for rank, name, p in chosen}

            def admissible(name: str) -> bool:  # refused whatever its size: not even rendered
                return self.admission.may_admit(ranked[name][1])

            for name, ids in self._within_budget(ranked, admissible):
                rank, p = ranked[name]
                self._start(scope, name, p, rank, ids)
        except Exception as exc:
            self._swallow(exc, "submitting prefetches in step %r", scope.spec.name)

    def refresh(self, scope: StepScope, output_text: str = "", *, after_llm: bool = True) -> None:
        """The transcript grew (an LLM call of the step returned, or a tool result was added):
        extend the candidates' prefixes, so the next real request finds all but its own text
        cached. Only the new tokens are computed.

        With ``use_output_hints``, a declared successor named (as a word) in an LLM call's
        output is added as a candidate: the step's own output often names the next tool.
        """
        if scope.deferred:
            if after_llm:
                scope.deferred = False
                self._speculate(scope, self._hinted(scope, output_text))
            return
        if not self.policy.refresh_after_llm or self.guardrail.limits(self.policy).paused:
            return
        try:
            targets = list(scope.prefetches)
            hinted = self._hinted(scope, output_text)
            if hinted is not None and hinted not in scope.prefetches:
                targets.append(hinted)
            for target, ids in self._within_budget(targets):
                assert ids is not None  # only an `admissible` refusal yields None
                pf = scope.prefetches.get(target)
                if pf is None:
                    p = dict(scope.predictions).get(target, 0.0)
                    self._start(scope, target, p, -1, ids)
                elif pf.latest is None:  # dropped so far: admission may take it now
                    if self._send(scope, pf, ids):
                        self._instruments.record_issued(self.workflow.name)
                elif len(ids) > pf.latest.ids_len:
                    old = pf.latest if pf.latest is not None and pf.latest.running else None
                    # The longer prefix supersedes the running request (and takes its slot);
                    # refused, the running one goes on.
                    if self._send(scope, pf, ids, replace=old) and old is not None:
                        self._stop(old)
        except Exception as exc:
            self._swallow(exc, "refreshing prefetched prefixes in step %r", scope.spec.name)

    def _within_budget(
        self, targets: Iterable[str], admissible: Callable[[str], bool] | None = None
    ) -> Iterator[tuple[str, list[int] | None]]:
        """Each target's known prefix, in order, until the step's token budget would be passed
        (targets with nothing known yet are skipped); ``None`` for a target ``admissible``
        refuses, without rendering its prompt."""
        spent = 0
        for target in targets:
            if admissible is not None and not admissible(target):
                yield target, None
                continue
            ids = self.renderer.prefix_ids(self.workflow.nodes[target])
            if not ids:
                continue
            if spent + len(ids) > self.budget:
                return
            spent += len(ids)
            yield target, ids

    def _swallow(self, exc: Exception, what: str, *args: object) -> None:
        """Speculation never breaks a workflow: log (traceback at DEBUG) and count."""
        self.failures += 1
        log.warning(
            what + " failed (%s: %s); the workflow continues without it",
            *args,
            type(exc).__name__,
            exc,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )

    def _hinted(self, scope: StepScope, text: str) -> str | None:
        if not self.policy.use_output_hints or not text:
            return None
        named = [
            n
            for n in self.workflow.successors(scope.spec.name)
            if n != END
            and len(n) >= _MIN_HINT_LEN
            and self.timing.reads_prompt(n)
            and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)
        ]
        return named[0] if len(named) == 1 else None

    def _new_prefetch(
        self, scope: StepScope, target: str, kind: str, p: float, rank: int, tokens: int
    ) -> _Prefetch:
        record = PrefetchRecord(
            target=target,
            probability=p,
            rank=rank,
            kind=kind,
            tokens=tokens,
            issued_after_s=time.perf_counter() - scope.started,
        )
        speculative = kind == SPECULATIVE
        span = self._tracer.start_span(
            tm.SPAN_PREFILL,
            attributes=tm.prefill_attributes(
                workflow=self.workflow.name,
                run_id=self.run_id,
                source=scope.spec.name,
                target=target,
                kind=kind,
                tokens=tokens,
                probability=p if speculative else None,
                rank=rank if speculative else None,
            ),
        )
        scope.records.append(record)
        pf = _Prefetch(record=record, span=span)
        self._all.append(pf)
        return pf

    def _start(
        self, scope: StepScope, target: str, p: float, rank: int, ids: list[int] | None
    ) -> _Prefetch:
        """A speculative prefetch of ``target``; ``ids`` ``None``: refused by admission before
        its prompt was rendered (recorded as dropped, with 0 tokens, when the step resolves)."""
        pf = self._new_prefetch(scope, target, SPECULATIVE, p, rank, len(ids or ()))
        scope.prefetches[target] = pf
        if ids is not None and self._send(scope, pf, ids):
            self._instruments.record_issued(self.workflow.name)
        return pf

    def _send(
        self, scope: StepScope, pf: _Prefetch, ids: list[int], replace: _Request | None = None
    ) -> bool:
        """Submit ``ids`` speculatively for ``pf`` (superseding ``replace``), or share another
        candidate's live request for the very same tokens (nothing is sent twice). False when
        admission refused it: nothing was sent."""
        key = hash(tuple(ids))
        for other in scope.prefetches.values():
            req = other.latest
            if (
                other is not pf
                and req is not None
                and req.key == key
                and req.ids_len == len(ids)
                and req.shareable
            ):
                pf.requests.append(req)
                pf.record.tokens = max(pf.record.tokens, len(ids))
                return True
        return self._submit(pf, ids, Priority.SPECULATIVE, key=key, replace=replace) is not None

    def _submit(
        self,
        pf: _Prefetch,
        ids: list[int],
        priority: int,
        after: asyncio.Task[Any] | None = None,
        key: int = 0,
        replace: _Request | None = None,
    ) -> _Request | None:
        """Start a request for ``ids``; a speculative one only if admission admits it now
        (``None`` otherwise: it is dropped, never queued)."""
        req = _Request(rid=new_rid(), ids_len=len(ids), key=key, credit=pf)
        if priority < Priority.LIVE:  # speculation is admitted per engine, confirmed warm-ups not
            ticket = self.admission.try_acquire(
                value=pf.record.probability,
                tokens=len(ids),
                stop=lambda: self._stop(req),  # preempted for a likelier prefetch
                replace=replace.ticket if replace is not None else None,
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
        pf: _Prefetch,
        req: _Request,
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
            result = await asyncio.wait_for(
                self.engine.prefill(
                    ids,
                    priority=priority,
                    rid=req.rid,
                    namespace=self.namespace,
                    session=self.run_id,
                ),
                timeout=self.policy.prefill_timeout_s,
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
                self._spawn(self._quiet_abort(req.rid))
            return None
        req.result = result
        return result

    def _stop(self, req: _Request) -> None:
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
            self._spawn(self._quiet_abort(req.rid))

    async def _quiet_abort(self, rid: str) -> None:
        try:
            await self.engine.abort(rid)
        except Exception as exc:
            log.debug("abort of %s failed: %s", rid, exc)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # --- resolve ----------------------------------------------------------------------------

    def resolve(self, scope: StepScope, actual: Sequence[str]) -> set[str]:
        """The step chose ``actual``: settle every prefetch; return the targets that were hits.

        Does not wait for the engine: losers are stopped and settled once their requests end.
        """
        self._open.discard(scope)
        if self.policy.enabled:
            self.timing.observe(scope.spec.name, scope.step.llm_calls > 0, scope.lead_s)
        # A prefetch that admission dropped is no hit (nothing of it reached the engine).
        hits: set[str] = {
            t for t, pf in scope.prefetches.items() if t in actual and not pf.failed and pf.requests
        }
        kept: set[int] = set()
        for target in hits:
            pf = scope.prefetches[target]
            for req in pf.requests:
                req.credit = pf  # a request shared with a loser serves the winner
                if req.waiting:
                    # Still waiting for a speculative slot: the live request (or confirmed
                    # warm-up) takes over its prefix at once instead of waiting behind it.
                    self._stop(req)
                    continue
                kept.add(id(req))
                if req.ticket is not None:
                    req.ticket.value = math.inf  # a live request reuses it: never preempted
        for target, pf in scope.prefetches.items():
            if target in hits:
                pf.record.outcome = Outcome.HIT
                self._instruments.record_hit(self.workflow.name)
                self._settle(pf, hit=True)
            else:
                self._drop(pf, kept)
        self._observe(scope, actual)
        return hits

    def abandon(self, scope: StepScope) -> None:
        """The step failed or was cancelled: stop and settle its prefetches (no observation)."""
        if scope in self._open:
            self._open.discard(scope)
            for pf in scope.prefetches.values():
                self._drop(pf)

    def _drop(self, pf: _Prefetch, kept: Collection[int] = ()) -> None:
        """Stop ``pf``'s requests (except those in ``kept``, shared with a hit) and settle it."""
        for req in pf.requests:
            if id(req) not in kept:
                self._stop(req)
        self._settle(pf, hit=False)

    def _settle(self, pf: _Prefetch, *, hit: bool) -> None:
        """Fix ``pf``'s outcome and end its span once its requests have ended: now if they
        have (no task, no wait), else from their done callbacks."""
        pending = [t for t in pf.tasks() if not t.done()]
        if not pending:
            self._finish(pf, hit=hit)
            return
        self._unsettled[pf] = hit
        left = len(pending)

        def one_done(_: object) -> None:
            nonlocal left
            left -= 1
            if left == 0:
                self._finish(pf, hit=hit)

        for task in pending:
            task.add_done_callback(one_done)

    def _finish(self, pf: _Prefetch, *, hit: bool) -> None:
        """Final outcome, computed tokens and span end of ``pf`` (once; never raises)."""
        if pf.settled:
            return
        pf.settled = True
        self._unsettled.pop(pf, None)
        try:
            self._outcome(pf, hit=hit)
        except Exception as exc:
            self._swallow(exc, "settling the prefetch of %r", pf.record.target)
        finally:
            pf.span.end()

    def _outcome(self, pf: _Prefetch, *, hit: bool) -> None:
        pf.record.computed_tokens = sum(
            r.result.computed_tokens for r in pf.requests if r.result is not None and r.credit is pf
        )
        if pf.record.kind == CONFIRMED:
            latest = pf.latest
            stopped = latest is not None and latest.stopped
            pf.record.outcome = (
                Outcome.FAILED if pf.failed else Outcome.CANCELLED if stopped else Outcome.HIT
            )
        elif hit:
            if not any(r.result is not None for r in pf.requests):
                # Every request failed or was stopped: the cache never got this prefix.
                pf.record.outcome = Outcome.FAILED if pf.failed else Outcome.CANCELLED
        else:
            if pf.failed:
                pf.record.outcome = Outcome.FAILED
            elif not pf.requests:  # admission refused it: nothing reached the engine
                pf.record.outcome = Outcome.DROPPED
                self._instruments.record_dropped(self.workflow.name)
            elif any(r.stopped for r in pf.requests):
                pf.record.outcome = Outcome.CANCELLED
            else:
                pf.record.outcome = Outcome.WASTED
            self._instruments.record_wasted(self.workflow.name, pf.record.computed_tokens)
        pf.span.set_attribute(tm.AW_PREFILL_OUTCOME, pf.record.outcome or Outcome.FAILED)
        pf.span.set_attribute(tm.AW_PREFILL_COMPUTED_TOKENS, pf.record.computed_tokens)
        pf.span.set_attribute(tm.AW_PREFILL_TOKENS, pf.record.tokens)

    def _observe(self, scope: StepScope, actual: Sequence[str]) -> None:
        try:
            for nxt in actual:
                self.predictor.observe(scope.path, nxt)
            real = [a for a in actual if a != END]
            # Score the guardrail only where a prediction was made (not in disabled runs).
            if real and scope.predictions:
                p = self.policy
                top = choose_candidates(
                    scope.predictions, top_n=p.top_n, min_p=p.min_p, top_p=p.top_p
                )
                self.guardrail.observe(any(a in {name for _, name, _ in top} for a in real), p)
        except Exception as exc:
            self._swallow(exc, "updating the predictor after step %r", scope.spec.name)

    # --- confirmed warm-up and the live request ---------------------------------------------

    def warm(self, scope: StepScope, target: str) -> None:
        """Send the actual next node's full known prefix at once (not speculation).

        Not sent when it would add nothing: the node is seen not to call the LLM, or to call it
        within ``warm_min_lead_s`` of its step start (the warm-up would reach the engine with
        the live request), or a speculative hit already sent these very tokens. On engines that
        cannot reuse an in-flight prefill, the warm-up (or the node's live request) waits for a
        still-running speculative hit of the same target, so no token is computed twice.
        """
        if not (self.policy.enabled and self.policy.warm_confirmed) or target == END:
            return
        try:
            if not self.timing.reads_prompt(target):
                return
            lead = self.timing.lead_s(target)
            if lead is not None and lead < self.policy.warm_min_lead_s:
                return
            ids = self.renderer.prefix_ids(self.workflow.nodes[target])
            if not ids:
                return
            hit = scope.prefetches.get(target)
            latest = hit.latest if hit is not None else None
            after = None
            # The transcript is append-only: a prefix of the same length is the same tokens.
            same = latest is not None and latest.shareable and latest.ids_len == len(ids)
            if latest is not None and latest.running:
                if same:
                    assert latest.task is not None
                    if not self.engine.supports_promotion:
                        self._covered[target] = latest.task
                    return
                if not self.engine.supports_promotion:
                    after = latest.task
            elif same and latest is not None and latest.result is not None:
                return  # computed already: the prefix is cached
            pf = self._new_prefetch(scope, target, CONFIRMED, 1.0, 0, len(ids))
            self._submit(pf, ids, Priority.LIVE, after=after)
            previous = self._confirmed.pop(target, None)
            if previous is not None:
                self._settle(previous, hit=True)
            self._confirmed[target] = pf
        except Exception as exc:
            self._swallow(exc, "warming the prefix of %r", target)

    async def before_live(self, node: str) -> None:
        """Called before a node's live request: on engines that cannot reuse an in-flight
        prefill, wait for the confirmed warm-up of this node (or the speculative hit that sent
        its whole prefix) so its work is not done twice."""
        covered = self._covered.pop(node, None)
        pf = self._confirmed.pop(node, None)
        task = covered
        if pf is not None:
            self._settle(pf, hit=True)
            latest = pf.latest
            task = latest.task if latest is not None else None
        if self.engine.supports_promotion or task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), self.policy.prefill_timeout_s)
        except Exception:
            log.debug("warm-up of %r did not finish; sending the request anyway", node)

    def _pending(self) -> list[asyncio.Task[Any]]:
        """Tasks the run's records still wait for: requests of unsettled prefetches, aborts."""
        tasks = [t for pf in self._unsettled for t in pf.tasks() if not t.done()]
        return [*tasks, *self._background]

    async def aclose(self) -> None:
        """Stop what is still running, settle every record and span (bounded wait)."""
        for scope in list(self._open):
            self.abandon(scope)
        # The run is over: nothing will reuse a request still running (a hit the live request
        # did not wait for). Stop it, so the run's end never waits for speculative queues.
        for pf in self._all:
            for req in pf.requests:
                if req.running:
                    self._stop(req)
        for pf in self._confirmed.values():
            for req in pf.requests:
                self._stop(req)
            self._settle(pf, hit=True)
        self._confirmed.clear()
        self._covered.clear()
        deadline = time.monotonic() + _CLOSE_WAIT_S
        while (pending := self._pending()) and (timeout := deadline - time.monotonic()) > 0:
            await asyncio.wait(pending, timeout=timeout)
        if self._pending():
            # Past the deadline: cancel the requests themselves (engines abort cancelled
            # requests), then the aborts still running.
            for pf in self._all:
                for req in pf.requests:
                    if req.running:
                        assert req.task is not None
                        req.task.cancel()
            await asyncio.wait(self._pending(), timeout=1.0)
            leftover = list(self._background)
            for t in leftover:
                t.cancel()
            await asyncio.gather(*leftover, return_exceptions=True)
        # Done callbacks of requests that ended last may not have run yet: settle here.
        for pf, hit in list(self._unsettled.items()):
            self._finish(pf, hit=hit)
