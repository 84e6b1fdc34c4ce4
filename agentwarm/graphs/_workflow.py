"""The compiled, immutable workflow graph and its run entry points."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import networkx as nx

from agentwarm.errors import WorkflowError
from agentwarm.graphs._node import END, NodeSpec

if TYPE_CHECKING:
    from pathlib import Path

    from agentwarm.engines.base import Engine
    from agentwarm.predictors import Predictor
    from agentwarm.runtime.policy import PrefetchPolicy
    from agentwarm.runtime.result import RunResult
    from agentwarm.runtime.session import WorkflowSession

__all__ = ("Workflow",)


@dataclass(eq=False)
class Workflow:
    """A validated workflow: nodes, a ``networkx.DiGraph`` of declared transitions, one entry.

    Built by :meth:`WorkflowGraph.compile`; do not construct directly. The graph's nodes are the
    node names plus ``END``; cycles are allowed and bounded at run time by ``max_steps``.
    ``step_timeout_s`` is the time limit of a step whose node sets no ``timeout_s``.
    """

    name: str
    nodes: dict[str, NodeSpec]
    graph: nx.DiGraph
    entry: str
    max_steps: int
    step_timeout_s: float | None = None
    sample_inputs: tuple[str, ...] = ()
    _sessions: dict[tuple[int, str], WorkflowSession] = field(default_factory=dict, repr=False)

    def successors(self, node: str) -> list[str]:
        """Declared successors of ``node`` (may include ``END``), in declaration order."""
        spec = self.nodes[node]
        return list(spec.next) if spec.next else [END]

    @property
    def fingerprint(self) -> str:
        """Stable hash of the node names and edges; learned state is tied to it."""
        edges = sorted((u, v) for u, v in self.graph.edges)
        blob = json.dumps({"nodes": sorted(self.nodes), "edges": edges})
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def session(
        self,
        *,
        predictor: Predictor | None = None,
        state_dir: Path | str | None = None,
    ) -> WorkflowSession:
        """The learning state (predictor, guardrail) shared by this workflow's runs.

        Runs with the same ``state_dir`` share one session in this process; learned state is
        loaded from and saved to ``state_dir`` when given.
        """
        from agentwarm.runtime.session import WorkflowSession

        # One session per (predictor, state dir): the guardrail's history is kept across runs.
        # The session holds the predictor, so its id stays unique while the entry exists.
        key = (id(predictor) if predictor is not None else 0, str(state_dir or ""))
        if key not in self._sessions:
            self._sessions[key] = WorkflowSession(self, predictor=predictor, state_dir=state_dir)
        return self._sessions[key]

    async def run(
        self,
        input: str = "",
        *,
        engine: Engine,
        policy: PrefetchPolicy | None = None,
        predictor: Predictor | None = None,
        state: dict[str, Any] | None = None,
        state_dir: Path | str | None = None,
        namespace: str = "",
        run_id: str | None = None,
    ) -> RunResult:
        """Run the workflow once on ``engine`` and return its :class:`RunResult`.

        The predictor learns from the run; speculative prefetches follow ``policy`` (the
        default :class:`PrefetchPolicy` when ``None``; ``PrefetchPolicy(enabled=False)`` turns
        speculation off, which changes latency only, never outputs or the path).
        """
        session = self.session(predictor=predictor, state_dir=state_dir)
        return await session.run(
            input, engine=engine, policy=policy, state=state, namespace=namespace, run_id=run_id
        )

    def run_sync(self, input: str = "", **kwargs: Any) -> RunResult:
        """Blocking wrapper of :meth:`run` (starts its own event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(input, **kwargs))
        raise WorkflowError(
            "run_sync() was called inside a running event loop; use `await workflow.run(...)`"
        )
