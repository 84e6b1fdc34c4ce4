"""The words every layer shares: :data:`START`, :data:`END`, :class:`NodeSpec`, and the outcome
and kind vocabulary of steps and prefetches (:class:`StepOutcome`, :class:`PrefetchOutcome`,
:class:`PrefetchKind`).

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
    "START",
    "WARM_UP_KINDS",
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
