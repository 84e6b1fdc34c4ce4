"""What the gateway's learner keeps of a live session between its requests
(:class:`LiveSession`), and how the guardrail scores a session's step on it
(:meth:`LiveSession.branch`): as the runtime scores a run's step
(:func:`~agentwarm.runtime.prefetch.rules.scored_branch`), on the targets the session chose
to prefetch after its last reply (whether admission let them through or not) and those the
policy's own limits would have chosen but a cautious or paused guardrail held back (a tightened
guardrail judged by its own narrower choice could not see the predictions recover), else, when
nothing was chosen (all priced out), on its first predictions; with the probability those
targets have under its first predictions (:class:`~agentwarm.runtime.guardrail.
CalibratedGuardrail` compares the hits with it).
Why a session's next request missed (:meth:`LiveSession.miss_of`) is read from the verdicts its
rankings and sends left (``misses``), as the runtime's :mod:`~agentwarm.runtime.prefetch.misses`
does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentwarm._spec import Miss, MissReason, PrefetchOutcome
from agentwarm.chat import Message
from agentwarm.gateway.records import Prefetch
from agentwarm.gateway.tenants import DEFAULT_TENANT, Tenant
from agentwarm.predictors import StepContext
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.prefetch.misses import held_back
from agentwarm.runtime.prefetch.rules import keep_largest, scored_branch

__all__ = ("LiveSession",)


@dataclass(slots=True)
class LiveSession:
    """A session's tenant (its prefetches go to its namespace), path, last request and reply,
    pending prefetches and what its step is scored on."""

    tenant: Tenant = DEFAULT_TENANT
    path: list[str] = field(default_factory=list)
    conversation: list[Message] = field(default_factory=list)
    points: list[str] = field(default_factory=list)  # chain(conversation)
    reply: Message | None = None
    after_reply: str | None = None  # extend(points, reply)
    tool: str | None = None
    pending: dict[str, Prefetch] = field(default_factory=dict)
    #: The predictor's first ranking after the last request (a tool call's, else the reply's).
    first_predictions: list[tuple[str, float]] = field(default_factory=list)
    #: The targets chosen to prefetch since the last request (admitted or not), with their
    #: probability.
    prefetched: dict[str, float] = field(default_factory=dict)
    #: The targets the policy's own limits would have chosen since the last request, but the
    #: guardrail's tightened ones (cautious, paused) held back, with their probability.
    held: dict[str, float] = field(default_factory=dict)
    context: StepContext | None = None  # what they read: the next transition learns with it
    last: float = 0.0
    #: Why each target ranked since the last request was not prefetched (the latest verdict).
    misses: dict[str, Miss] = field(default_factory=dict)
    ranked: bool = False  # whether the next nodes were ranked since the last request

    def predicted(
        self, predictions: Sequence[tuple[str, float]], judged: Mapping[str, Miss] | None = None
    ) -> None:
        """A ranking of the next nodes was made, and ``judged``: why each of its targets the
        choice did not take was refused. The step's first ranking is kept, the verdicts replace
        earlier ones, and what the guardrail held back is scored as chosen."""
        self.ranked = True
        if not self.first_predictions:
            self.first_predictions = list(predictions)
        judged = judged or {}
        self.misses.update(judged)
        keep_largest(self.held, held_back(judged))

    def branch(self, node: str, policy: PrefetchPolicy) -> tuple[bool, float] | None:
        """Whether the session's next request (to ``node``) was a branch hit, as the guardrail
        scores it (module docstring), and the probability the candidates it was scored on
        promised; ``None``: nothing to score (no prediction made)."""
        chosen = dict(self.held)
        keep_largest(chosen, self.prefetched)
        return scored_branch(chosen, self.first_predictions, [node], policy)

    def miss_of(self, node: str, pending: Prefetch | None, *, enabled: bool) -> Miss:
        """Why the session's next request, to ``node``, was no branch hit (``pending``: its
        prefetch, which ended without reaching the cache)."""
        if not enabled:
            return Miss(MissReason.OFF)
        if pending is not None:
            return Miss(MissReason.FAILED, cause=str(pending.outcome or PrefetchOutcome.FAILED))
        verdict = self.misses.get(node)
        if verdict is not None:
            return verdict
        if not self.ranked:  # it came before the last reply was ranked
            return Miss(MissReason.OVERTAKEN, cause="unranked")
        ranked = [name for name, _ in self.first_predictions]
        if node not in ranked:
            return Miss(MissReason.NOT_PREDICTED, cause="unranked")
        rank = ranked.index(node)
        p = self.first_predictions[rank][1]
        return Miss(MissReason.NOT_PREDICTED, cause="below", p=p, rank=rank)

    def next_step(self) -> None:
        """The next request came: what was predicted and chosen for it is spent."""
        self.reply, self.after_reply, self.tool = None, None, None
        self.first_predictions, self.prefetched, self.context = [], {}, None
        self.held = {}
        self.misses, self.ranked = {}, False
