"""The prefetcher: owns every in-flight speculative prefill of a run (the package docstring
tells its lifecycle). Its decisions are :mod:`.rules`; sending and stopping requests is
:mod:`.sender`, settling outcomes :mod:`.settle`, holding confirmed warm-ups :mod:`.warmups`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from agentwarm import telemetry as tm
from agentwarm._spec import END, PrefetchKind, PrefetchOutcome
from agentwarm.engines.base import Engine, Priority
from agentwarm.predictors import observe_with
from agentwarm.runtime.admission import RunAdmission
from agentwarm.runtime.guardrail import Guardrail
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.prefetch.choice import Choice
from agentwarm.runtime.prefetch.fill import fills, idle_now
from agentwarm.runtime.prefetch.hinting import Reading
from agentwarm.runtime.prefetch.rules import (
    chosen_of,
    hit_targets,
    plan_warm_up,
    scored_branch,
    shared_request,
)
from agentwarm.runtime.prefetch.sender import Sender
from agentwarm.runtime.prefetch.settle import Settler
from agentwarm.runtime.prefetch.state import Prefetch, Request, StepScope, open_prefetch
from agentwarm.runtime.prefetch.warmups import WarmUps
from agentwarm.runtime.prompt import PromptRenderer
from agentwarm.runtime.timing import StepTiming

if TYPE_CHECKING:
    from agentwarm.graphs import CompiledGraph
    from agentwarm.predictors import Predictor
    from agentwarm.runtime.prefetch.spend import SentPrefixes, SpendEstimator
    from agentwarm.runtime.transcript import Transcript

__all__ = ("Prefetcher",)

log = logging.getLogger(__name__)

_CLOSE_WAIT_S = 5.0


class Prefetcher(Reading):
    """Speculative prefetching for one workflow run on one engine.

    ``transcript`` is the run's: a :class:`~agentwarm.predictors.ContextPredictor` predicts
    from the conversation it holds (re-ranked each time it grows) and observes the step's end.
    ``spend`` and ``sent`` are the session's: what the choice by value learns (:mod:`.choice`).
    """

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
        admission: RunAdmission,
        run_id: str,
        namespace: str,
        spend: SpendEstimator,
        sent: SentPrefixes,
        transcript: Transcript | None = None,
    ) -> None:
        self.workflow = workflow
        self.transcript = transcript
        self.engine = engine
        self.renderer = renderer
        self.predictor = predictor
        self.guardrail = guardrail
        self.timing = timing
        self.policy = policy
        self.admission = admission
        self.run_id = run_id
        self.namespace = namespace
        self._fills = fills(policy, engine)  # and price what the next live request overtakes
        self._choice = Choice(
            workflow=workflow,
            renderer=renderer,
            timing=timing,
            policy=policy,
            admission=admission,
            spend=spend,
            sent=sent,
            namespace=namespace,
            run_id=run_id,
            overtaken=self._fills,
        )
        self._tracer = tm.get_tracer()
        self._instruments = tm.instruments()
        self._sender = Sender(
            engine=engine,
            admission=admission,
            namespace=namespace,
            run_id=run_id,
            timeout_s=policy.prefill_timeout_s,
            on_prefill=spend.observe_prefill,
        )
        self._settler = Settler(
            workflow=workflow.name, instruments=self._instruments, on_error=self._swallow
        )
        self._warm_ups = WarmUps(
            engine=engine,
            sender=self._sender,
            settler=self._settler,
            timeout_s=policy.prefill_timeout_s,
        )
        self._open: set[StepScope] = set()
        self._all: list[Prefetch] = []
        self._swallowed = 0

    @property
    def failures(self) -> int:
        """Speculative failures so far (logged, never raised)."""
        return self._swallowed + self._sender.failures

    # --- choose and submit ------------------------------------------------------------------

    def begin_step(self, scope: StepScope) -> None:
        """Predict the successors of ``scope``'s node; submit speculative prefills now, or hold
        them until the step's first LLM call returns (see :mod:`agentwarm.runtime.timing`)."""
        self._open.add(scope)
        try:
            self._predict(scope)
            if self.timing.defer(scope.spec.name, self.policy.timing):
                scope.deferred = True
                return
            self._speculate(scope)
        except Exception as exc:
            self._swallow(exc, "choosing prefetch candidates in step %r", scope.spec.name)

    def _speculate(self, scope: StepScope, hinted: str | None = None) -> None:
        """Submit the chosen candidates' known prefixes (and ``hinted``, if not chosen)."""
        self._choice.speculated(scope.spec.name, scope)
        try:
            limits = self.guardrail.limits(self.policy)
            if limits.paused:
                self._choice.judge(scope, limits)
                return
            for name, rank, p, ids in self._choice.to_send(scope, limits, hinted):
                self._start(scope, name, p, rank, ids)
        except Exception as exc:
            self._swallow(exc, "submitting prefetches in step %r", scope.spec.name)

    def refresh(self, scope: StepScope, output_text: str = "", *, after_llm: bool = True) -> None:
        """The transcript grew (an LLM call of the step returned, or a tool result was added):
        extend the candidates' prefixes, so the next real request finds all but its own text
        cached. Only the new tokens are computed.

        A ContextPredictor re-ranks the successors on the grown conversation: likely ones not
        prefetched yet are started (same limits, candidates and budget as at step start),
        running ones that fell below ``min_p`` stopped. With ``use_output_hints``, a successor
        the output names (:func:`~.hints.output_hint`) is added as a candidate.
        """
        reranked = self._repredict(scope)
        if scope.deferred and not after_llm:
            return
        if not scope.deferred and (
            not self.policy.refresh_after_llm or self.guardrail.limits(self.policy).paused
        ):
            return
        try:
            hinted = self._hinted(scope, output_text)  # the whole output's, if any
            risen = self._stop_fallen(scope) if reranked else []  # before extending them
            if scope.deferred:
                scope.deferred = False  # extend those hinted while it streamed
                self._extend(scope, [t for t in scope.prefetches if t not in scope.fallen])
                self._speculate(scope, hinted)
                return
            targets = [t for t in scope.prefetches if t not in scope.fallen and t not in risen]
            if hinted is not None and hinted not in scope.prefetches:
                targets.append(hinted)
            self._extend(scope, targets)
            self._extend(scope, risen, revive=True)
            if reranked:  # the likely successors not prefetched yet
                self._speculate(scope)
        except Exception as exc:
            self._swallow(exc, "refreshing prefetched prefixes in step %r", scope.spec.name)

    def _swallow(self, exc: Exception, what: str, *args: object) -> None:
        """Speculation never breaks a workflow: log (traceback at DEBUG) and count."""
        self._swallowed += 1
        log.warning(
            what + " failed (%s: %s); the workflow continues without it",
            *args,
            type(exc).__name__,
            exc,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )

    def _new_prefetch(
        self, scope: StepScope, target: str, kind: PrefetchKind, p: float, rank: int, tokens: int
    ) -> Prefetch:
        pf = open_prefetch(
            self._tracer, self.workflow.name, self.run_id, scope, target, kind, p, rank, tokens
        )
        self._all.append(pf)
        return pf

    def _start(
        self, scope: StepScope, target: str, p: float, rank: int, ids: list[int] | None
    ) -> Prefetch:
        """A speculative prefetch of ``target``; ``ids`` ``None``: refused by admission before
        its prompt was rendered (recorded as dropped, with 0 tokens, when the step resolves)."""
        pf = self._new_prefetch(scope, target, PrefetchKind.SPECULATIVE, p, rank, len(ids or ()))
        scope.prefetches[target] = pf
        if ids is None:
            pf.record.refused = self.admission.refusal
        elif self._send(scope, pf, ids):
            self._instruments.record_issued(self.workflow.name)
        return pf

    def _send(
        self, scope: StepScope, pf: Prefetch, ids: list[int], replace: Request | None = None
    ) -> bool:
        """Submit ``ids`` speculatively for ``pf`` (superseding ``replace``), or share another
        candidate's live request for the very same tokens (nothing is sent twice). False when
        admission refused it: nothing was sent."""
        key = hash(tuple(ids))
        req = shared_request(scope.prefetches, pf, key, len(ids))
        if req is not None:
            pf.requests.append(req)
            pf.record.tokens = max(pf.record.tokens, len(ids))
        else:
            work = self._choice.new_tokens(pf.record.target, ids)
            req = self._sender.submit(
                pf, ids, Priority.SPECULATIVE, key=key, replace=replace, work=work
            )
            if req is None:
                pf.record.refused = self.admission.refusal
                return False
            if self._fills:  # its end may leave the engine idle
                assert req.task is not None
                req.task.add_done_callback(lambda _: self._fill(scope))
        pf.ids = ids
        self._choice.sent(pf.record.target, ids)
        return True

    def _fill(self, scope: StepScope) -> None:
        """One of ``scope``'s speculative prefills ended: fill the idle time (:mod:`.fill`)."""
        if scope not in self._open:
            return
        try:
            limits = self.guardrail.limits(self.policy)
            if idle_now(scope, self._choice, limits):
                for name, rank, p, ids in self._choice.to_send(scope, limits, fill=True):
                    self._start(scope, name, p, rank, ids).record.filled = True
        except Exception as exc:
            self._swallow(exc, "filling idle time in step %r", scope.spec.name)

    # --- resolve ----------------------------------------------------------------------------

    def resolve(self, scope: StepScope, actual: Sequence[str]) -> set[str]:
        """The step chose ``actual``: settle every prefetch; return the targets that were hits.

        Does not wait for the engine: losers are stopped and settled once their requests end.
        """
        self._open.discard(scope)
        if self.policy.enabled:
            called_llm = scope.step_record.llm_calls > 0
            self.timing.observe(scope.spec.name, called_llm, scope.lead_s)
        hits = hit_targets(scope.prefetches, actual)
        kept: set[int] = set()
        for target in hits:
            pf = scope.prefetches[target]
            for req in pf.requests:
                req.credit = pf  # a request shared with a loser serves the winner
                if req.waiting:
                    # Still waiting for a speculative slot: the live request (or confirmed
                    # warm-up) takes over its prefix at once instead of waiting behind it.
                    self._sender.stop(req)
                    continue
                kept.add(id(req))
                if req.ticket is not None:
                    self.admission.promote(req.ticket)  # a live request reuses it
        for target, pf in scope.prefetches.items():
            if target in hits:
                pf.record.outcome = PrefetchOutcome.HIT
                self._instruments.record_hit(self.workflow.name)
                self._settler.settle(pf, hit=True)
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

    def _drop(self, pf: Prefetch, kept: Collection[int] = ()) -> None:
        """Stop ``pf``'s requests (except those in ``kept``, shared with a hit) and settle it."""
        pf.ids = None  # a loser's ids are not needed any more
        for req in pf.requests:
            if id(req) not in kept:
                self._sender.stop(req)
        self._settler.settle(pf, hit=False)

    def _observe(self, scope: StepScope, actual: Sequence[str]) -> None:
        try:
            for nxt in actual:  # in the context of the latest prediction: the step's end
                observe_with(self.predictor, scope.path, nxt, scope.context)
            chosen = chosen_of(scope.prefetches, scope.held)
            scored = scored_branch(chosen, scope.first_predictions, actual, self.policy)
            if scored is not None:
                self.guardrail.observe(scored[0], self.policy, promised=scored[1])
        except Exception as exc:
            self._swallow(exc, "updating the predictor after step %r", scope.spec.name)

    # --- confirmed warm-up and the live request ---------------------------------------------

    def warm(self, scope: StepScope, target: str) -> None:
        """Send the actual next node's full known prefix at once (not speculation).

        Not sent when it would add nothing: the node is seen not to call the LLM, or to call it
        within ``warm_min_lead_s`` of its step start (the warm-up would reach the engine with
        the live request), or a speculative hit already sent these very tokens. On engines that
        cannot reuse an in-flight prefill, the warm-up (or the node's live request) waits for a
        still-running speculative hit of the same target, so no token is computed twice
        (:func:`~agentwarm.runtime.prefetch.rules.plan_warm_up`).
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
            plan = plan_warm_up(
                hit.latest if hit is not None else None,
                len(ids),
                supports_promotion=self.engine.supports_promotion,
            )
            if plan.covered_by is not None:
                self._warm_ups.cover(target, plan.covered_by)
            if not plan.send:
                return
            pf = self._new_prefetch(scope, target, PrefetchKind.CONFIRMED, 1.0, 0, len(ids))
            self._sender.submit(pf, ids, Priority.LIVE, after=plan.after)
            self._choice.sent(target, ids)
            self._warm_ups.sent(target, pf)
        except Exception as exc:
            self._swallow(exc, "warming the prefix of %r", target)

    async def before_live(self, node: str) -> None:
        """Called before a node's live request (:meth:`WarmUps.before_live`); the idle time
        since the run's last speculation ends."""
        self._choice.live()
        self._sender.live()
        await self._warm_ups.before_live(node)

    def _pending(self) -> list[asyncio.Task[Any]]:
        """Tasks the run's records still wait for: requests of unsettled prefetches, aborts."""
        return [*self._settler.pending(), *self._sender.background]

    async def aclose(self) -> None:
        """Stop what is still running, settle every record and span (bounded wait)."""
        for scope in list(self._open):
            self.abandon(scope)
        # The run is over: nothing will reuse a request still running (a hit the live request
        # did not wait for). Stop it, so the run's end never waits for speculative queues.
        for pf in self._all:
            for req in pf.requests:
                if req.running:
                    self._sender.stop(req)
        self._warm_ups.close()
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
            await self._sender.cancel_background()
        # Done callbacks of requests that ended last may not have run yet: settle here.
        self._settler.finish_all()
