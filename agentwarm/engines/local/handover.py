"""The hand-over between the threads that call the embedded engine's scheduler and its worker.

Callers only append (requests, aborts, calls, a close) under one lock and wake the worker; the
worker takes everything at once (``Handover._take``) at a step boundary. The priority of the
request the worker runs now is kept here too, so that a caller handing over work of higher
priority can ask the running step to yield (:attr:`Handover.yield_requested`).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from agentwarm.engines.local.request import Future, Request
from agentwarm.errors import EngineUnavailable

__all__ = ("Call", "Handover", "run_call")

T = TypeVar("T")
Call = tuple[Callable[[], Any], concurrent.futures.Future[Any]]


class Handover:
    """The thread-safe side of a scheduler (its base class): what any thread may call.
    ``name`` names the engine in errors. The methods with a leading underscore are the
    worker's."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)  # the worker thread waits on it
        self._inbox: list[Request] = []
        self._aborts: list[str] = []
        self._calls: list[Call] = []
        self._closed = False
        self._running: Request | None = None
        self._yield = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def yield_requested(self) -> bool:
        """A request of higher priority than the running one arrived since its step began."""
        return self._yield

    @property
    def pending(self) -> bool:
        """Something was handed over: requests, aborts, calls or a close."""
        return bool(self._inbox or self._aborts or self._calls or self._closed)

    def submit(self, req: Request) -> Future:
        """Queue ``req``; its future resolves with a PrefillResult / Completion or an error."""
        with self._lock:
            if self._closed:
                raise EngineUnavailable(f"{self.name} is closed")
            self._inbox.append(req)
            running = self._running
            if running is not None and req.priority > running.priority:
                self._yield = True
            self._cv.notify()
        return req.future

    def abort(self, rid: str) -> None:
        """Abort ``rid`` at the next step boundary; drop its pin if it is a finished prefill."""
        with self._lock:
            self._aborts.append(rid)
            self._cv.notify()

    def call(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``fn`` on the worker between steps; its result resolves the future."""
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise EngineUnavailable(f"{self.name} is closed")
            self._calls.append((fn, fut))
            self._cv.notify()
        return fut

    def close(self) -> None:
        """Ask the worker to stop (it fails what is queued with EngineUnavailable)."""
        with self._lock:
            self._closed = True
            self._cv.notify()

    # ----------------------------------------------------------- the worker

    def _wait(self, has_work: Callable[[], bool], on_idle: Callable[[], bool]) -> None:
        """Block until ``has_work()``; while it is false, ``on_idle()`` runs first and the
        worker sleeps only once it returns false (nothing left to do while idle)."""
        with self._cv:
            while not has_work():
                if not on_idle():
                    self._cv.wait()

    def _take(self) -> tuple[list[Request], list[str], list[Call], bool]:
        """Everything handed over since the last take: requests, aborts, calls, closed."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
            calls, self._calls = self._calls, []
            return inbox, aborts, calls, self._closed

    def _drain(self) -> tuple[list[Request], list[Call]]:
        """Requests and calls handed over but not taken (to fail them at shutdown)."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
            calls, self._calls = self._calls, []
            return inbox, calls

    def _set_running(self, req: Request | None) -> None:
        """``req`` runs a step now (``None``: none does); clears a yield request."""
        with self._lock:
            self._running = req
            if req is not None:
                self._yield = False


def run_call(fn: Callable[[], Any], fut: concurrent.futures.Future[Any]) -> None:
    """Run a handed-over call on the worker; its result or exception resolves ``fut`` (unless
    the caller cancelled it)."""
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn())
    except BaseException as exc:
        fut.set_exception(exc)
