"""The prefetcher: owns every in-flight speculative prefill of a run (DESIGN §5).

Lifecycle per step::

    begin_step   predict successors → choose candidates (top-N, min_p, token budget)
                 → submit speculative prefills (rate-limited, low priority)
    refresh      after each LLM call of the step: re-send the candidates' now longer prefixes
                 (the step's own output is in the transcript) and add a successor the output
                 names, if any
    resolve      the step returned its next node(s): winners are hits (left running, the real
                 request reuses them), losers are aborted; the predictor and guardrail observe
    warm         the actual next node's full known prefix is sent at once (a "confirmed" warm-up)

Nothing here may break a workflow: every speculative failure is logged and counted as outcome
``failed``; only the live request path raises.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from asyncio_throttle import Throttler
from opentelemetry import trace

from agentwarm import telemetry as tm
from agentwarm.engines.base import Engine, PrefillResult, Priority, new_rid
from agentwarm.graphs._node import END, NodeSpec
from agentwarm.runtime.guardrail import Guardrail
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.prompt import PromptRenderer
from agentwarm.runtime.result import CONFIRMED, SPECULATIVE, Outcome, PrefetchRecord, StepRecord

if TYPE_CHECKING:
    from agentwarm.graphs._workflow import Workflow
    from agentwarm.predictors import Predictor

__all__ = ("Prefetcher", "StepScope")

log = logging.getLogger(__name__)

_ABORT_WAIT_S = 5.0


@dataclass(eq=False)
class _Prefetch:
    record: PrefetchRecord
    span: trace.Span
    rid: str = ""
    ids_len: int = 0
    task: asyncio.Task[PrefillResult | None] | None = None
    tasks: list[asyncio.Task[PrefillResult | None]] = field(default_factory=list)
    failed: bool = False

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def pending(self) -> list[asyncio.Task[PrefillResult | None]]:
        return [t for t in self.tasks if not t.done()]


@dataclass(eq=False)
class StepScope:
    """The prefetcher's view of one running step."""

    step: StepRecord
    spec: NodeSpec
    path: tuple[str, ...]
    state: Mapping[str, Any]
    started: float = field(default_factory=time.perf_counter)
    predictions: list[tuple[str, float]] = field(default_factory=list)
    prefetches: dict[str, _Prefetch] = field(default_factory=dict)


