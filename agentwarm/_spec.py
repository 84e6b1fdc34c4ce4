"""The words every layer shares: :data:`START`, :data:`END` and :class:`NodeSpec`.

Plain data, the ground floor: this module imports nothing from agentwarm, so graphs, predictors,
the runtime, telemetry and the tools on top all take these names from here.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ("END", "START", "NodeFn", "NodeResult", "NodeSpec")

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
    module: str | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def __call__(self, ctx: Any) -> Awaitable[NodeResult] | NodeResult:
        return self.fn(ctx)
