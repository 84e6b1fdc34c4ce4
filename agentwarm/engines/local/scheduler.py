"""The embedded engine's scheduler: one worker, priority classes, chunked prefill.

A request's life: ``submit`` → waiting → (first step) match the radix tree, lock the matched
path, build its state from the cached prefix → prefill chunks → (generate only) decode steps →
finish (insert the computed prefix, unlock, resolve the future).

Rules the scheduler keeps:

* One worker owns the step runner and the radix tree; other threads only call
  :meth:`Scheduler.submit`, :meth:`Scheduler.abort`, :meth:`Scheduler.call` and
  :meth:`Scheduler.close`, which hand work over under a condition variable
  (:mod:`~agentwarm.engines.local.handover`).
* Every step (one prefill chunk of at most ``chunk_size`` tokens, or one decode token) goes to
  the waiting request with the highest priority, then the earliest arrival (a heap: O(log n)
  per step however many wait). Live work therefore preempts speculative work at the next chunk
  boundary, and aborts take effect there too. The batch size is one: within a priority class
  requests run first come, first served.
* A chunk of lower priority than live work yields *inside* its forward pass: when a request of
  higher priority arrives, the chunk stops at the next layer and is discarded (nothing of it is
  kept), so a live request waits for one layer of speculative work, not a whole chunk.
  ``chunks_interrupted`` counts them. An abort does not interrupt: the chunk in flight finishes
  and its KV is kept (a prefetch superseded by a longer one needs exactly that prefix).
* Each prefill chunk's KV is inserted into the tree as soon as it is computed, and the request
  keeps a lock on the path it covers (:mod:`~agentwarm.engines.local.prefixes`). A request that
  resumes after another request ran first re-matches the tree and skips whatever that request
  computed (promotion: a live request over an in-flight speculative prefill computes only what
  the prefill has not, and the prefill then finds the rest cached). No token is computed twice
  by requests that share a prefix.
* ``cached_tokens`` counts the prompt tokens a request found in the tree, at its start or when
  resuming, or loaded from the disk tier (``"load"`` steps, scheduled like prefill chunks:
  :mod:`~agentwarm.engines.local.loading`); ``computed_tokens`` those it computed. For a
  finished request they sum to the prompt length. A generate request always computes its last
  prompt token (it needs its logits).
* A finished speculative prefill pins its path for its request's ``pin_ttl_s``, else the
  scheduler's; a prefill found whole in the cache renews the pin of its path (a pin never
  shortens). ``abort(rid)`` of a finished prefill drops that pin. Every exit path (done,
  abort, error, close) unlocks.

The scheduler decides, a :class:`~agentwarm.engines.local.steps.StepRunner` computes (the seam).
``Scheduler(model_runner, cache)`` (``LocalEngine``) starts a worker thread;
``Scheduler(steps, cache, thread=False)`` none: its owner drives it (``has_work``, ``serve``,
``next_step``, ``run_step``) and may spend time between planning and running a step
(``FakeEngine``: an asyncio task and a cost model). The request types and the seam are
re-exported here, where ``FakeEngine`` and ``LocalEngine`` import them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentwarm.engines.base import Priority
from agentwarm.engines.local.handover import Handover, run_call
from agentwarm.engines.local.loading import NullLoader
from agentwarm.engines.local.prefixes import Prefixes
from agentwarm.engines.local.request import (
    Request,
    RequestEnd,
    RequestKind,
    Step,
    StepEvent,
    resolve,
    result_of,
)
from agentwarm.engines.local.steps import ChunkInterrupted, StepRunner, TorchSteps
from agentwarm.engines.local.traffic import Traffic
from agentwarm.engines.local.waiting import Waiting
from agentwarm.errors import EngineError, EngineUnavailable, RequestAborted

if TYPE_CHECKING:
    from agentwarm.engines.local.runner import ModelRunner
    from agentwarm.engines.radix import MatchResult, RadixCache

__all__ = (
    "ChunkInterrupted",
    "Request",
    "RequestKind",
    "Scheduler",
    "Step",
    "StepEvent",
    "StepRunner",
    "TorchSteps",
)

T = TypeVar("T")
_MAX_EVENTS = 4096


class Scheduler(Handover):
    """Owns the waiting queue, the radix tree and the worker. See the module docstring.
    Other threads call only what it inherits from :class:`Handover` (``submit``, ``abort``,
    ``call``, ``close``, ``closed``, ``yield_requested``).

    ``runner`` is a torch ``ModelRunner`` (wrapped in :class:`TorchSteps`) or a
    :class:`StepRunner`. ``thread=False`` starts no worker thread (the caller drives the
    scheduler, see the module docstring). ``step_hook`` (tests) is called on the worker with
    each :class:`StepEvent` right before the step runs. ``check_on_idle`` runs the cache's
    integrity check whenever the worker thread runs out of work; a failure is kept in
    ``integrity_error``. ``name`` names the engine in errors; ``events`` keeps the last
    ``max_events`` steps.
    """

    def __init__(
        self,
        runner: ModelRunner | StepRunner,
        cache: RadixCache[Any],
        *,
        chunk_size: int = 256,
        pin_ttl_s: float = 30.0,
        check_on_idle: bool = False,
        step_hook: Callable[[StepEvent], None] | None = None,
        thread: bool = True,
        name: str = "the local engine",
        max_events: int = _MAX_EVENTS,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        self.steps: StepRunner = runner if isinstance(runner, StepRunner) else TorchSteps(runner)
        self.cache = cache
        self.prefixes = Prefixes(cache, pin_ttl_s)
        self.chunk_size = chunk_size
        self.check_on_idle = check_on_idle
        self.step_hook = step_hook
        self.integrity_error: RuntimeError | None = None
        self.eos_token_id = self.steps.eos_token_id
        self.on_finish: Callable[[Request, RequestEnd], None] | None = None
        """Called on the worker when a request leaves (after counting, before its future is
        resolved) with its outcome: ``None`` (prefill done), a finish reason or an error."""
        self.loader: NullLoader = NullLoader()  # the disk tier's loads, set by LocalEngine

        self.chunks_executed = 0
        self.chunks_interrupted = 0
        self.events: deque[StepEvent] = deque(maxlen=max_events)
        self.reset_counters()

        super().__init__(name)
        self._waiting = Waiting()
        self._last_rid: str | None = None
        self._dirty = False
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._loop, name="agentwarm-engine", daemon=True)
            self._thread.start()

    def reset_counters(self) -> None:
        """Zero the traffic counters reported by ``stats`` (worker or before start)."""
        self.traffic = Traffic()

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker: queued and running requests fail with EngineUnavailable (without a
        worker thread, at the owner's next :meth:`serve`)."""
        super().close()
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -------------------------------------------------------- the worker

    @property
    def has_work(self) -> bool:
        """Something to serve: handed-over requests, aborts or calls, a close, or waiting work."""
        return self.pending or bool(self._waiting)

    def serve(self) -> bool:
        """Take what callers handed over: admit new requests, run calls, apply aborts. False
        once closed (every request then resolved with EngineUnavailable)."""
        inbox, aborts, calls, closed = self._take()
        for req in inbox:
            self._waiting.add(req)
        for fn, fut in calls:
            run_call(fn, fut)
        for rid in aborts:
            self._abort(rid)
        if closed:
            self._shutdown(EngineUnavailable(f"{self.name} was closed"))
            return False
        return True

    def next_step(self) -> Step | None:
        """Pick the next request and plan its step (start it or catch it up, log the event).
        None when nothing waits or the picked request finished without a step (serve again)."""
        req = self._waiting.next()
        if req is None:
            return None
        self._dirty = True
        self._set_running(req)
        step = None
        try:
            step = self._guard(req, self._plan)
        finally:
            if step is None:
                self._end(req)
        return step

    def run_step(self, step: Step) -> None:
        """Run ``step``'s model work and keep what it computed."""
        try:
            self._guard(step.req, lambda req: self._execute(req, step.event))
        finally:
            self._end(step.req)

    def fail(self, exc: BaseException) -> None:
        """The worker died of ``exc``: close and fail every request with EngineError."""
        Handover.close(self)
        self._shutdown(EngineError(f"{self.name}'s worker failed: {exc!r}"))

    def flush(self) -> int:
        """Drop every unlocked node and pin, zero the counters (worker)."""
        dropped = self.prefixes.flush()
        self.reset_counters()
        return dropped

    def _loop(self) -> None:
        try:
            with self.steps.worker_context():
                while self._serve_once():
                    pass
        except BaseException as exc:
            self.fail(exc)
            raise

    def _serve_once(self) -> bool:
        """Wait for work, serve it, run one step. False once closed."""
        self._wait(lambda: self.has_work, self._on_idle)
        if not self.serve():
            return False
        step = self.next_step()
        if step is not None:
            self.run_step(step)
        return True

    def _on_idle(self) -> bool:
        """Check the cache once after work (``check_on_idle``); false when there is nothing to
        do (the worker then sleeps)."""
        if not (self._dirty and self.check_on_idle):
            return False
        self._dirty = False
        problem = self.prefixes.idle_problem()
        if problem is not None:
            self.integrity_error = problem
        return True

    def _end(self, req: Request) -> None:
        self._last_rid = req.rid
        self._set_running(None)

    def _guard(self, req: Request, fn: Callable[[Request], T]) -> T | None:
        """``fn(req)``; a failure finishes ``req`` with an EngineError (and re-raises a
        BaseException that is not an Exception)."""
        try:
            return fn(req)
        except BaseException as exc:
            err = exc if isinstance(exc, EngineError) else EngineError(f"request failed: {exc}")
            if err is not exc:
                err.__cause__ = exc
            self._finish(req, err)
            if not isinstance(exc, Exception):
                raise
            return None

    def _plan(self, req: Request) -> Step | None:
        if req.state is None and not req.load_stop:
            self._resume(req, self.loader.begin(req, self.prefixes.start(req)))
        elif (
            req.state is not None
            and self._last_rid != req.rid
            and req.state.length < req.prefill_target
        ):
            self._resume(req, self.prefixes.catch_up(req))
        if req.future.done():
            return None
        if req.load_stop:
            event = self.loader.event(req)
        elif (start := req.state.length) < req.prefill_target:
            stop = min(start + self.chunk_size, len(req.ids))
            event = StepEvent(req.rid, "prefill", start, stop, req.priority)
        else:
            event = StepEvent(req.rid, "decode", start, start + 1, req.priority)
        self._log(event)
        return Step(req, event)

    def _resume(self, req: Request, match: MatchResult[Any] | None) -> None:
        """Build ``req``'s state from the cached prefix ``match`` (at its start, or past what
        another request computed meanwhile; ``None``: nothing new); a prefill found whole in
        the cache is done."""
        if match is None:
            return
        if req.kind is RequestKind.PREFILL and match.length == len(req.ids):
            self._finish(req, None)
            return
        req.state = self.steps.new_state(req, match.values, match.length)

    def _execute(self, req: Request, event: StepEvent) -> None:
        if event.kind == "load":
            self._resume(req, self.loader.run(req, event))
        elif event.kind == "prefill":
            self._prefill_chunk(req, event)
        else:
            assert req.state is not None
            self._emit(req, self.steps.decode_step(req.state, req.output[-1]))

    def _prefill_chunk(self, req: Request, event: StepEvent) -> None:
        state = req.state
        assert state is not None
        start, stop = event.start, event.stop
        last = stop == len(req.ids)
        want_logits = last and req.kind is RequestKind.GENERATE
        interrupt = self._should_yield if req.priority < Priority.LIVE else None
        t0 = time.perf_counter()
        try:
            logits = self.steps.extend(
                state, req.ids[start:stop], want_logits=want_logits, interrupt=interrupt
            )
        except ChunkInterrupted:
            # Still waiting: the next step serves the newcomer (or the abort) first. The log
            # keeps "prefill" for chunks that ran; this one is marked as interrupted.
            self.chunks_interrupted += 1
            if self.events:
                self.events.pop()
            self._log(StepEvent(req.rid, "interrupted", start, stop, req.priority))
            return
        self.chunks_executed += 1
        self.loader.observe_prefill(stop - start, time.perf_counter() - t0)
        req.computed_tokens += stop - start
        self.prefixes.keep(req, req.ids[:stop])
        if not last:
            return
        if req.kind is RequestKind.PREFILL:
            self._finish(req, None)
            return
        req.t_first_token = time.perf_counter()
        self._emit(req, logits)

    def _should_yield(self) -> bool:
        return self.yield_requested

    def _emit(self, req: Request, logits: Any) -> None:
        """Sample the next token of a generate request and finish it if it must stop."""
        assert req.state is not None
        if req.on_logits is not None:
            req.on_logits(logits)
        token = self.steps.sample(req, logits)
        if token == self.eos_token_id:
            self._finish(req, "stop")
            return
        req.output.append(token)
        if req.on_token is not None:
            req.on_token(token)
        if len(req.output) >= req.max_tokens or req.state.length >= self.steps.max_context:
            self._finish(req, "length")

    def _abort(self, rid: str) -> None:
        req = self._waiting.first_with(rid)
        if req is not None:
            self._finish(req, RequestAborted(f"request {rid} was aborted"))
            return
        self.prefixes.unpin(rid)

    def _finish(self, req: Request, outcome: RequestEnd) -> None:
        """Leave the queue: keep computed KV, unlock, count, resolve the future.

        ``outcome`` is ``None`` (prefill done), a finish reason (generate done) or an error;
        a RequestAborted error resolves a prefill as ABORTED instead of failing it.
        """
        self._waiting.remove(req)
        self.prefixes.release(req)
        aborted = isinstance(outcome, RequestAborted)
        if isinstance(outcome, RequestAborted):
            outcome.cached_tokens = req.cached_tokens
            outcome.computed_tokens = req.computed_tokens
        self.traffic.count(req, aborted=aborted)
        if self.on_finish is not None:
            self.on_finish(req, outcome)
        if req.kind is RequestKind.PREFILL and outcome is None and req.node is not None:
            self.prefixes.pin(req.rid, req.node, req.pin_ttl_s)
        result = result_of(req, outcome, self.steps.text)
        req.node = None
        req.state = None
        resolve(req.future, result)

    def _log(self, event: StepEvent) -> None:
        self.events.append(event)
        if self.step_hook is not None:
            self.step_hook(event)

    def _shutdown(self, error: EngineError) -> None:
        for req in self._waiting:
            try:
                self._finish(req, error)
            except Exception:
                self._waiting.remove(req)
                resolve(req.future, error)
        inbox, calls = self._drain()
        for req in inbox:
            resolve(req.future, error)
        for _, fut in calls:
            resolve(fut, error)
