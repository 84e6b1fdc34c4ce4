"""Learning state shared by the runs of one workflow: predictor, guardrail, step timing, and
what the choice of candidates by value learns (prefill throughput, idle times, sent prefixes).

Speculation's rate and budget are per engine, not per workflow (:mod:`agentwarm.runtime.admission`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentwarm.errors import PredictorStateError
from agentwarm.runtime.guardrail import CalibratedGuardrail, Guardrail
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.prefetch.spend import SentPrefixes, SpendEstimator
from agentwarm.runtime.run import Run
from agentwarm.runtime.timing import StepTiming

if TYPE_CHECKING:
    from agentwarm.engines.base import Engine
    from agentwarm.graphs import CompiledGraph
    from agentwarm.predictors import Predictor, PredictorStore
    from agentwarm.runtime.result import RunResult

__all__ = ("WorkflowSession",)

log = logging.getLogger(__name__)


class WorkflowSession:
    """Owns what a workflow learns across runs in this process.

    Made by :meth:`Workflow.session <agentwarm.Workflow.session>` (one per predictor and state
    dir, kept by the workflow), never constructed directly; ``workflow.run(...)`` runs on it.
    ``policy`` is the default :class:`PrefetchPolicy` of its runs.

    With ``state_dir`` the predictor is loaded from (and saved after every run to) the
    predictor store there; a store that cannot be written is reported with a warning and the
    session keeps learning in memory, so no run fails for it. Each save adds what this session
    learned since its previous save to the file under a lock, so sessions of several processes
    sharing ``state_dir`` lose nothing. A run's save snapshots the predictor on the event loop
    (other runs keep learning there) and merges and writes the snapshot in a thread.
    """

    def __init__(
        self,
        workflow: CompiledGraph,
        *,
        predictor: Predictor | None = None,
        state_dir: Path | str | None = None,
    ) -> None:
        from agentwarm.predictors import PredictorStore, default_predictor

        self.workflow = workflow
        self.policy = PrefetchPolicy()
        self.guardrail: Guardrail = CalibratedGuardrail()
        self.timing = StepTiming()
        self.spend = SpendEstimator()
        self.sent_prefixes = SentPrefixes()
        self.store: PredictorStore | None = None
        self._saving = threading.Lock()  # one save at a time (the store's merge base)
        if state_dir is not None:
            self.store = PredictorStore(Path(state_dir))
        if predictor is not None:
            self.predictor = predictor
        elif self.store is not None:
            try:
                self.predictor = self.store.load(
                    workflow.name, nodes=self._node_set(), factory=default_predictor
                )
            except PredictorStateError as exc:
                # Never crash on learned state: learn in memory, and do not overwrite the file.
                warnings.warn(
                    f"learned state not loaded ({exc}); learning in memory only",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self.store = None
                self.predictor = default_predictor()
        else:
            self.predictor = default_predictor()

    def _node_set(self) -> list[str]:
        return sorted(self.workflow.graph.nodes)

    async def run(
        self,
        input: str = "",
        *,
        engine: Engine,
        policy: PrefetchPolicy | None = None,
        state: dict[str, Any] | None = None,
        namespace: str = "",
        run_id: str | None = None,
    ) -> RunResult:
        """One run on ``engine`` (:meth:`Workflow.run <agentwarm.Workflow.run>` documents the
        arguments); the predictor is saved afterwards when the session has a state dir."""
        run = Run(
            workflow=self.workflow,
            engine=engine,
            predictor=self.predictor,
            guardrail=self.guardrail,
            timing=self.timing,
            spend=self.spend,
            sent=self.sent_prefixes,
            policy=policy or self.policy,
            input=input,
            state=state,
            namespace=namespace,
            run_id=run_id,
        )
        try:
            return await run.execute()
        finally:
            if self.store is not None:  # no thread hop per run when there is nothing to save
                await self._save_after_run()

    async def _save_after_run(self) -> None:
        """Snapshot the predictor here, on the loop where runs change it (iterating its state
        in a thread while they do fails), then merge and write in a thread. Any failure is a
        warning: the learned state stays in memory and the run's result stands."""
        try:
            state = self.predictor.to_dict()
            await asyncio.to_thread(self._write, state)
        except Exception as exc:
            _warn_not_saved(exc)

    def save(self) -> None:
        """Persist the predictor (when a state dir is set); warn, never raise, on failure."""
        if self.store is None:
            return
        try:
            self._write(self.predictor.to_dict())
        except PredictorStateError as exc:
            _warn_not_saved(exc)

    def _write(self, state: dict[str, Any]) -> None:
        """Save the predictor's ``state`` (a snapshot taken on the loop), merged with the file
        by the store as the predictor's own state would be."""
        store = self.store
        assert store is not None
        with self._saving:
            store.save_snapshot(
                self.workflow.name, state, nodes=self._node_set(), of=self.predictor
            )


def _warn_not_saved(exc: Exception) -> None:
    from agentwarm.predictors import PredictorStateWarning

    warnings.warn(f"learned state not saved: {exc}", PredictorStateWarning, stacklevel=3)
