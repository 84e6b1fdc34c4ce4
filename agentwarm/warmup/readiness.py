"""Whether a server's warm-up plan is warm: what ``GET /health/ready`` answers and when
``--ready-file`` is written.

A :class:`Readiness` follows the static warm-up of every worker (the
:class:`~agentwarm.warmup.warmer.Warmer`'s ``on_prefix`` progress, one running
:class:`~agentwarm.warmup.warmer.WarmSummary` per worker) and is finished by
:meth:`Readiness.finish` once every worker's warm-up ended. It is then ready unless **every**
worker failed before warming anything: a worker that failed (unreachable, ...) while another
warmed does not hold readiness back (its error is reported in :meth:`Readiness.to_dict`,
``error``, and the server serves, cold on that worker, rather than never); when none warmed
anything and all failed, it stays not ready (503) with ``error`` saying why, until a later
:meth:`Readiness.finish` (a keep-warm round) warms something.

The ready file (for Kubernetes ``exec`` probes: ``test -f PATH``) is written atomically once
ready, with the JSON of :meth:`Readiness.to_dict` (off the event loop: the write is fsynced),
and removed when a warm-up begins and by :meth:`Readiness.withdraw` at shutdown (a file left
from an earlier run must not say ready; :func:`~agentwarm.warmup.options.load_warmup` also
removes it before the server binds, while the model loads).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentwarm.predictors.store import atomic_write

if TYPE_CHECKING:
    from agentwarm.warmup.warmer import WarmSummary

__all__ = ("Readiness",)

log = logging.getLogger(__name__)


class Readiness:
    """Progress of a warm-up and whether it is done (see the module docstring)."""

    def __init__(self, *, ready_file: Path | None = None) -> None:
        self.ready_file = ready_file
        self._ready = False
        self._total = 0
        self._workers: dict[str, WarmSummary] = {}
        self._error: str | None = None
        self._order: dict[str, int] = {}

    @property
    def ready(self) -> bool:
        """True once :meth:`finish` found a worker warmed (or none failed)."""
        return self._ready

    def begin(self, workers: Sequence[str], prefixes: int) -> None:
        """A warm-up of ``prefixes`` prefixes on each of ``workers`` begins: not ready, the
        total known, a ready file of an earlier run removed."""
        self._ready = False
        self._error = None
        self._total = prefixes * len(workers)
        self._workers = {}
        self._order = {worker: i for i, worker in enumerate(workers)}
        self.withdraw()

    def update(self, summary: WarmSummary) -> None:
        """A worker's running summary (the warmer's ``on_prefix`` callback)."""
        self._workers[summary.worker] = summary

    async def finish(self, summaries: Sequence[WarmSummary], *, error: str | None = None) -> None:
        """The workers' warm-ups ended (``summaries``: one per worker): ready unless every
        worker failed before warming anything (or ``error``, a failure of the warm-up itself,
        came with no worker warmed); the ready file written once ready."""
        for summary in summaries:
            self.update(summary)
        workers = list(self._workers.values())
        failed = [f"{s.worker}: {s.error}" for s in workers if s.error]
        warmed = any(s.error is None or s.prefixes > 0 for s in workers)
        ready = warmed or (not workers and error is None)
        reasons = "; ".join([*([error] if error else []), *failed]) or None
        if not ready:
            reasons = f"no worker could be warmed: {reasons or 'no worker'}"
        self._error = reasons
        if ready and self.ready_file is not None:
            # Written before /health/ready says 200: a probe that saw 200 finds the file.
            data = json.dumps({**self.to_dict(), "ready": True}, ensure_ascii=False, sort_keys=True)
            try:
                await asyncio.to_thread(
                    atomic_write, self.ready_file, (data + "\n").encode("utf-8")
                )
            except OSError as exc:
                log.error("cannot write the ready file %s: %s", self.ready_file, exc)
        self._ready = ready

    def withdraw(self) -> None:
        """Remove the ready file, if any (logged when it cannot be)."""
        if self.ready_file is None:
            return
        try:
            self.ready_file.unlink(missing_ok=True)
        except OSError as exc:
            log.error("cannot remove the ready file %s: %s", self.ready_file, exc)

    def to_dict(self) -> dict[str, Any]:
        """``{"ready", "prefixes" (done: sent or skipped, all workers), "total", "workers":
        {worker: summary} (in the order :meth:`begin` gave), "error"}``: the body of
        ``/health/ready``."""
        done = sum(s.prefixes + s.skipped for s in self._workers.values())
        last = len(self._order)
        workers = sorted(self._workers.items(), key=lambda item: self._order.get(item[0], last))
        return {
            "ready": self._ready,
            "prefixes": done,
            "total": self._total,
            "workers": {worker: s.to_dict() for worker, s in workers},
            "error": self._error,
        }
