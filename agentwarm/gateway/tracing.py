"""The gateway's spans: the same ones ``agentwarm run`` writes, so ``agentwarm stats --trace`` and
``agentwarm graph --trace`` read a gateway's trace like a workflow's.

A *session* is a workflow run and a *head* is a node. Per session::

    invoke_workflow {workflow}      the run: opened at the session's first step, ended by
    │                               session_end (the session ended) or close (shutdown)
    ├── invoke_agent {node}         one per live request, ended when its reply is complete
    │   └── agentwarm.prefill       one per prefetch issued after that step, ended when settled
    └── ...

The attributes are those of the runtime's spans (:mod:`agentwarm.telemetry.attributes`):
workflow (``"gateway"`` by default), run id, step index, from node, node, prefetched, outcome,
TTFT, prompt and cached tokens; prefill source, target, kind, tokens, outcome and computed
tokens. The runtime's metric instruments are recorded too (TTFT by outcome; prefetches issued,
hit, dropped; wasted tokens). Spans go to the global tracer provider: what the process owner
configured (``agentwarm gateway --trace FILE`` / ``--otlp URL``, :func:`agentwarm.telemetry.
configure`), nothing otherwise.

How a session becomes a run: a gateway session never returns, so its run span is opened (not
yet exported) at its first step and is the parent of its steps' spans; the run ends when the
learner ends the session (idle, or least recently used) or the gateway stops, and only then is
its span written (what of the session completes after that, a reply or an abort ending late,
still joins that run). A session the learner ended is a *completed* run whose last step moved to
END (``agentwarm.run.end_steps`` empty: the reader takes the run's last step), as the learner's
predictor learns END after a session's last node; one still open at shutdown is not completed
(its agent may go on), so it has no edge into ``__end__``. The statistics do not wait for run
spans:
steps and prefills count as soon as they are written, and the runs are the distinct run ids of
the steps. A run id is the session id and a random suffix (a hinted session id may return after
its session was dropped, or in another gateway process writing the same file).

Rules for callers (the learner): call :meth:`~GatewayTracer.step` once per step, when its
reply is complete (whatever its status); :meth:`~GatewayTracer.prefetch` once per prefetch, once
it is *settled*: its outcome set and its request ended (``computed_tokens`` final), with the
node of the step it followed as ``source``; :meth:`~GatewayTracer.session_end` for every session
it ends, and :meth:`~GatewayTracer.close` at shutdown. All on the learner's event loop.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace
from opentelemetry.context import Context

from agentwarm import telemetry as tm
from agentwarm._spec import START, Miss, PrefetchKind, PrefetchOutcome
from agentwarm.stats.definitions import StepLike, has_previous, step_outcome

__all__ = ("ENDED_RUNS", "GATEWAY_WORKFLOW", "GatewayTracer", "PrefetchLike")

#: The workflow name of the gateway's runs, unless the tracer is given another.
GATEWAY_WORKFLOW = "gateway"

_NS = 1_000_000_000
#: How many ended runs are remembered for the prefetches of theirs settled after they ended.
ENDED_RUNS = 1024


class PrefetchLike(Protocol):
    """What the tracer reads of a prefetch (:class:`agentwarm.gateway.learner.Prefetch`)."""

    @property
    def node(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def tokens(self) -> int: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def computed_tokens(self) -> int: ...


@dataclass(slots=True)
class _Run:
    """One session's run: its span (open until the session ends) and its last step."""

    span: trace.Span
    run_id: str
    steps: int = 0
    last_node: str = START
    last_step: trace.SpanContext | None = None


