"""When in a step to speculate (DESIGN §5.6).

An agent step is usually an LLM call followed by a tool call (or a user's reply). Prefetching
the next step's prompt *at step start* competes with this step's own LLM call for the engine
and covers less of the transcript; prefetching *right after the step's LLM call* uses the idle
tool time, covers the step's own output, and can use that output as a hint. So, per node, the
prefetcher defers speculation to the end of the step's first LLM call, unless the node has been
seen to finish without calling the LLM (a pure tool or routing step), where it speculates at step
start instead.
"""

from __future__ import annotations

from typing import Literal

__all__ = ("StepTiming", "TimingMode")

TimingMode = Literal["auto", "step_start", "after_llm"]


class StepTiming:
    """Per-node memory of whether the node's steps call the LLM (learned, per workflow)."""

    def __init__(self) -> None:
        self._calls_llm: dict[str, bool] = {}

    def defer(self, node: str, mode: TimingMode) -> bool:
        """Whether to hold speculation for ``node``'s step until its first LLM call returns."""
        if mode == "step_start":
            return False
        if mode == "after_llm":
            return True
        return self._calls_llm.get(node, True)

    def observe(self, node: str, called_llm: bool) -> None:
        self._calls_llm[node] = called_llm
