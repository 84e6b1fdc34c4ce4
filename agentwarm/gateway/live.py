"""What the gateway's learner keeps of a live session between its requests
(:class:`LiveSession`), and how the guardrail scores a session's step on it
(:meth:`LiveSession.branch`): as the runtime scores a run's step
(:func:`~agentwarm.runtime.prefetch.rules.prefetched_branch`), on the targets the session chose
to prefetch after its last reply (whether admission let them through or not), else, when it
prefetched nothing (speculation paused, or nothing worth it), on its first predictions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agentwarm.chat import Message
from agentwarm.gateway.records import Prefetch
from agentwarm.gateway.tenants import DEFAULT_TENANT, Tenant
from agentwarm.predictors import StepContext
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.prefetch.rules import prefetched_branch

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
    #: The targets chosen to prefetch since the last request (admitted or not).
    prefetched: set[str] = field(default_factory=set)
    context: StepContext | None = None  # what they read: the next transition learns with it
    last: float = 0.0

    def predicted(self, predictions: Sequence[tuple[str, float]]) -> None:
        """A ranking of the next nodes was made; the step's first one is kept."""
        if not self.first_predictions:
            self.first_predictions = list(predictions)

    def branch(self, node: str, policy: PrefetchPolicy) -> bool | None:
        """Whether the session's next request (to ``node``) was a branch hit, as the guardrail
        scores it (module docstring); ``None``: nothing to score (no prediction made)."""
        return prefetched_branch(self.prefetched, self.first_predictions, [node], policy)

    def next_step(self) -> None:
        """The next request came: what was predicted and chosen for it is spent."""
        self.reply, self.after_reply, self.tool = None, None, None
        self.first_predictions, self.prefetched, self.context = [], set(), None
