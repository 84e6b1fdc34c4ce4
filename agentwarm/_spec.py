"""The words every layer shares: :data:`START`, :data:`END`, :class:`NodeSpec`, and the outcome
and kind vocabulary of steps and prefetches (:class:`StepOutcome`, :class:`PrefetchOutcome`,
:class:`PrefetchKind`), and why a step missed (:class:`MissReason`, :class:`Miss`).

Plain data, the ground floor: this module imports nothing from agentwarm, so graphs, predictors,
the runtime, telemetry, statistics and the tools on top all take these names from here. The
enums are :class:`~enum.StrEnum`: each member *is* its string value, which is what JSON output,
trace files and metric attributes hold.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = (
    "END",
    "MISS_REASONS",
    "SHORT_HIT_REASONS",
    "START",
    "WARM_UP_KINDS",
    "Miss",
    "MissReason",
    "NodeFn",
    "NodeResult",
    "NodeSpec",
    "PrefetchKind",
    "PrefetchOutcome",
    "StepOutcome",
)

#: Return this (or list it in ``next``) to finish a workflow branch; also the predictors' and
#: traces' name for "the run ended here".
END = "__end__"
#: The virtual predecessor of the entry node (used in traces and predictor paths).
START = "__start__"

#: What a node function returns: the next node, several (run concurrently), ``END``, or None.
NodeResult = str | list[str] | tuple[str, ...] | None
#: A node function: takes the step's context (:class:`agentwarm.Context`, typed in the runtime)
#: and returns a :data:`NodeResult`, directly or as an awaitable.
NodeFn = Callable[[Any], Awaitable[NodeResult] | NodeResult]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A declared workflow step. Built by :func:`agentwarm.node`; plain data.

    Two specs are equal when every field but ``module`` is equal; a spec hashes by its
    ``name`` (equal specs share a name), so specs with ``tools`` can be set members too.

    ``system`` and ``tools`` form the static head of every prompt the node sends (DESIGN §3):
    keep them free of timestamps and ids so they can be prefetched.

    ``hints`` maps a route keyword to the successor it announces: when the node's streamed
    output contains the keyword as a word, that successor is prefetched before the step ends.
    """

    name: str
    fn: NodeFn
    system: str = ""
    tools: tuple[dict[str, Any], ...] = ()
    next: tuple[str, ...] = ()
    entry: bool = False
    join: bool = False
    max_tokens: int = 64
    timeout_s: float | None = None
    hints: Mapping[str, str] = field(default_factory=dict)
    module: str | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def __call__(self, ctx: Any) -> Awaitable[NodeResult] | NodeResult:
        return self.fn(ctx)


class StepOutcome(StrEnum):
    """Whether a step's node had been speculatively prefetched during the previous step."""

    HIT = "hit"
    """The step's node was speculatively prefetched during the previous step (a branch hit)."""
    MISS = "miss"
    """The step has a previous step and its node was not speculatively prefetched during it."""
    NONE = "none"
    """The run's first step: there was no previous step to prefetch it."""


class PrefetchKind(StrEnum):
    """Why a prefill was sent: a guess (a prefetch), the warming of the known next node, or a
    warm-up (:data:`WARM_UP_KINDS`: not tied to a step of a run)."""

    SPECULATIVE = "speculative"
    """A guess issued while the previous step runs: counts as a prefetch."""
    CONFIRMED = "confirmed"
    """Warming of the actual next node once it is known: not speculation, not a prefetch."""
    STATIC = "static"
    """A warm-up plan's prefix warmed before traffic (``agentwarm warmup run``, ``--warmup``)."""
    KEEP_WARM = "keep_warm"
    """A plan's prefix re-sent to keep it cached (``--keep-warm``, ``--rewarm-below``)."""
    EXPLICIT = "explicit"
    """A warm asked for by code (``agentwarm.warm``) or by a ``max_tokens: 0`` request."""


