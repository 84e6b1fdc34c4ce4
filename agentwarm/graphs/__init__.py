"""Workflow graphs: ``@node`` steps, the builder, the validated graph, loading one from a file.

Plain data and validation only; running a compiled graph is the runtime's part
(:class:`agentwarm.Workflow`, built by :class:`agentwarm.WorkflowGraph`).
"""

from __future__ import annotations

from agentwarm.graphs._builder import DEFAULT_MAX_STEPS, GraphBuilder
from agentwarm.graphs._graph import CompiledGraph
from agentwarm.graphs._node import check_timeout, node
from agentwarm.graphs.load import load_graph

__all__ = (
    "DEFAULT_MAX_STEPS",
    "CompiledGraph",
    "GraphBuilder",
    "check_timeout",
    "load_graph",
    "node",
)
