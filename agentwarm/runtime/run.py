"""One workflow run: the step loop, every live LLM call, and every ``StepRecord`` write.

Node functions reach their run only through :class:`~agentwarm.runtime.context.RunPort`
(:meth:`Run.llm`, :meth:`Run.transcript_grew`), which :class:`Run` satisfies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from agentwarm import telemetry as tm
from agentwarm._spec import END, START
from agentwarm.chat import split_tool_calls
from agentwarm.engines.base import Completion, Engine, Priority, new_rid
from agentwarm.errors import (
    ContextLengthExceeded,
    EngineError,
    MaxStepsExceeded,
    NodeError,
    WorkflowError,
)
from agentwarm.runtime.admission import Limits, admission_for
from agentwarm.runtime.branches import Arrival, Mark, all_or_cancel, merge
from agentwarm.runtime.context import Context
from agentwarm.runtime.node_call import call_node, next_nodes, timed_out
from agentwarm.runtime.prefetch import Prefetcher, StepScope
from agentwarm.runtime.prefetch.misses import HitProbe, marks_of
from agentwarm.runtime.prompt import PromptRenderer
from agentwarm.runtime.records import StepRecord
from agentwarm.runtime.result import RunResult
from agentwarm.runtime.transcript import Transcript

if TYPE_CHECKING:
    from agentwarm.graphs import CompiledGraph
    from agentwarm.predictors import Predictor
    from agentwarm.runtime.guardrail import Guardrail
    from agentwarm.runtime.policy import PrefetchPolicy
    from agentwarm.runtime.prefetch.spend import SentPrefixes, SpendEstimator
    from agentwarm.runtime.timing import StepTiming

__all__ = ("Run",)

log = logging.getLogger(__name__)


class Run:
    """One execution of a workflow: owns the step loop, the transcript and the prefetcher.

    Branches (a node returning several successors) run concurrently; each branch stops before a
    join node, and the join runs once every branch of the fan-out has arrived or ended.
    """

    def __init__(
        self,
        *,
        workflow: CompiledGraph,
        engine: Engine,
        predictor: Predictor,
        guardrail: Guardrail,
        timing: StepTiming,
        spend: SpendEstimator,
        sent: SentPrefixes,
        policy: PrefetchPolicy,
        input: str,
        state: dict[str, Any] | None,
        namespace: str,
        run_id: str | None,
    ) -> None:
        self.workflow = workflow
        self.engine = engine
        self.policy = policy
        self.input = input
        self.state: dict[str, Any] = state if state is not None else {}
        self.namespace = namespace
        self.run_id = run_id or new_rid()
        self.transcript = Transcript()
        self.renderer = PromptRenderer(engine, self.transcript)
        self.tracer = tm.get_tracer()
        self.instruments = tm.instruments()
        self.steps: list[StepRecord] = []
        self.path: list[str] = []
        self._predictor = predictor
        self._guardrail = guardrail
        self._timing = timing
        self._spend, self._sent = spend, sent  # what the choice by value learns
        self.prefetcher: Prefetcher

    async def execute(self) -> RunResult:
        t0 = time.perf_counter()
        # One admission (rate and budget of speculation) per engine, shared by all its runs.
        admission = admission_for(self.engine)
        if self.policy.enabled and not admission.sized:
            try:
                admission.size((await self.engine.stats()).capacity_tokens)
            except Exception as exc:
                log.warning("engine stats unavailable (%s); prefetch budget uncapped", exc)
        # The engine's counts, held to this run's own limits (other runs keep theirs).
        limits = Limits.of(self.policy, admission.capacity_tokens)
        self.prefetcher = Prefetcher(
            workflow=self.workflow,
            engine=self.engine,
            renderer=self.renderer,
            predictor=self._predictor,
            guardrail=self._guardrail,
            timing=self._timing,
            policy=self.policy,
            admission=admission.bind(limits),
            run_id=self.run_id,
            namespace=self.namespace,
            spend=self._spend,
            sent=self._sent,
            transcript=self.transcript,
        )
        with self.tracer.start_as_current_span(
            tm.workflow_span_name(self.workflow.name),
            attributes=tm.workflow_attributes(self.workflow.name, self.run_id),
        ) as span:
            try:
                await self._branch(Arrival(self.workflow.entry, (), START), in_fanout=False)
            finally:
                await self.prefetcher.aclose()
            span.set_attributes(
                tm.workflow_result_attributes([s.index for s in self.steps if END in s.next])
            )
        return RunResult(
            workflow=self.workflow.name,
            run_id=self.run_id,
            input=self.input,
            path=self.path,
            steps=self.steps,
            state=self.state,
            duration_s=time.perf_counter() - t0,
            guardrail_level=str(self._guardrail.level),
        )

    async def _branch(
        self, at: Arrival, *, in_fanout: bool, run_join: bool = False
    ) -> list[Arrival]:
        """Run steps from ``at.node`` until END. Inside a fan-out, stop before a join node and
        return the arrival there (``run_join`` runs the starting join instead)."""
        force = run_join
        while at.node != END:
            if in_fanout and self.workflow.nodes[at.node].join and not force:
                return [at]
            force = False
            nexts, marks, path = await self._step(at)
            if len(nexts) == 1:
                at = Arrival(nexts[0], path, path[-1], marks.get(nexts[0]))
                continue
            branches = [
                self._branch(Arrival(n, path, path[-1], marks.get(n)), in_fanout=True)
                for n in nexts
                if n != END
            ]
            merged = merge(await all_or_cancel(branches))
            if not merged:
                return []
            if len(merged) > 1:
                runs = [self._branch(m, in_fanout=in_fanout, run_join=True) for m in merged]
                return [a for arrivals in await all_or_cancel(runs) for a in arrivals]
            at = merged[0]
            force = True
        return []

    async def _step(self, at: Arrival) -> tuple[list[str], dict[str, Mark], tuple[str, ...]]:
        node, from_node, prefetched = at.node, at.from_node, at.prefetched
        if len(self.steps) >= self.workflow.max_steps:
            raise MaxStepsExceeded(
                f"Workflow '{self.workflow.name}' ran {len(self.steps)} steps without reaching "
                f"END (last node '{node}'); raise compile(max_steps=...) or fix the loop"
            )
        spec = self.workflow.nodes[node]
        path = (*at.path, node)
        record = StepRecord(
            index=len(self.steps),
            node=node,
            from_node=from_node,
            path=list(path),
            prefetched=prefetched,
            miss=None if isinstance(at.mark, HitProbe) else at.mark,
        )
        self.steps.append(record)
        self.path.append(node)
        scope = StepScope(
            step_record=record,
            spec=spec,
            path=path,
            state=self.state,
            prefetch_records=record.prefetches,
            probe=at.mark if isinstance(at.mark, HitProbe) else None,
        )
        t0 = time.perf_counter()
        with self.tracer.start_as_current_span(
            tm.step_span_name(node),
            attributes=tm.step_attributes(
                workflow=self.workflow.name,
                run_id=self.run_id,
                index=record.index,
                from_node=from_node,
                node=node,
                prefetched=prefetched,
                outcome=record.outcome,
            ),
        ) as span:
            if self.policy.enabled:
                self.prefetcher.begin_step(scope)
            try:
                ctx = Context(
                    input=self.input,
                    state=self.state,
                    transcript=self.transcript,
                    node=node,
                    path=path,
                    run_id=self.run_id,
                    step_index=record.index,
                    _run=self,
                    _scope=scope,
                )
                limit = self.workflow.step_timeout_s if spec.timeout_s is None else spec.timeout_s
                deadline = asyncio.timeout(limit)
                try:
                    async with deadline:
                        result = await call_node(spec, ctx)
                except (WorkflowError, EngineError) as exc:
                    # Engine failures of live requests keep their type (EngineUnavailable, ...);
                    # the step's node is attached for the error report.
                    if exc.node is None:
                        exc.node = node
                    raise
                except Exception as exc:
                    span.record_exception(exc)
                    span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
                    if isinstance(exc, TimeoutError) and deadline.expired():
                        assert limit is not None
                        raise timed_out(spec, limit) from None
                    raise NodeError(
                        f"Node '{node}' raised {type(exc).__name__}: {exc}", node=node
                    ) from exc
                nexts = next_nodes(node, result, self.workflow.successors(node))
            except BaseException:
                # Failed or cancelled: stop this step's prefetches, settle their spans.
                self.prefetcher.abandon(scope)
                raise
            record.next = list(nexts)
            hits = self.prefetcher.resolve(scope, nexts)
            marks: dict[str, Mark] = {**marks_of(scope, nexts, hits, enabled=self.policy.enabled)}
            for n in nexts:
                self.prefetcher.warm(scope, n)
            record.duration_s = (end := time.perf_counter()) - t0
            if scope.mid_hint is not None:  # the lead a mid-decode hint gave its prefetch
                record.note_hint(scope.mid_hint, scope.started, end)
            span.set_attributes(
                tm.step_result_attributes(
                    ttft_s=record.ttft_s,
                    prompt_tokens=record.prompt_tokens,
                    cached_tokens=record.cached_tokens,
                    disk_cached_tokens=record.disk_cached_tokens,
                    hint_node=record.hint_node,
                    hint_lead_s=record.hint_lead_s,
                    hint_gain_s=record.hint_gain_s,
                    miss=record.miss,
                )
            )
        return nexts, marks, path

    # --- the port a step's Context uses (RunPort) ---------------------------------------------

    async def llm(
        self,
        scope: StepScope,
        text: str | None,
        *,
        max_tokens: int | None,
        temperature: float,
        seed: int | None,
        record: bool,
    ) -> Completion:
        """One live LLM call of the step ``scope`` (:meth:`Context.llm <agentwarm.Context.llm>`):
        render the node's prompt, wait for its warm-up where needed, generate, read the tool
        calls of the reply (when the engine's chat template names a known format), record the
        step's first-call figures, append the exchange to the transcript, refresh the
        prefetches."""
        spec, step_record = scope.spec, scope.step_record
        t0 = time.perf_counter()
        first = step_record.llm_calls == 0
        step_record.llm_calls += 1
        if first:
            scope.lead_s = t0 - scope.started
        ids = self.renderer.prompt_ids(spec, text)
        if first and scope.probe is not None:
            scope.probe.at_live()  # was the hit's prefetch done as its live request came?
        await self.prefetcher.before_live(spec.name)
        tokens = max_tokens if max_tokens is not None else spec.max_tokens
        with self.tracer.start_as_current_span(
            tm.llm_span_name(self.engine.model_name),
            kind=self.engine.span_kind,
            attributes=tm.llm_request_attributes(
                model=self.engine.model_name,
                provider=self.engine.provider_name,
                max_tokens=tokens,
                temperature=temperature,
                agent=spec.name,
            ),
        ) as span:
            if tm.capture_content():
                span.set_attribute(tm.GEN_AI_INPUT_MESSAGES, text or "")
            t_send = time.perf_counter()
            params: dict[str, Any] = dict(
                max_tokens=tokens,
                temperature=temperature,
                priority=Priority.LIVE,
                namespace=self.namespace,
                session=self.run_id,
                seed=seed,
            )
            try:  # streamed when its output may name the next step before it ends (a hint)
                completion = await self.prefetcher.generate(scope, ids, params)
            except ContextLengthExceeded as exc:
                error = ContextLengthExceeded(
                    f"Node '{spec.name}': {exc}",
                    prompt_tokens=exc.prompt_tokens,
                    max_tokens=exc.max_tokens,
                    limit=exc.limit,
                )
                error.node = spec.name
                raise error from exc
            ttft = (t_send - t0) + completion.ttft_s
            span.set_attributes(
                tm.llm_response_attributes(
                    input_tokens=completion.prompt_tokens,
                    output_tokens=len(completion.token_ids),
                    cached_tokens=completion.cached_tokens,
                    finish_reason=completion.finish_reason,
                    ttft_s=ttft,
                )
            )
            if tm.capture_content():
                span.set_attribute(tm.GEN_AI_OUTPUT_MESSAGES, completion.text)
        if first:
            step_record.ttft_s = ttft
            step_record.note_tokens(completion)
            if scope.probe is not None:
                where = functools.partial(self.renderer.boundary, spec)
                step_record.miss = scope.probe.short(ids, completion.cached_tokens, where)
            self.instruments.record_ttft(self.workflow.name, ttft, step_record.outcome)
        content = completion.text
        family = self.renderer.tool_call_family
        if family is not None:
            content, calls = split_tool_calls(completion.text, family)
            if calls:
                completion = dataclasses.replace(completion, tool_calls=calls)
        if record:
            if text:
                self.transcript.add(text, role="user", node=spec.name)
            # As an OpenAI endpoint returns it: the calls apart, the text without them.
            self.transcript.add(
                content, role="assistant", node=spec.name, tool_calls=completion.tool_calls
            )
        self.prefetcher.refresh(scope, completion.text)
        return completion

    def transcript_grew(self, scope: StepScope) -> None:
        """The step ``scope`` added a message (:meth:`agentwarm.Context.add`): extend the
        prefetched prefixes with it (and re-rank on it, :meth:`Prefetcher.refresh`)."""
        self.prefetcher.refresh(scope, after_llm=False)