class Prefetcher:
    """Speculative prefetching for one workflow run on one engine."""

    def __init__(
        self,
        *,
        workflow: Workflow,
        engine: Engine,
        renderer: PromptRenderer,
        predictor: Predictor,
        guardrail: Guardrail,
        policy: PrefetchPolicy,
        throttler: Throttler,
        run_id: str,
        namespace: str,
        capacity_tokens: int | None,
    ) -> None:
        self.workflow = workflow
        self.engine = engine
        self.renderer = renderer
        self.predictor = predictor
        self.guardrail = guardrail
        self.policy = policy
        self.throttler = throttler
        self.run_id = run_id
        self.namespace = namespace
        self.budget = policy.max_prefetch_tokens
        if capacity_tokens:
            self.budget = min(self.budget, int(capacity_tokens * policy.capacity_fraction))
        self._tracer = tm.get_tracer()
        self._instruments = tm.instruments()
        self._confirmed: dict[str, _Prefetch] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.failures = 0

    # --- choose and submit ------------------------------------------------------------------

    def begin_step(self, scope: StepScope) -> None:
        """Predict the successors of ``scope``'s node and submit speculative prefills."""
        try:
            candidates = self.workflow.successors(scope.spec.name)
            scope.predictions = list(
                self.predictor.predict(scope.path, scope.state, candidates=candidates)
            )
            limits = self.guardrail.limits(self.policy)
            if limits.paused:
                return
            chosen = [
                (rank, name, p)
                for rank, (name, p) in enumerate(scope.predictions)
                if name != END and p >= limits.min_p
            ][: limits.top_n]
            spent = 0
            for rank, name, p in chosen:
                ids = self.renderer.prefix_ids(self.workflow.nodes[name])
                if spent + len(ids) > self.budget:
                    break
                spent += len(ids)
                self._start(scope, name, p, rank, ids)
        except Exception as exc:
            self._swallow(exc, "choosing prefetch candidates in step %r", scope.spec.name)

    def refresh(self, scope: StepScope, output_text: str = "") -> None:
        """After an LLM call of the step: extend the candidates' prefixes with the new transcript.

        With ``use_output_hints``, a declared successor named (as a word) in the call's output
        is added as a candidate: the step's own output often names the next tool.
        """
        if not self.policy.refresh_after_llm or self.guardrail.limits(self.policy).paused:
            return
        try:
            targets = [t for t, pf in scope.prefetches.items() if not pf.failed]
            hinted = self._hinted(scope, output_text)
            if hinted is not None and hinted not in scope.prefetches:
                targets.append(hinted)
            spent = 0
            for target in targets:
                ids = self.renderer.prefix_ids(self.workflow.nodes[target])
                if spent + len(ids) > self.budget:
                    break
                spent += len(ids)
                pf = scope.prefetches.get(target)
                if pf is None:
                    p = dict(scope.predictions).get(target, 0.0)
                    self._start(scope, target, p, -1, ids)
                elif len(ids) > pf.ids_len:
                    if pf.running:
                        self._spawn(self.engine.abort(pf.rid))
                    self._submit(pf, ids, Priority.SPECULATIVE)
        except Exception as exc:
            self._swallow(exc, "refreshing prefetched prefixes in step %r", scope.spec.name)

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
            if n != END and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)
        ]
        return named[0] if len(named) == 1 else None

    def _start(
        self, scope: StepScope, target: str, p: float, rank: int, ids: list[int]
    ) -> _Prefetch:
        record = PrefetchRecord(
            target=target,
            probability=p,
            rank=rank,
            kind=SPECULATIVE,
            tokens=len(ids),
            issued_after_s=time.perf_counter() - scope.started,
        )
        span = self._tracer.start_span(
            tm.SPAN_PREFILL,
            attributes=tm.prefill_attributes(
                workflow=self.workflow.name,
                run_id=self.run_id,
                source=scope.spec.name,
                target=target,
                kind=SPECULATIVE,
                tokens=len(ids),
                probability=p,
                rank=rank,
            ),
        )
        pf = _Prefetch(record=record, span=span)
        scope.prefetches[target] = pf
        scope.step.prefetches.append(record)
        self._instruments.record_issued(self.workflow.name)
        self._submit(pf, ids, Priority.SPECULATIVE)
        return pf

    def _submit(self, pf: _Prefetch, ids: list[int], priority: int) -> None:
        pf.rid = new_rid()
        pf.ids_len = len(ids)
        pf.record.tokens = max(pf.record.tokens, len(ids))
        pf.record.requests += 1
        pf.task = asyncio.get_running_loop().create_task(self._prefill(pf, ids, pf.rid, priority))
        pf.tasks.append(pf.task)

    async def _prefill(
        self, pf: _Prefetch, ids: list[int], rid: str, priority: int
    ) -> PrefillResult | None:
        try:
            async with self.throttler:
                result = await asyncio.wait_for(
                    self.engine.prefill(
                        ids,
                        priority=priority,
                        rid=rid,
                        namespace=self.namespace,
                        session=self.run_id,
                    ),
                    timeout=self.policy.prefill_timeout_s,
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            pf.failed = True
            self.failures += 1
            log.warning(
                "prefetch of %r failed (%s: %s); the workflow continues without it",
                pf.record.target,
                type(exc).__name__,
                exc,
            )
            if isinstance(exc, TimeoutError):
                self._spawn(self._quiet_abort(rid))
            return None
        pf.record.computed_tokens += result.computed_tokens
        return result

    async def _quiet_abort(self, rid: str) -> None:
        try:
            await self.engine.abort(rid)
        except Exception as exc:
            log.debug("abort of %s failed: %s", rid, exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- resolve ----------------------------------------------------------------------------

    async def resolve(self, scope: StepScope, actual: Sequence[str]) -> set[str]:
        """The step chose ``actual``: settle every prefetch; return the targets that were hits."""
        hits: set[str] = set()
        losers: list[_Prefetch] = []
        for target, pf in scope.prefetches.items():
            if target in actual and not pf.failed:
                hits.add(target)
                pf.record.outcome = Outcome.HIT
                self._instruments.record_hit(self.workflow.name)
                if pf.running and pf.task is not None:
                    # Left running: the real request reuses (or waits for) its work.
                    self._background.add(pf.task)
                    pf.task.add_done_callback(self._background.discard)
                    pf.task.add_done_callback(functools.partial(self._end_span_cb, pf))
                else:
                    self._end_span(pf)
            else:
                losers.append(pf)
        for pf in losers:
            if pf.running:
                pf.record.outcome = Outcome.CANCELLED
                await self._quiet_abort(pf.rid)
            else:
                pf.record.outcome = Outcome.FAILED if pf.failed else Outcome.WASTED
        for pf in losers:
            pending = pf.pending
            if pending:
                _, still = await asyncio.wait(pending, timeout=_ABORT_WAIT_S)
                if still:
                    log.warning("prefetch of %r did not stop after abort", pf.record.target)
            if pf.failed and pf.record.outcome == Outcome.WASTED:
                pf.record.outcome = Outcome.FAILED
            self._instruments.record_wasted(self.workflow.name, pf.record.computed_tokens)
            self._end_span(pf)
        self._observe(scope, actual)
        return hits

    def _observe(self, scope: StepScope, actual: Sequence[str]) -> None:
        try:
            for nxt in actual:
                self.predictor.observe(scope.path, nxt)
            real = [a for a in actual if a != END]
            if real:
                p = self.policy
                would = {n for n, prob in scope.predictions if n != END and prob >= p.min_p}
                top = [n for n, prob in scope.predictions if n in would][: p.top_n]
                self.guardrail.observe(any(a in top for a in real))
        except Exception as exc:
            self._swallow(exc, "updating the predictor after step %r", scope.spec.name)

    def _end_span_cb(self, pf: _Prefetch, _task: object) -> None:
        self._end_span(pf)

    def _end_span(self, pf: _Prefetch) -> None:
        pf.span.set_attribute(tm.AW_PREFILL_OUTCOME, pf.record.outcome or Outcome.FAILED)
        pf.span.set_attribute(tm.AW_PREFILL_COMPUTED_TOKENS, pf.record.computed_tokens)
        pf.span.set_attribute(tm.AW_PREFILL_TOKENS, pf.record.tokens)
        pf.span.end()

    # --- confirmed warm-up and the live request ---------------------------------------------

    def warm(self, scope: StepScope, target: str) -> None:
        """Send the actual next node's full known prefix at once (not speculation)."""
        if not (self.policy.enabled and self.policy.warm_confirmed) or target == END:
            return
        try:
            ids = self.renderer.prefix_ids(self.workflow.nodes[target])
            record = PrefetchRecord(
                target=target,
                probability=1.0,
                rank=0,
                kind=CONFIRMED,
                tokens=len(ids),
                issued_after_s=time.perf_counter() - scope.started,
            )
            span = self._tracer.start_span(
                tm.SPAN_PREFILL,
                attributes=tm.prefill_attributes(
                    workflow=self.workflow.name,
                    run_id=self.run_id,
                    source=scope.spec.name,
                    target=target,
                    kind=CONFIRMED,
                    tokens=len(ids),
                ),
            )
            pf = _Prefetch(record=record, span=span)
            scope.step.prefetches.append(record)
            self._submit(pf, ids, Priority.LIVE)
            self._confirmed[target] = pf
            assert pf.task is not None
            pf.task.add_done_callback(functools.partial(self._finish_confirmed, pf))
        except Exception as exc:
            self._swallow(exc, "warming the prefix of %r", target)

    def _finish_confirmed(self, pf: _Prefetch, _task: object = None) -> None:
        pf.record.outcome = Outcome.FAILED if pf.failed else Outcome.HIT
        self._end_span(pf)

    async def before_live(self, node: str) -> None:
        """Called before a node's live request: on engines that cannot reuse an in-flight
        prefill, wait for the confirmed warm-up of this node so its work is not done twice."""
        pf = self._confirmed.pop(node, None)
        if pf is None or self.engine.supports_promotion or pf.task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(pf.task), self.policy.prefill_timeout_s)
        except Exception:
            log.debug("confirmed warm-up of %r did not finish; sending the request anyway", node)

    async def aclose(self) -> None:
        """Abort what is still running and wait for it (bounded); called when the run ends."""
        for pf in self._confirmed.values():
            if pf.running:
                self._spawn(self._quiet_abort(pf.rid))
        self._confirmed.clear()
        pending = [t for t in self._background if not t.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=_ABORT_WAIT_S)
            for t in still:
                t.cancel()