class GatewayTracer:
    """Writes the gateway's steps, prefetches and sessions as runtime spans (module docstring).

    ``workflow`` names the runs' workflow; ``tracer`` and ``instruments`` default to agentwarm's
    (from the global providers); ``clock_ns`` gives the wall-clock time of an event in ns.
    """

    def __init__(
        self,
        workflow: str = GATEWAY_WORKFLOW,
        *,
        tracer: trace.Tracer | None = None,
        instruments: tm.Instruments | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        if not workflow:
            raise ValueError("GatewayTracer(workflow=''): give the runs a workflow name")
        self.workflow = workflow
        self._tracer = tracer or tm.get_tracer()
        self._instruments = instruments or tm.instruments()
        self._clock_ns = clock_ns
        self._runs: dict[str, _Run] = {}
        self._ended: OrderedDict[str, _Run] = OrderedDict()

    @property
    def open_runs(self) -> int:
        """Sessions whose run span is open (started, not ended)."""
        return len(self._runs)

    def run_id(self, session: str) -> str | None:
        """The run id of ``session``'s open run; ``None`` when it has none."""
        run = self._runs.get(session)
        return run.run_id if run is not None else None

    def step(
        self, session: str, step: StepLike, *, duration_s: float = 0.0, miss: Miss | None = None
    ) -> None:
        """A step of ``session`` whose reply is complete: its span, a child of the session's
        run, ending now and starting ``duration_s`` earlier (the request's time in the
        gateway), with its ``miss`` reason. A step from ``__start__`` opens a run unless one
        is open; another step joins the open run, else the one that ended last for the session
        (its reply completed after the session ended), else opens one."""
        end = self._clock_ns()
        start = end - max(0, round(duration_s * _NS))
        run = self._runs.get(session)
        if run is None and has_previous(step):
            run = self._ended.get(session)
        run = run or self._run(session, start)
        outcome = step_outcome(step)
        span = self._tracer.start_span(
            tm.step_span_name(step.node),
            context=trace.set_span_in_context(run.span),
            attributes={
                **tm.step_attributes(
                    workflow=self.workflow,
                    run_id=run.run_id,
                    index=run.steps,
                    from_node=step.from_node,
                    node=step.node,
                    prefetched=step.prefetched,
                    outcome=outcome,
                ),
                **tm.step_result_attributes(
                    ttft_s=step.ttft_s,
                    prompt_tokens=step.prompt_tokens,
                    cached_tokens=step.cached_tokens,
                    miss=miss,
                ),
            },
            start_time=start,
        )
        span.end(end_time=end)
        run.steps += 1
        run.last_node, run.last_step = step.node, span.get_span_context()
        if step.ttft_s is not None:
            self._instruments.record_ttft(self.workflow, step.ttft_s, outcome)

    def prefetch(self, session: str, pf: PrefetchLike, *, source: str | None = None) -> None:
        """A settled prefetch of ``session`` (outcome set, request ended): its prefill span.
        ``source`` is the node of the step it followed (default: the session's last traced
        step's); the span is the child of the session's last traced step when that step's node
        is ``source``, else of the run. It joins the session's open run, else the run that
        ended last for it (one of the last :data:`ENDED_RUNS`), else opens one.

        Raises ValueError for a prefetch without an outcome (not settled yet)."""
        if pf.outcome is None:
            raise ValueError(
                f"prefetch of node {pf.node!r} has no outcome: trace it once it is settled "
                "(outcome set and its request ended)"
            )
        now = self._clock_ns()
        run = self._runs.get(session) or self._ended.get(session) or self._run(session, now)
        source = source or run.last_node
        parent: trace.Span = run.span
        if run.last_step is not None and source == run.last_node:
            parent = trace.NonRecordingSpan(run.last_step)
        kind = PrefetchKind(pf.kind)
        attrs = tm.prefill_attributes(
            workflow=self.workflow,
            run_id=run.run_id,
            source=source,
            target=pf.node,
            kind=kind,
            tokens=pf.tokens,
        )
        attrs[tm.AW_PREFILL_OUTCOME] = str(pf.outcome)
        attrs[tm.AW_PREFILL_COMPUTED_TOKENS] = pf.computed_tokens
        span = self._tracer.start_span(
            tm.SPAN_PREFILL,
            context=trace.set_span_in_context(parent),
            attributes=attrs,
            start_time=now,
        )
        span.end(end_time=now)
        self._count(kind, pf)

    def session_end(self, session: str, *, completed: bool = True) -> None:
        """``session`` ended: end (and so write) its run span, ``completed`` (its last step moved
        to END) unless told otherwise. Nothing when it has no open run. What of it completes
        later (a reply, a prefetch's abort) still joins this run."""
        run = self._runs.pop(session, None)
        if run is None:
            return
        if completed and run.steps:
            run.span.set_attributes(tm.workflow_result_attributes(()))
        run.span.end(end_time=self._clock_ns())
        self._ended[session] = run
        self._ended.move_to_end(session)
        while len(self._ended) > ENDED_RUNS:
            self._ended.popitem(last=False)

    def close(self) -> None:
        """The gateway stops: end every open run span, not completed (their agents may go on);
        call it before telemetry shuts down."""
        for session in list(self._runs):
            self.session_end(session, completed=False)

    def _run(self, session: str, start_ns: int) -> _Run:
        run = self._runs.get(session)
        if run is None:
            run_id = f"{session}.{secrets.token_hex(4)}"
            span = self._tracer.start_span(
                tm.workflow_span_name(self.workflow),
                context=Context(),  # a root, whatever is current: each run is its own trace
                attributes=tm.workflow_attributes(self.workflow, run_id),
                start_time=start_ns,
            )
            run = self._runs[session] = _Run(span=span, run_id=run_id)
            self._ended.pop(session, None)
        return run

    def _count(self, kind: PrefetchKind, pf: PrefetchLike) -> None:
        if kind != PrefetchKind.SPECULATIVE:
            return
        if pf.outcome == PrefetchOutcome.DROPPED:
            self._instruments.record_dropped(self.workflow)
            return
        self._instruments.record_issued(self.workflow)
        if pf.outcome == PrefetchOutcome.HIT:
            self._instruments.record_hit(self.workflow)
        else:
            self._instruments.record_wasted(self.workflow, pf.computed_tokens)
