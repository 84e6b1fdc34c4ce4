"""P(next node | tool called): the tool a reply called hints at the session's next node.

In agent frameworks a tool call often decides the next step: LangGraph's supervisor hands off
with ``transfer_to_<agent>`` tools, a ReAct agent's tool result goes back to the same agent.
:class:`ToolHints` counts, per tool name, which node the session's next request went to, and
:meth:`ToolHints.mix` blends that with the predictor's distribution, trusting the counts more the
more there are: weight ``n / (n + PRIOR)`` for ``n`` observations of the tool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agentwarm.predictors import _serial

__all__ = ("MAX_TOOLS", "PRIOR", "ToolHints")

#: Pseudo-observations of the predictor's side: one observation of a tool weighs 1/3.
PRIOR = 2.0
#: Tools tracked at most (names past it are not learned: bounded memory on hostile traffic).
MAX_TOOLS = 4096


class ToolHints:
    """Counts of (tool called → next node)."""

    def __init__(self) -> None:
        self._counts: dict[str, Counter[str]] = {}

    def observe(self, tool: str, node: str) -> None:
        counts = self._counts.get(tool)
        if counts is None:
            if len(self._counts) >= MAX_TOOLS:
                return
            counts = self._counts[tool] = Counter()
        counts[node] += 1

    def mix(self, tool: str, predicted: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
        """``predicted`` blended with what ``tool`` predicts, most likely first (ties keep the
        predicted order, then the order nodes were first seen after the tool)."""
        counts = self._counts.get(tool)
        if not counts:
            return list(predicted)
        n = sum(counts.values())
        w = n / (n + PRIOR)
        p: dict[str, float] = {name: (1 - w) * q for name, q in predicted}
        for name, c in counts.items():
            p[name] = p.get(name, 0.0) + w * c / n
        total = sum(p.values()) or 1.0
        order = {name: i for i, name in enumerate(p)}
        return sorted(((k, v / total) for k, v in p.items()), key=lambda kv: (-kv[1], order[kv[0]]))

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {tool: dict(counts) for tool, counts in self._counts.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolHints:
        out = cls()
        for tool, counts in data.items():
            if not isinstance(tool, str) or not isinstance(counts, Mapping):
                raise ValueError("tool_hints: expected {tool: {node: count}}")
            for node, count in counts.items():
                if not _serial.is_count(count):
                    raise ValueError(
                        f"tool_hints[{tool!r}][{node!r}]: not a count (an integer in "
                        f"[0, 2**53]), got {_serial.short(count)}"
                    )
                out._counts.setdefault(tool, Counter())[str(node)] = count
        return out
