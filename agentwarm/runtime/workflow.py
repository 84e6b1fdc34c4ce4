"""The runnable workflow: a compiled graph with its run entry points and learning sessions.

:mod:`agentwarm.graphs` builds and validates graphs as plain data and knows nothing of running
them; this module adds running on top: :class:`WorkflowGraph` is the graphs builder whose
``compile()`` returns a :class:`Workflow`, and :func:`load_workflow` makes what a file defines
runnable.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from agentwarm.errors import WorkflowError
from agentwarm.graphs import DEFAULT_MAX_STEPS, CompiledGraph, GraphBuilder, load_graph
from agentwarm.runtime.session import WorkflowSession

if TYPE_CHECKING:
    from pathlib import Path

    from agentwarm.engines.base import Engine
    from agentwarm.predictors import Predictor
    from agentwarm.runtime.policy import PrefetchPolicy
    from agentwarm.runtime.result import RunResult

__all__ = ("Workflow", "WorkflowGraph", "load_workflow")


@dataclass(eq=False)
class Workflow(CompiledGraph):
    """A validated workflow that runs: :class:`~agentwarm.graphs.CompiledGraph` plus
    :meth:`run`, :meth:`run_sync` and :meth:`session`.

    ``await workflow.run(input, engine=...)`` is the way to run it. Runs learn in a session
    (predictor, guardrail, step timing) that the workflow keeps per predictor and state dir:
    ``workflow.run(..., predictor=p, state_dir=d)`` is ``workflow.session(predictor=p,
    state_dir=d).run(...)``, and :meth:`session` gives that learning state to look at or save.

    Built by :meth:`WorkflowGraph.compile` (or :func:`load_workflow`); do not construct
    directly.
    """

    _sessions: dict[tuple[int, str], WorkflowSession] = field(
        default_factory=dict, init=False, repr=False
    )

    @classmethod
    def of(cls, graph: CompiledGraph) -> Workflow:
        """``graph`` itself when it is a :class:`Workflow`, else a workflow of its data."""
        if isinstance(graph, Workflow):
            return graph
        return cls(**{f.name: getattr(graph, f.name) for f in fields(CompiledGraph)})

    def session(
        self,
        *,
        predictor: Predictor | None = None,
        state_dir: Path | str | None = None,
    ) -> WorkflowSession:
        """The learning state (predictor, guardrail) shared by this workflow's runs: the one
        place a :class:`~agentwarm.runtime.session.WorkflowSession` is made.

        Runs with the same ``predictor`` and ``state_dir`` share one session in this process;
        learned state is loaded from and saved to ``state_dir`` when given.
        """
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

        The run learns in ``self.session(predictor=predictor, state_dir=state_dir)``.
        Speculative prefetches follow ``policy`` (the default :class:`PrefetchPolicy` when
        ``None``; ``PrefetchPolicy(enabled=False)`` turns speculation off, which changes latency
        only, never outputs or the path). ``state`` is the run's shared dict (``ctx.state``);
        requests go to the engine's cache ``namespace``; ``run_id`` defaults to a new id.
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


class WorkflowGraph(GraphBuilder):
    """Builder of a :class:`Workflow`: collect ``@node`` steps, then ``compile()``.

    ::

        wf = WorkflowGraph("support").add(triage, billing, refund).compile()
        wf = WorkflowGraph.from_module(my_module).compile()
    """

    def compile(
        self, *, max_steps: int = DEFAULT_MAX_STEPS, step_timeout_s: float | None = None
    ) -> Workflow:
        """Validate the graph into a runnable :class:`Workflow`; the checks and arguments are
        :meth:`agentwarm.graphs.GraphBuilder.compile`'s."""
        return Workflow.of(super().compile(max_steps=max_steps, step_timeout_s=step_timeout_s))


def load_workflow(spec: str | Path) -> Workflow:
    """The runnable workflow named by ``spec`` (``FILE.py`` or ``FILE.py:NAME``); see
    :func:`agentwarm.graphs.load_graph` for how ``NAME`` and the file's contents are read."""
    return Workflow.of(load_graph(spec))
