"""The disk tier's writer: one daemon thread running queued jobs in order, the queue bounded in
bytes.

:meth:`Writer.submit` never waits: a job that would take the queue past its bound is refused
(the caller counts the drop). Jobs run outside the queue's lock, so a slow disk holds nobody
but the writer. The thread starts with the first job and ends at :meth:`Writer.stop` or after
:data:`IDLE_EXIT_S` without work (the next job starts it again: never more than one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ("IDLE_EXIT_S", "Job", "Writer")

log = logging.getLogger("agentwarm.engines.kvtier")

Job = Callable[[], None]

IDLE_EXIT_S = 60.0
"""A writer with nothing to do for this long ends its thread (a tier dropped without
``close`` leaves no thread behind for good)."""


class Writer:
    """Runs jobs on one daemon thread; at most ``max_bytes`` of queued jobs (a job's bytes are
    what the submitter says it holds; the job being run still counts)."""

    def __init__(self, max_bytes: int, *, name: str = "kv-tier-writer") -> None:
        self.max_bytes = max_bytes
        self._name = name
        self._cond = threading.Condition()
        self._jobs: deque[tuple[Job, int]] = deque()
        self._queued_bytes = 0
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def submit(self, job: Job, nbytes: int) -> bool:
        """Queue ``job``; False (nothing queued) when it would not fit or the writer stopped."""
        with self._cond:
            if self._stopping or self._queued_bytes + nbytes > self.max_bytes:
                return False
            self._jobs.append((job, nbytes))
            self._queued_bytes += nbytes
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return True

    def discard(self) -> list[Job]:
        """Forget the jobs not started yet; returns them."""
        with self._cond:
            jobs = [job for job, _ in self._jobs]
            self._queued_bytes -= sum(nbytes for _, nbytes in self._jobs)
            self._jobs.clear()
            self._cond.notify_all()
        return jobs

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued job has run; False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._jobs or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def stop(self, timeout: float | None = None) -> bool:
        """Run what is queued, then end the thread; False if it did not end within
        ``timeout`` (it is a daemon: it never keeps the process alive)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stopping:
                    if not self._cond.wait(IDLE_EXIT_S) and not self._jobs:
                        self._thread = None  # idle: end; the next submit starts another
                        return
                if not self._jobs:
                    return
                job, nbytes = self._jobs.popleft()
                self._busy = True
            try:
                job()
            except Exception:  # a bug in a job must not kill the writer
                log.exception("kv tier writer: a write failed unexpectedly")
            finally:
                with self._cond:
                    self._busy = False
                    self._queued_bytes -= nbytes
                    self._cond.notify_all()
