"""Collect nodes, then ``compile()``: all graph validation happens here, once."""

from __future__ import annotations

from types import ModuleType
from typing import Self

import networkx as nx

from agentwarm._spec import END, START, NodeSpec
from agentwarm.errors import GraphValidationError
from agentwarm.graphs._graph import CompiledGraph
from agentwarm.graphs._node import check_timeout

__all__ = ("DEFAULT_MAX_STEPS", "GraphBuilder")

DEFAULT_MAX_STEPS = 100


class GraphBuilder:
    """Collects ``@node`` steps and validates them into a :class:`CompiledGraph`.

    Users build with :class:`agentwarm.WorkflowGraph`, the runtime's subclass whose
    ``compile()`` returns a runnable :class:`agentwarm.Workflow`::

        wf = WorkflowGraph("support").add(triage, billing, refund).compile()
        wf = WorkflowGraph.from_module(my_module).compile()
    """

    def __init__(self, name: str) -> None:
        if not name:
            raise GraphValidationError("A workflow needs a non-empty name")
        self.name = name
        self._nodes: dict[str, NodeSpec] = {}

    @classmethod
    def from_module(cls, module: ModuleType, name: str | None = None) -> Self:
        """Collect every ``@node`` defined at the top level of ``module``, in definition order."""
        specs = [v for v in vars(module).values() if isinstance(v, NodeSpec)]
        if not specs:
            raise GraphValidationError(
                f"Module '{module.__name__}' defines no @node functions; decorate the workflow's "
                "steps with @node (from agentwarm import node)"
            )
        default = str(getattr(module, "WORKFLOW_NAME", module.__name__.rsplit(".", 1)[-1]))
        return cls(name or default).add(*specs)

    def add(self, *specs: NodeSpec) -> Self:
        for spec in specs:
            if not isinstance(spec, NodeSpec):
                raise GraphValidationError(
                    f"{spec!r} is not a node; decorate it with @node before adding it"
                )
            if spec.name in self._nodes and self._nodes[spec.name] is not spec:
                raise GraphValidationError(
                    f"Two nodes are named '{spec.name}'; give one of them @node(name=...)",
                    node=spec.name,
                )
            self._nodes[spec.name] = spec
        return self

    @property
    def nodes(self) -> dict[str, NodeSpec]:
        return dict(self._nodes)

    def compile(
        self, *, max_steps: int = DEFAULT_MAX_STEPS, step_timeout_s: float | None = None
    ) -> CompiledGraph:
        """Validate the graph into a :class:`CompiledGraph`.

        ``step_timeout_s`` limits every step of a node without its own ``@node(timeout_s=...)``
        (None: no limit); a step past it fails the run with
        :class:`~agentwarm.errors.StepTimeout`.

        Raises :class:`GraphValidationError` naming the offending node for: no nodes, no or
        several entry nodes, a successor that names no node, a node unreachable from the entry,
        a join node with fewer than two predecessors.
        """
        if max_steps < 1:
            raise GraphValidationError(f"max_steps must be >= 1, got {max_steps}")
        step_timeout = check_timeout("step_timeout_s", step_timeout_s)
        if not self._nodes:
            raise GraphValidationError(f"Workflow '{self.name}' has no nodes; add @node steps")
        entries = [s.name for s in self._nodes.values() if s.entry]
        if not entries:
            raise GraphValidationError(
                f"Workflow '{self.name}' has no entry node; mark the first step "
                "with @node(entry=True)"
            )
        if len(entries) > 1:
            raise GraphValidationError(
                f"Workflow '{self.name}' has several entry nodes {entries}; mark exactly one "
                "with entry=True",
                node=entries[1],
            )
        graph = nx.DiGraph(name=self.name)
        for spec in self._nodes.values():
            graph.add_node(spec.name, entry=spec.entry, join=spec.join, spec=spec)
        graph.add_node(END, entry=False, join=False, spec=None)
        for spec in self._nodes.values():
            for succ in spec.next:
                if succ != END and succ not in self._nodes:
                    known = ", ".join(sorted(self._nodes))
                    raise GraphValidationError(
                        f"Node '{spec.name}' has a successor '{succ}' that is not a node of "
                        f"workflow '{self.name}' (known nodes: {known}, or END); "
                        "fix its next=[...]",
                        node=spec.name,
                    )
                graph.add_edge(spec.name, succ)
        reachable = nx.descendants(graph, entries[0]) | {entries[0]}
        unreachable = [n for n in self._nodes if n not in reachable]
        if unreachable:
            raise GraphValidationError(
                f"Node '{unreachable[0]}' is unreachable from entry node '{entries[0]}'; list it "
                "in some node's next=[...] or remove it",
                node=unreachable[0],
            )
        for spec in self._nodes.values():
            if spec.join and graph.in_degree(spec.name) < 2:
                raise GraphValidationError(
                    f"Join node '{spec.name}' has {graph.in_degree(spec.name)} predecessor(s); a "
                    "join needs at least two branches leading to it (or drop join=True)",
                    node=spec.name,
                )
        dead = [n for n in self._nodes if not self._nodes[n].next]
        for n in dead:
            # A node with no declared successors can only end the workflow.
            graph.add_edge(n, END)
        assert START not in graph
        return CompiledGraph(
            name=self.name,
            nodes=dict(self._nodes),
            graph=graph,
            entry=entries[0],
            max_steps=max_steps,
            step_timeout_s=step_timeout,
        )