#: The kinds of warm-up prefill (:mod:`agentwarm.warmup`).
WARM_UP_KINDS = frozenset({PrefetchKind.STATIC, PrefetchKind.KEEP_WARM, PrefetchKind.EXPLICIT})


class PrefetchOutcome(StrEnum):
    """How a prefill ended (every prefill ends with exactly one outcome)."""

    HIT = "hit"
    """The target was the actual next node and its real request used the prefix."""
    WASTED = "wasted"
    """The prefill finished but its target was not taken."""
    CANCELLED = "cancelled"
    """The prefill was stopped before it finished: its target lost, the run ended, or admission
    gave its slot to a likelier prefill."""
    FAILED = "failed"
    """The engine failed the prefill."""
    DROPPED = "dropped"
    """Admission refused the prefill (over the engine's speculative rate or budget): nothing of
    it reached the engine. Not counted as issued."""


class MissReason(StrEnum):
    """Why a step with a previous step did not find its whole prefetched prefix cached (issue
    27): every branch miss has exactly one of the miss reasons (:data:`MISS_REASONS`), and a
    branch hit that did not pay in full one of :data:`SHORT_HIT_REASONS`. Each is recorded
    where the decision was made (the choice, admission, the guardrail, the live request)."""

    NOT_PREDICTED = "not_predicted"
    """The true next was below the candidates considered (``cause``: ``below`` the policy's
    cut, ``unranked`` by the predictor, ``no_prompt``: seen not to read a prompt, nothing to
    prefetch); ``rank`` and ``p`` say where it stood."""
    PRICED_OUT = "priced_out"
    """Ranked, but refused by the spend rule: ``p`` below ``price / (1 + price)``."""
    DROPPED = "dropped"
    """Chosen, but refused by admission or the step's budget (``cause``: ``rate``,
    ``in_flight``, ``tokens`` or ``step_budget``)."""
    GUARDRAIL = "guardrail"
    """The guardrail held it back (``cause``: ``paused``, or ``cautious``: the normal limits
    would have sent it)."""
    FAILED = "failed"
    """Sent, but the engine failed the prefill."""
    OVERTAKEN = "overtaken"
    """The next request came before the step's speculation was sent (speculation deferred to
    an LLM call that never came; the gateway still rendering the prompt)."""
    OFF = "off"
    """Speculation was off (``enabled=False``, the gateway without a renderer)."""
    LATE = "late"
    """A hit not done when the live request came (``cause``: ``running``; ``stopped``:
    stopped before it finished): ``missing_tokens`` of its prefix were not found cached."""
    PREFIX_MISMATCH = "prefix_mismatch"
    """A hit whose prefetched ids were not a prefix of the live ids: ``token`` is the first
    index that diverged, ``message`` the prompt's message it fell in (``cause``: ``head`` for
    the system text and tools, ``message``, or ``step`` for the step's own text)."""


#: The reasons of a branch miss (the node was not prefetched during the previous step).
MISS_REASONS = frozenset(MissReason) - {MissReason.LATE, MissReason.PREFIX_MISMATCH}
#: The reasons of a branch hit that did not find its whole prefetched prefix cached.
SHORT_HIT_REASONS = frozenset({MissReason.LATE, MissReason.PREFIX_MISMATCH})


@dataclass(frozen=True, slots=True)
class Miss:
    """A step's :class:`MissReason` and its details (``None``: not known for this reason)."""

    reason: MissReason
    cause: str | None = None
    p: float | None = None
    """The target's probability in the ranking that refused it."""
    price: float | None = None
    """The price per wasted token the spend rule charged it (``priced_out``)."""
    rank: int | None = None
    """The target's rank in that ranking (0: the most likely)."""
    token: int | None = None
    """``prefix_mismatch``: the first token index where the prefetched ids diverged."""
    message: int | None = None
    """``prefix_mismatch``: the index, in the prompt's messages, of the one it fell in."""
    missing_tokens: int | None = None
    """``late`` / ``prefix_mismatch``: prefetched tokens the live request did not find cached."""
