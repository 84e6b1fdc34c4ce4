"""The validated workflow graph: plain data that :meth:`GraphBuilder.compile` produces."""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from agentwarm._spec import END, NodeSpec

__all__ = ("CompiledGraph",)


@dataclass(eq=False)
class CompiledGraph:
    """A validated workflow: nodes, a ``networkx.DiGraph`` of declared transitions, one entry.

    Built by :meth:`GraphBuilder.compile`; do not construct directly. The graph's nodes are the
    node names plus ``END``; cycles are allowed and bounded at run time by ``max_steps``.
    ``step_timeout_s`` is the time limit of a step whose node sets no ``timeout_s``. Running
    it is the runtime's part: :class:`agentwarm.Workflow` is a compiled graph that can run.
    """

    name: str
    nodes: dict[str, NodeSpec]
    graph: nx.DiGraph
    entry: str
    max_steps: int
    step_timeout_s: float | None = None
    sample_inputs: tuple[str, ...] = ()

    def successors(self, node: str) -> list[str]:
        """Declared successors of ``node`` (may include ``END``), in declaration order."""
        spec = self.nodes[node]
        return list(spec.next) if spec.next else [END]
