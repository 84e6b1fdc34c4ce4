"""The ``next_turn`` peer: NVIDIA Dynamo's speculative next-turn prefill, replayed by the bench.

What Dynamo does, as read in ``ai-dynamo/dynamo``: ``lib/llm/src/preprocessor/
speculative_prefill.rs`` (``maybe_wrap_stream``, ``prefill_task``, ``SpeculativePrefillRequest``),
the ``OAIChatLikeRequest`` trait of its prompt module (the defaults that request keeps), the
``multiturn_bench`` README in ``lib/bench/src/bin/`` and pull request #6230 ("feat: speculative
prefill"):

* It is opt-in per request (``nvext.agent_hints.speculative_prefill``). The frontend wraps the
  reply's stream, collects the text of its content deltas and, once a choice carries a finish
  reason (the reply is complete), starts one background task.
* That task takes the request's messages, appends ONE assistant message whose content is the
  collected text (tool-call deltas are not content text, so a reply's tool calls are not in it),
  and renders them with the model's chat template **without the generation prompt** and
  **without tools** (the prefill request implements only the messages; ``tools()`` keeps the
  trait's default, none). It tokenizes the text and sends it down the same pipeline (router,
  then worker) as a ``max_tokens=1`` request with default sampling and **no priority**, drains
  it, and gives up after 60 s; a failure is logged and touches nothing else.
* It predicts nothing: one warm per reply, the continuation of the same conversation. Another
  agent's prompt (a subagent with its own head), a branch, a tool's schema: never warmed.

The replay here: the replaying node (:func:`agentwarm.bench.workload`'s ``_replay``) calls
:meth:`NextTurnEngine.after_reply` as soon as its LLM call returned (the reply is complete). The
messages are the node's system message and the transcript the live request was rendered from,
plus the reply as one assistant message holding its text only (``node``, agentwarm's key that
marks the speaker, kept as the transcript keeps it; real templates ignore it). A replayed real
conversation discards the model's reply and appends the recorded assistant turn instead: that
turn is the reply here. The ids are those :func:`agentwarm.chat.render_ids` gives (the live
requests' own per-message encoding), rendered at once; the request goes out on a task, at
:attr:`~agentwarm.engines.Priority.LIVE`: Dynamo sends it as an ordinary request, and LIVE is
what an ordinary request gets on these engines (SPECULATIVE would hand it agentwarm's own
scheduling: preempted by live work, never delaying it). The engine wrapper remembers each live
request's ids per session (run), so each warm is paired with the next live request of its run
(:mod:`agentwarm.bench.nextturn_figures` scores them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentwarm.bench.metered import MeteredEngine
from agentwarm.chat import FALLBACK, Message, render_ids
from agentwarm.engines.base import Completion, Engine, GenerateParams, StreamChunk
from agentwarm.engines.types import Priority
from agentwarm.errors import AgentwarmError, ConfigError

if TYPE_CHECKING:
    from agentwarm.runtime import Context

__all__ = ("NEXT_TURN_KEY", "WARM_TIMEOUT_S", "NextTurnEngine", "NextTurnLog", "Warm")

NEXT_TURN_KEY = "bench_next_turn"
"""Key of the mode's :class:`NextTurnEngine` in a run's ``state``."""

#: Dynamo's bound on one warm's lifetime (``PREFILL_TASK_TIMEOUT``).
WARM_TIMEOUT_S = 60.0

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class Warm:
    """One next-turn warm and, once the next live request of its session came, how far the
    two agree.

    ``after`` is the number of live requests of ``session`` before the warm: the warm is for
    live request ``after`` (0-based). ``tokens`` is the warm's length; ``covered`` the length of
    the common prefix of its ids and that live request's (``None``: no live request followed).
    ``cached`` / ``computed`` are the engine's answer (``failed``: no answer).
    """

    session: str
    after: int
    tokens: int
    covered: int | None = None
    cached: int = 0
    computed: int = 0
    failed: bool = False
    ids: list[int] = field(default_factory=list, repr=False)  # dropped once paired


@dataclass
class NextTurnLog:
    """What the mode's engine wrapper kept: every warm, in the order they were sent."""

    warms: list[Warm] = field(default_factory=list)

    def for_live(self, session: str, index: int) -> Warm | None:
        """The warm sent for live request ``index`` of ``session``, if any."""
        for w in self.warms:
            if w.session == session and w.after == index:
                return w
        return None


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class NextTurnEngine(MeteredEngine):
    """A :class:`MeteredEngine` that sends Dynamo's next-turn warm after each reply.

    ``system`` maps each node to its system text (the replay workload's). Live requests are
    recorded as by :class:`MeteredEngine`; the warms are not (they are in :attr:`log`), so a
    mode's live figures stay those of its live requests.
    """

    def __init__(self, inner: Engine, *, system: Mapping[str, str]) -> None:
        super().__init__(inner)
        self.system = dict(system)
        self.log = NextTurnLog()
        self._live: dict[str, int] = {}  # live requests sent per session
        self._namespace: dict[str, str] = {}
        self._pending: dict[tuple[str, int], Warm] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- live requests: counted and paired with the warm sent for them ---------------------

    def _saw_live(self, ids: Sequence[int], params: GenerateParams) -> None:
        session = params.session or ""
        index = self._live.get(session, 0)
        self._live[session] = index + 1
        self._namespace[session] = params.namespace
        warm = self._pending.pop((session, index), None)
        if warm is not None:
            warm.covered = _common(warm.ids, ids)
            warm.ids = []

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        self._saw_live(ids, params)
        return await super().generate_with(ids, params)

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        self._saw_live(ids, params)
        async for chunk in super().stream_with(ids, params):
            yield chunk

    # --- the warm -------------------------------------------------------------------------

    def after_reply(self, ctx: Context, reply: Message | None = None) -> None:
        """The node's reply is complete: render the next turn and send it (on a task).

        ``reply`` is the assistant message that stands for the reply (a replayed real turn);
        without it the transcript's last message is the reply the model just gave."""
        messages: list[Message] = []
        if self.system.get(ctx.node):
            messages.append({"role": "system", "content": self.system[ctx.node]})
        messages += ctx.transcript.messages()
        if reply is None:
            reply = messages.pop() if messages and messages[-1]["role"] == "assistant" else {}
        text = reply.get("content")
        content = text if isinstance(text, str) else ""
        messages.append({"role": "assistant", "content": content, "node": ctx.node})
        template = self.chat_template or FALLBACK
        try:
            ids = render_ids(
                template, self.encode, messages, add_generation_prompt=False, node=ctx.node
            ).ids
        except ConfigError as exc:
            _log.warning("next_turn: cannot render %s's next turn (%s); no warm", ctx.node, exc)
            return
        session = ctx.run_id
        warm = Warm(session=session, after=self._live.get(session, 0), tokens=len(ids), ids=ids)
        self.log.warms.append(warm)
        self._pending[(session, warm.after)] = warm
        task = asyncio.create_task(self._send(warm, list(ids), self._namespace.get(session, "")))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, warm: Warm, ids: list[int], namespace: str) -> None:
        params = GenerateParams(
            max_tokens=1, priority=Priority.LIVE, namespace=namespace, session=warm.session
        )
        try:
            out = await asyncio.wait_for(self.inner.generate_with(ids, params), WARM_TIMEOUT_S)
        except (AgentwarmError, TimeoutError) as exc:
            warm.failed = True
            _log.warning("next_turn: the warm of session %s failed (%s)", warm.session, exc)
            return
        warm.cached, warm.computed = out.cached_tokens, out.computed_tokens

    async def drain(self) -> None:
        """Wait for every warm sent so far to end."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
