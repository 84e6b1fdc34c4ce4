"""When in a step to speculate, and which nodes are worth warming (DESIGN §5.6).

An agent step is usually an LLM call followed by a tool call (or a user's reply). Prefetching
the next step's prompt *at step start* competes with this step's own LLM call for the engine
and covers less of the transcript; prefetching *right after the step's LLM call* uses the idle
tool time, covers the step's own output, and can use that output as a hint. So, per node, the
prefetcher defers speculation to the end of the step's first LLM call, unless the node has been
seen to finish without calling the LLM (a pure tool or routing step), where it speculates at step
start instead.

Two more things are learned per node, from its steps:

* whether its prompt is worth caching at all: a node whose last :data:`NO_LLM_STEPS` steps made
  no LLM call (a tool or routing step) is not prefetched or warmed, since nothing would read
  its prefix;
* its *lead*, the time from step start to its first LLM call (an EWMA): a confirmed warm-up of
  a node that calls the LLM at once (lead below ``PrefetchPolicy.warm_min_lead_s``) would reach
  the engine together with the live request and only add a request, so it is not sent.
"""

from __future__ import annotations

from typing import Literal

__all__ = ("NO_LLM_STEPS", "StepTiming", "TimingMode")

TimingMode = Literal["auto", "step_start", "after_llm"]

#: Consecutive steps without an LLM call after which a node's prompt is no longer prefetched.
NO_LLM_STEPS = 2
#: Weight of the newest step in a node's lead EWMA.
LEAD_ALPHA = 0.25


class StepTiming:
    """Per-node memory of whether and when the node's steps call the LLM (learned, per
    workflow)."""

    def __init__(self) -> None:
        self._calls_llm: dict[str, bool] = {}
        self._without_llm: dict[str, int] = {}
        self._lead: dict[str, float] = {}

    def defer(self, node: str, mode: TimingMode) -> bool:
        """Whether to hold speculation for ``node``'s step until its first LLM call returns."""
        if mode == "step_start":
            return False
        if mode == "after_llm":
            return True
        return self._calls_llm.get(node, True)

    def reads_prompt(self, node: str) -> bool:
        """Whether ``node``'s prompt is worth caching: false once its last
        :data:`NO_LLM_STEPS` steps made no LLM call (true for a node not seen yet)."""
        return self._without_llm.get(node, 0) < NO_LLM_STEPS

    def lead_s(self, node: str) -> float | None:
        """EWMA of the time from ``node``'s step start to its first LLM call (``None`` until a
        step of it has called the LLM)."""
        return self._lead.get(node)

    def observe(self, node: str, called_llm: bool, lead_s: float | None = None) -> None:
        """One step of ``node`` ended; ``lead_s`` is when its first LLM call started."""
        self._calls_llm[node] = called_llm
        self._without_llm[node] = 0 if called_llm else self._without_llm.get(node, 0) + 1
        if called_llm and lead_s is not None:
            old = self._lead.get(node)
            self._lead[node] = lead_s if old is None else old + LEAD_ALPHA * (lead_s - old)
