"""The gateway's learner: the :class:`~agentwarm.gateway.types.Hooks` that learn the agent graph
from live traffic and prefetch the likely next requests of each session.

Per live request (``on_request``, before it is forwarded; lookups only):

1. Its node is its head (:class:`~agentwarm.gateway.heads.HeadRegistry`), its session the
   hinted one or the one whose conversation it continues
   (:class:`~agentwarm.gateway.sessions.SessionTracker`).
2. The session's prefetches are settled: the one for this node is a hit, the others are
   aborted (their computed tokens are wasted). The transition from the session's previous node
   feeds the predictor (:func:`~agentwarm.predictors.default_predictor`, over node names, with
   the conversation its last prediction read) and the guardrail (a branch hit when this node
   was among the targets the session chose to prefetch or the guardrail held back, else among
   its first predictions, with the probability they promised: :meth:`~agentwarm.gateway.live.
   LiveSession.branch`, :class:`~agentwarm.runtime.guardrail.CalibratedGuardrail`); how this
   node's conversation
   relates to the session's last request feeds :class:`~agentwarm.gateway.prompts.Shapes`.
3. The request is routed to the session's worker.

Per reply (``on_response``, after it reached the client) and per tool call decoded in a stream
(``on_tool_call``): the next nodes are predicted from the session's path and conversation (the
request and its reply or tool call: :class:`~agentwarm.predictors.StepContext`), mixed with what
the tool called predicts (P(next node | tool), learned: LangGraph's ``transfer_to_X`` handoffs),
and the candidates the runtime's policy and guardrail allow (:func:`~agentwarm.runtime.prefetch.
spend.choose`, at the idle price) are prefilled upstream at speculative priority, each admitted
by the same rate and budget as the runtime's (:class:`~agentwarm.runtime.admission.Admission`):
their head + the conversation their shape predicts, rendered as the upstream renders it
(:class:`~agentwarm.gateway.prompts.Renderer`, off the event loop). A failed prefetch is logged
and counted, never raised. Figures use the runtime's definitions (:func:`~agentwarm.stats.
definitions.summarize_steps`) over the last :data:`WINDOW` steps. Tenants (``cache_salt``) never
share a session, a prefetch's namespace or a head; learning is pooled unless
``share_learning=False`` (:mod:`agentwarm.gateway.tenants` says why that is the default).
The learned state is saved every ``save_interval_s`` s (:class:`~agentwarm.gateway.autosave.
Autosave`) and at :meth:`Learner.aclose`: a crash loses at most that much learning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentwarm._spec import END, START, Miss, MissReason, PrefetchOutcome
from agentwarm.chat import Message
from agentwarm.gateway.autosave import SAVE_INTERVAL_S, Autosave
from agentwarm.gateway.heads import Head
from agentwarm.gateway.live import LiveSession
from agentwarm.gateway.prompts import Renderer, classify
from agentwarm.gateway.records import Prefetch, Step, figures
from agentwarm.gateway.sending import Sending
from agentwarm.gateway.sessions import SessionTracker, chain, extend
from agentwarm.gateway.state import GatewayState, load_state
from agentwarm.gateway.tenants import TenantModels
from agentwarm.gateway.tracing import GatewayTracer
from agentwarm.gateway.types import ChatCall, Reply
from agentwarm.gateway.upstream import Upstream
from agentwarm.gateway.warm import prefill_warm
from agentwarm.predictors import Predictor, StepContext, default_predictor
from agentwarm.predictors.context import observe_with, predict_with
from agentwarm.runtime.admission import Admission, Limits
from agentwarm.runtime.guardrail import CalibratedGuardrail
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.prefetch.misses import judged_choice

__all__ = ("WINDOW", "Learner", "Prefetch", "Step")

log = logging.getLogger(__name__)

#: How many recent steps and prefetches the figures cover.
WINDOW = 10_000
#: How much of a session's path the predictor is given.
MAX_PATH = 32
#: How many sessions' paths and pending prefetches are kept (least recently used dropped).
MAX_SESSIONS = 10_000
#: A session without a request for this long has ended: the predictor learns END after its
#: last node (so it stops speculating past the end of runs) and its prefetches are settled.
SESSION_IDLE_S = 120.0


class Learner(Sending):
    """Learns nodes, sessions and transitions from traffic; prefetches (module docstring)."""

    def __init__(
        self,
        upstream: Upstream,
        renderer: Renderer | None,
        *,
        policy: PrefetchPolicy | None = None,
        state_dir: Path | None = None,
        capacity_tokens: int | None = None,
        predictor_factory: Callable[[], Predictor] = default_predictor,
        session_idle_s: float = SESSION_IDLE_S,
        share_learning: bool = True,
        tracer: GatewayTracer | None = None,
        clock: Callable[[], float] = time.monotonic,
        save_interval_s: float | None = SAVE_INTERVAL_S,
    ) -> None:
        self.upstream = upstream
        self.renderer = renderer
        self.policy = policy or PrefetchPolicy()
        self.state_dir = state_dir
        state = load_state(state_dir, predictor_factory) if state_dir else None
        state = state or GatewayState.empty(predictor_factory)
        self.heads, self.predictor = state.heads, state.predictor
        self.shapes, self.tool_hints = state.shapes, state.tool_hints
        self.models = TenantModels(state, share=share_learning, factory=predictor_factory)
        self.sessions = SessionTracker(clock=clock)
        self.session_idle_s = session_idle_s
        self.tracer = tracer or GatewayTracer()
        self._clock = clock
        self.guardrail = CalibratedGuardrail()
        self.admission = Admission(clock=clock).bind(Limits.of(self.policy, capacity_tokens))
        self._sessions: OrderedDict[str, LiveSession] = OrderedDict()
        self._live: dict[str, Step] = {}
        self._steps: deque[Step] = deque(maxlen=WINDOW)
        self._prefetches: deque[Prefetch] = deque(maxlen=WINDOW)
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests = 0
        self.sessions_seen = 0
        self._autosave = Autosave(state_dir, self._state, save_interval_s) if state_dir else None
        if self._autosave is not None:
            self._autosave.start()  # built outside a running loop: saved at aclose only

    # --- Hooks ------------------------------------------------------------------------------

    async def on_request(self, call: ChatCall) -> None:
        tenant = call.tenant
        if tenant is None:
            return  # salts the upstream refuses: no session, nothing learned or settled
        head, conversation = self._identify(call, tag := tenant.tag)
        points = chain(conversation)  # once per request: assign and classify both read it
        sid, _new = self.sessions.assign(
            conversation, head.key, call.session_hint, points=points, tenant=tag
        )
        call.session, call.node = sid, head.name
        self.requests += 1
        now = self._clock()
        self._end_idle(now, keep=sid)
        session = self._sessions.get(sid)
        if session is None:
            session = self._sessions[sid] = LiveSession(tenant=tenant)
            self.sessions_seen += 1
            while len(self._sessions) > MAX_SESSIONS:
                self._end(*self._sessions.popitem(last=False))
        self._sessions.move_to_end(sid)
        session.last = now
        step = Step(node=head.name, from_node=session.path[-1] if session.path else START)
        hit = session.pending.pop(head.name, None)
        if hit is not None and hit.outcome is None:
            self._resolve(hit, PrefetchOutcome.HIT)
            step.hit(hit, points)
        elif session.path:
            enabled = self.renderer is not None and self.policy.enabled
            step.miss = session.miss_of(head.name, hit, enabled=enabled)
        self._settle(session)
        # Scored on the targets chosen to prefetch or held back by the guardrail (so recovery
        # is seen), else (nothing chosen) on the first predictions; against what they promised.
        scored = session.branch(head.name, self.policy)
        if scored is not None:
            self.guardrail.observe(scored[0], self.policy, promised=scored[1])
        learned = self.models.of(tag)
        if session.path:
            shape = classify(points, session.points, session.after_reply)
            learned.shapes.observe(head.name, shape)
            if session.tool is not None:
                learned.tool_hints.observe(session.tool, head.name)
        observe_with(learned.predictor, session.path[-MAX_PATH:], head.name, session.context)
        session.path.append(head.name)
        del session.path[:-MAX_PATH]
        session.conversation, session.points = conversation, points
        session.next_step()
        self._live[call.rid] = step
        self._steps.append(step)
        call.worker = self.upstream.worker_for(sid, call.rid)

    def on_tool_call(self, call: ChatCall, name: str) -> None:
        session = self._sessions.get(call.session or "")
        if session is None or session.tool is not None:
            return
        session.tool = name
        called = {"role": "assistant", "tool_calls": [{"function": {"name": name}}]}
        session.context = StepContext.from_messages([*call.messages, called])
        self._prefetch(call.session or "", session)  # before the reply ends: without it

    async def on_response(self, call: ChatCall, reply: Reply) -> None:
        step = self._live.pop(call.rid, None)
        sid = call.session or ""
        if step is not None:
            step.answered(reply.ttft_s, reply.prompt_tokens, reply.cached_tokens)
            self.tracer.step(sid, step, duration_s=reply.duration_s, miss=step.miss)
        session = self._sessions.get(sid)
        if session is None or reply.status != 200 or not reply.message:
            return
        head = self.heads.get(call.node or "")
        if head is None:
            return
        points, tag = session.points, session.tenant.tag
        self.sessions.record(
            sid, session.conversation, head.key, reply.message, points=points, tenant=tag
        )
        session.reply = reply.message
        session.context = StepContext.from_messages([*call.messages, reply.message])
        session.after_reply = extend(session.points, reply.message)
        calls = reply.message.get("tool_calls") or []
        if calls and session.tool is None:
            session.tool = str(calls[0].get("function", {}).get("name") or "") or None
        self._prefetch(sid, session)

    async def warm(self, call: ChatCall) -> dict[str, Any] | None:
        """An explicit warm (``max_tokens: 0``), prefilled in its tenant's namespace on the
        worker its session's live requests go to (:func:`~agentwarm.gateway.warm.
        prefill_warm`); ``None`` (forward it) without a renderer or with invalid salts."""
        tenant = call.tenant
        if self.renderer is None or tenant is None:
            return None
        head, conversation = self._identify(call, tenant.tag)
        return await prefill_warm(call, head, conversation, tenant, self.renderer, self.upstream)

    def stats(self) -> dict[str, Any]:
        return {
            **figures(self._steps, self._prefetches, runs=self.sessions_seen),
            "requests": self.requests,
            "prefetches_in_flight": sum(1 for p in self._prefetches if not p.ended),
            "sessions": len(self._sessions),
            "nodes": len(self.heads),
            "guardrail_level": str(self.guardrail.level),
        }

    async def drain(self) -> None:
        """Wait until every prefetch and abort sent so far has ended (for tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        if self._autosave is not None:
            await self._autosave.aclose()  # a periodic write finishes before the last one
        for session in self._sessions.values():
            self._settle(session)  # not ended: the gateway stops, the agents may go on
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
        self.tracer.close()
        self.save()

    def save(self) -> None:
        """Write the learned state to the state dir now, if it changed since the last write
        (logged, never raised)."""
        if self._autosave is not None:
            self._autosave.save()

    def _state(self) -> GatewayState:
        tenants = self.models.tenants()
        return GatewayState(self.heads, self.predictor, self.shapes, self.tool_hints, tenants)

    def _identify(self, call: ChatCall, tag: str) -> tuple[Head, list[Message]]:
        return self.heads.identify(call.messages, call.tools, hint=call.node_hint, tenant=tag)

    # --- prefetching ------------------------------------------------------------------------

    def _ranked(self, session: LiveSession) -> list[tuple[str, float]]:
        tag, learned = session.tenant.tag, self.models.of(session.tenant.tag)
        ranked = predict_with(learned.predictor, session.path[-MAX_PATH:], context=session.context)
        if session.tool is not None:
            ranked = learned.tool_hints.mix(session.tool, ranked)
        return self.heads.own_predictions(ranked, tag)

    def _prefetch(self, sid: str, session: LiveSession) -> None:
        if self.renderer is None or not self.policy.enabled:
            return
        predictions = self._ranked(session)
        limits = self.guardrail.limits(self.policy)
        chosen, judged = judged_choice(predictions, policy=self.policy, limits=limits)
        session.predicted(predictions, judged)
        if limits.paused:
            return
        for rank, name, p in chosen:  # sent unless the next request comes first
            session.misses[name] = Miss(MissReason.OVERTAKEN, cause="rendering", p=p, rank=rank)
        sending = self._send_chosen(sid, session, chosen, session.conversation, session.reply)
        task = asyncio.get_running_loop().create_task(sending)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _settle(self, session: LiveSession) -> None:
        """The session's next request came (or the gateway stops): the pending prefetches lost."""
        for pf in session.pending.values():
            if pf.outcome is None:
                running = pf.task is not None and not pf.task.done()
                outcome = PrefetchOutcome.CANCELLED if running else PrefetchOutcome.WASTED
                self._resolve(pf, outcome)
                if running:
                    task = asyncio.get_running_loop().create_task(
                        self.upstream.abort(pf.worker, pf.rid)
                    )
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        session.pending.clear()

    def _end_idle(self, now: float, *, keep: str) -> None:
        """End the sessions idle for ``session_idle_s`` (the least recently used come first)."""
        while self._sessions:
            sid, session = next(iter(self._sessions.items()))
            if sid == keep or now - session.last < self.session_idle_s:
                return
            del self._sessions[sid]
            self._end(sid, session)

    def _end(self, sid: str, session: LiveSession) -> None:
        """A session ended: its prefetches lost; the run ended after its last node."""
        self._settle(session)
        if session.path:
            predictor = self.models.of(session.tenant.tag).predictor
            observe_with(predictor, session.path[-MAX_PATH:], END, session.context)
        self.tracer.session_end(sid)

    def _resolve(self, pf: Prefetch, outcome: PrefetchOutcome) -> None:
        """Set the outcome of ``pf``; trace it when its request has ended (else when it ends)."""
        pf.outcome = outcome
        if pf.ended:
            self.tracer.prefetch(pf.session, pf, source=pf.source)
