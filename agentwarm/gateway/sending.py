"""Sending a session's chosen prefetches upstream (:class:`Sending`, a part of
:class:`~agentwarm.gateway.learner.Learner`): each chosen target's prompt is rendered off the
event loop (its head + the conversation its shape predicts), admitted by the runtime's
:class:`~agentwarm.runtime.admission.Admission`, and prefilled at speculative priority. Every
chosen target that is not sent leaves its miss verdict on the session (``LiveSession.misses``):
too short to be worth a request, shared with another target, refused by admission, or (set
when chosen) overtaken by the session's next request while its prompt was rendered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentwarm._spec import Miss, MissReason, PrefetchOutcome
from agentwarm.engines.base import PrefillStatus, new_rid
from agentwarm.gateway.live import LiveSession
from agentwarm.gateway.prompts import Renderer, expected_conversation, expected_points
from agentwarm.gateway.records import Prefetch
from agentwarm.runtime.prefetch.rules import keep_largest

if TYPE_CHECKING:
    from agentwarm.gateway.heads import HeadRegistry
    from agentwarm.gateway.tenants import TenantModels
    from agentwarm.gateway.tracing import GatewayTracer
    from agentwarm.gateway.upstream import Upstream
    from agentwarm.runtime.admission import RunAdmission, Ticket

__all__ = ("MIN_PREFETCH_TOKENS", "Sending")

log = logging.getLogger(__name__)

#: Ids shorter than this are not worth a request.
MIN_PREFETCH_TOKENS = 16


class Sending:
    """The learner's sending of prefetches (module docstring); mixed into the Learner, whose
    state it uses."""

    upstream: Upstream
    renderer: Renderer | None
    heads: HeadRegistry
    models: TenantModels
    admission: RunAdmission
    tracer: GatewayTracer
    _sessions: OrderedDict[str, LiveSession]
    _prefetches: deque[Prefetch]
    _tasks: set[asyncio.Task[None]]

    if TYPE_CHECKING:  # the Learner's

        def _resolve(self, pf: Prefetch, outcome: PrefetchOutcome) -> None: ...

    async def _send_chosen(
        self, sid: str, session: LiveSession, chosen: list[Any], last: list[Any], reply: Any
    ) -> None:
        """Render the chosen prompts off the event loop and send them, unless the session moved
        on meanwhile (its next request came: ``last`` is not its conversation; or it ended)."""
        sent: set[tuple[int, ...]] = set()
        after = session.after_reply if reply is not None else None
        for rank, name, p in chosen:
            head = self.heads.get(name)
            if head is None or self.renderer is None:
                continue
            shape = self.models.of(session.tenant.tag).shapes.rule(name)
            conversation = expected_conversation(shape, last, reply)
            points = expected_points(shape, session.points, after)
            ids = await self.renderer.prompt_ids(head, conversation)
            if session.conversation is not last or self._sessions.get(sid) is not session:
                return
            key = tuple(ids)
            if len(ids) < MIN_PREFETCH_TOKENS:
                session.misses[name] = Miss(MissReason.NOT_PREDICTED, cause="no_prompt", p=p)
                continue
            keep_largest(session.prefetched, {name: p})  # chosen: scored, admitted or not
            if key in sent:  # another target sends these very ids: none is sent for this one
                session.misses[name] = Miss(MissReason.DROPPED, cause="shared", p=p, rank=rank)
                continue
            sent.add(key)
            old = session.pending.get(name)
            if old is not None and old.tokens >= len(ids):
                session.misses.pop(name, None)  # what it sent already covers this
                continue
            self._send(sid, session, name, ids, p, replace=old, points=points)

    def _send(
        self,
        sid: str,
        session: LiveSession,
        name: str,
        ids: list[int],
        p: float,
        *,
        replace: Prefetch | None,
        points: list[str],
    ) -> None:
        rid = new_rid()
        worker = self.upstream.worker_for(sid, rid)
        source = session.path[-1] if session.path else None
        pf = Prefetch(name, rid, worker, len(ids), session=sid, source=source)
        pf.namespace, pf.points = session.tenant.namespace, points
        self._prefetches.append(pf)
        ticket = self.admission.try_acquire(value=p, tokens=len(ids))
        if ticket is None:
            pf.ended = True
            self._resolve(pf, PrefetchOutcome.DROPPED)
            session.misses[name] = Miss(MissReason.DROPPED, cause=self.admission.refusal, p=p)
            return
        session.misses.pop(name, None)
        if replace is not None and replace.outcome is None:
            self._resolve(replace, PrefetchOutcome.CANCELLED)  # superseded by a longer prefix
        session.pending[name] = pf
        pf.task = asyncio.get_running_loop().create_task(self._prefill(pf, ids, sid, ticket))
        self._tasks.add(pf.task)
        pf.task.add_done_callback(self._tasks.discard)

    async def _prefill(self, pf: Prefetch, ids: Sequence[int], sid: str, ticket: Ticket) -> None:
        try:
            result = await self.upstream.prefill(
                pf.worker, ids, rid=pf.rid, session=sid, namespace=pf.namespace
            )
            pf.computed_tokens = result.computed_tokens
            if result.status is PrefillStatus.ABORTED and pf.outcome is None:
                pf.outcome = PrefetchOutcome.CANCELLED
        except asyncio.CancelledError:
            if pf.outcome is None:
                pf.outcome = PrefetchOutcome.CANCELLED
            raise
        except Exception as exc:  # a failed prefetch never affects a live request
            log.warning("prefetch %s of node %s failed: %s", pf.rid, pf.node, exc)
            if pf.outcome is None:
                pf.outcome = PrefetchOutcome.FAILED
        finally:
            self.admission.release(ticket)
            pf.ended = True
            if pf.outcome is not None:
                self.tracer.prefetch(pf.session, pf, source=pf.source)
