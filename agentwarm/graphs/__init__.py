"""Workflow graphs: ``@node`` steps, the ``WorkflowGraph`` builder, the compiled ``Workflow``."""

from __future__ import annotations

from agentwarm.graphs._builder import WorkflowGraph
from agentwarm.graphs._node import END, START, NodeSpec, node
from agentwarm.graphs._workflow import Workflow
from agentwarm.graphs.load import load_workflow

__all__ = ("END", "START", "NodeSpec", "Workflow", "WorkflowGraph", "load_workflow", "node")
