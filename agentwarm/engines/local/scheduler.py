"""The embedded engine's scheduler: one worker, priority classes, chunked prefill.

A request's life: ``submit`` → waiting → (first step) match the radix tree, lock the matched
path, build its state from the cached prefix → prefill chunks → (generate only) decode steps →
finish (insert the computed prefix, unlock, resolve the future).

Rules the scheduler keeps:

* One worker owns the step runner and the radix tree; other threads only call
  :meth:`Scheduler.submit`, :meth:`Scheduler.abort`, :meth:`Scheduler.call` and
  :meth:`Scheduler.close`, which hand work over under a condition variable.
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
  keeps a lock on the path it covers. A request that resumes after another request ran first
  re-matches the tree and skips whatever that request computed (promotion: a live request over
  an in-flight speculative prefill computes only what the prefill has not, and the prefill then
  finds the rest cached). No token is computed twice by requests that share a prefix.
* ``cached_tokens`` counts the prompt tokens a request found in the tree, at its start or when
  resuming; ``computed_tokens`` those it computed. For a finished request they sum to the prompt
  length. A generate request always computes its last prompt token (it needs its logits).
* A finished speculative prefill pins its path for ``pin_ttl_s``; ``abort(rid)`` of a finished
  prefill drops that pin. Every exit path (done, abort, error, close) unlocks.

The seam: the scheduler decides, a :class:`StepRunner` computes. ``Scheduler(model_runner,
cache)`` (:class:`LocalEngine`) wraps a torch ``ModelRunner`` in :class:`TorchSteps` and starts
its worker thread. ``Scheduler(steps, cache, thread=False)`` takes any StepRunner and starts no
thread: its owner is the worker and drives it step by step — :attr:`has_work`, :meth:`serve`
(take what callers handed over), :meth:`next_step` (pick a request and plan its step),
:meth:`run_step` — and may spend time between planning and running a step (``FakeEngine``: an
asyncio task and a cost model, see ``agentwarm/engines/fake.py``). Torch is imported only by
TorchSteps, so the fake runs this scheduler without it.

Over 400 lines: the rules above are one state machine (submit → plan → run → finish) whose
parts share the waiting set, the locks and the counters, and the seam is kept next to it so that
what the scheduler asks of a runner reads with the rules that ask it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from agentwarm.engines.base import Completion, PrefillResult, PrefillStatus, Priority
from agentwarm.errors import EngineError, EngineUnavailable, RequestAborted

if TYPE_CHECKING:
    import torch

    from agentwarm.engines.local.runner import KV, ModelRunner, SequenceState
    from agentwarm.engines.radix import RadixCache, RadixNode

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
_Future = concurrent.futures.Future[Any] | asyncio.Future[Any]


class RequestKind(Enum):
    PREFILL = "prefill"
    GENERATE = "generate"


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One unit of work, logged before it runs: a prefill chunk ``[start, stop)`` or a decode
    step (``start`` = position of the fed token). A speculative chunk that yielded to live work
    mid-way is logged again with kind ``"interrupted"`` (none of it was kept); in ``events``
    that entry replaces its ``"prefill"`` one, a ``step_hook`` sees both."""

    rid: str
    kind: str
    start: int
    stop: int
    priority: int


@dataclass(eq=False)
class Request:
    """A request as the scheduler sees it. Callers fill the first block; the worker the rest.

    ``on_token`` (generate only) is called on the worker with each generated token id,
    ``on_logits`` with the next-token logits before each sample; both must be thread-safe and
    quick. ``future`` is a ``concurrent.futures.Future`` unless the caller gives one (an
    asyncio future, for a worker on the event loop).
    """

    rid: str
    kind: RequestKind
    ids: tuple[int, ...]
    priority: int
    namespace: str = ""
    max_tokens: int = 0
    temperature: float = 0.0
    seed: int | None = None
    on_token: Callable[[int], None] | None = None
    on_logits: Callable[[Any], None] | None = None
    t_submit: float = field(default_factory=time.perf_counter)
    future: _Future = field(default_factory=concurrent.futures.Future)

    arrival: int = 0
    state: Any = None  # the step runner's per-request state (a SequenceState for torch)
    node: RadixNode[Any] | None = None
    cached_tokens: int = 0
    computed_tokens: int = 0
    output: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    t_first_token: float | None = None

    @property
    def prefill_target(self) -> int:
        """Prompt tokens whose KV this request needs before it can decode."""
        return len(self.ids)


@dataclass(slots=True)
class Step:
    """A step :meth:`Scheduler.next_step` planned (and logged) for :meth:`Scheduler.run_step`."""

    req: Request
    event: StepEvent

    @property
    def interruptible(self) -> bool:
        """A prefill chunk below live priority: work of higher priority may cut it short."""
        return self.event.kind == "prefill" and self.req.priority < Priority.LIVE


class ChunkInterrupted(Exception):
    """A prefill chunk stopped early because the scheduler asked it to yield; nothing of it
    was kept (the state is as before the call)."""


class StepRunner:
    """What the scheduler asks of the model (the seam). All calls come from the worker.

    A state holds the processed tokens of one request: ``state.length`` of them, and
    ``state.kv(start, stop)`` returns the payload the radix tree stores for a token range.
    """

    eos_token_id: int | None = None
    max_context: int = 0

    def worker_context(self) -> contextlib.AbstractContextManager[Any]:
        """Entered around the worker thread's whole life (torch: inference mode)."""
        return contextlib.nullcontext()

    def new_state(self, req: Request, values: tuple[Any, ...], length: int) -> Any:
        """A state for ``req`` holding its first ``length`` tokens, whose cached payloads are
        ``values`` (``None`` where a node has none). Called at the request's first step and
        again when it resumes past tokens another request computed; the first call for a
        generate also prepares its sampling."""
        raise NotImplementedError

    def extend(
        self,
        state: Any,
        ids: Sequence[int],
        *,
        want_logits: bool,
        interrupt: Callable[[], bool] | None,
    ) -> Any:
        """Process ``ids`` after ``state``'s tokens; return next-token logits if
        ``want_logits``. Raises :class:`ChunkInterrupted` (state unchanged) when ``interrupt``
        is given and returns true before the work is done."""
        raise NotImplementedError

    def decode_step(self, state: Any, token: int) -> Any:
        """Process one generated token; return the next-token logits."""
        raise NotImplementedError

    def sample(self, req: Request, logits: Any) -> int:
        """The next output token of ``req`` from ``logits``."""
        raise NotImplementedError

    def text(self, ids: Sequence[int]) -> str:
        """The text of output token ids."""
        raise NotImplementedError


class TorchSteps(StepRunner):
    """The StepRunner of the embedded engine: a torch :class:`ModelRunner` and its sampling."""

    def __init__(self, runner: ModelRunner) -> None:
        from agentwarm.engines.local import runner as rt

        self.runner = runner
        self._rt = rt
        self.eos_token_id = runner.eos_token_id
        self.max_context = runner.max_context

    def worker_context(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        return torch.inference_mode()

    def new_state(self, req: Request, values: tuple[Any, ...], length: int) -> SequenceState:
        if req.kind is RequestKind.GENERATE and req.generator is None:
            req.generator = self._rt.make_generator(req.seed, self.runner.device)
        pieces: list[KV] = [v for v in values if v is not None]
        reserve = len(req.ids) + req.max_tokens - sum(int(p.shape[3]) for p in pieces)
        return self.runner.new_state(pieces, reserve=reserve)

    def extend(
        self,
        state: SequenceState,
        ids: Sequence[int],
        *,
        want_logits: bool,
        interrupt: Callable[[], bool] | None,
    ) -> torch.Tensor | None:
        state.interrupt = interrupt
        try:
            return self.runner.extend(state, ids, want_logits=want_logits)
        except self._rt.Interrupted:
            raise ChunkInterrupted from None
        finally:
            state.interrupt = None

    def decode_step(self, state: SequenceState, token: int) -> torch.Tensor:
        return self.runner.decode_step(state, token)

    def sample(self, req: Request, logits: torch.Tensor) -> int:
        return self._rt.sample(logits, temperature=req.temperature, generator=req.generator)

    def text(self, ids: Sequence[int]) -> str:
        return self.runner.tokenizer.decode(ids)


class Scheduler:
    """Owns the waiting queue, the radix tree and the worker. See the module docstring.

    ``runner`` is a torch ``ModelRunner`` (wrapped in :class:`TorchSteps`) or a
    :class:`StepRunner`. ``thread=False`` starts no worker thread (the caller drives the
    scheduler, see the module docstring). ``step_hook`` (tests) is called on the worker with
    each :class:`StepEvent` right before the step runs. ``check_on_idle`` runs
    :meth:`check_integrity` whenever the worker thread runs out of work; a failure is kept in
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
        self.runner = runner
        self.steps: StepRunner = runner if isinstance(runner, StepRunner) else TorchSteps(runner)
        self.cache = cache
        self.chunk_size = chunk_size
        self.pin_ttl_s = pin_ttl_s
        self.check_on_idle = check_on_idle
        self.step_hook = step_hook
        self.name = name
        self.integrity_error: RuntimeError | None = None
        self.eos_token_id = self.steps.eos_token_id
        self.on_finish: Callable[[Request, str | BaseException | None], None] | None = None
        """Called on the worker when a request leaves (after counting, before its future is
        resolved) with its outcome, as :meth:`_finish` takes it."""

        self.chunks_executed = 0
        self.chunks_interrupted = 0
        self.decode_steps = 0
        self.events: deque[StepEvent] = deque(maxlen=max_events)
        self.reset_counters()

        self._lock = threading.Lock()  # guards the hand-over fields below
        self._cv = threading.Condition(self._lock)  # the worker thread waits on it
        self._inbox: list[Request] = []
        self._aborts: list[str] = []
        self._calls: list[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = []
        self._closed = False
        # Waiting requests by arrival; a heap of (-priority, arrival) finds the next one in
        # O(log n) (entries of requests that left are dropped when they reach the top).
        self._waiting: dict[int, Request] = {}
        self._order: list[tuple[int, int]] = []
        self._by_rid: dict[str, list[Request]] = {}
        self._pins: dict[str, RadixNode[Any]] = {}
        self._arrivals = itertools.count()
        self._last_rid: str | None = None
        self._running: Request | None = None
        self._yield = False
        self._dirty = False
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._loop, name="agentwarm-engine", daemon=True)
            self._thread.start()

    def reset_counters(self) -> None:
        """Zero the traffic counters reported by ``stats`` (worker or before start)."""
        self.requests = 0
        self.aborted = 0
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.computed_tokens = 0

    # -------------------------------------------------------- any thread

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def yield_requested(self) -> bool:
        """A request of higher priority than the running one arrived since its step began."""
        return self._yield

    def submit(self, req: Request) -> _Future:
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

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker: queued and running requests fail with EngineUnavailable (without a
        worker thread, at the owner's next :meth:`serve`)."""
        with self._lock:
            self._closed = True
            self._cv.notify()
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -------------------------------------------------------- the worker

    @property
    def has_work(self) -> bool:
        """Something to serve: handed-over requests, aborts or calls, a close, or waiting work."""
        return bool(self._inbox or self._aborts or self._calls or self._closed or self._waiting)

    def serve(self) -> bool:
        """Take what callers handed over: admit new requests, run calls, apply aborts. False
        once closed (every request then resolved with EngineUnavailable)."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
            calls, self._calls = self._calls, []
            closed = self._closed
        for req in inbox:
            req.arrival = arrival = next(self._arrivals)
            self._waiting[arrival] = req
            heapq.heappush(self._order, (-req.priority, arrival))
            self._by_rid.setdefault(req.rid, []).append(req)
        for fn, fut in calls:
            self._run_call(fn, fut)
        for rid in aborts:
            self._abort(rid)
        if closed:
            self._shutdown(EngineUnavailable(f"{self.name} was closed"))
            return False
        return True

    def next_step(self) -> Step | None:
        """Pick the next request and plan its step (start it or catch it up, log the event).
        None when nothing waits or the picked request finished without a step (serve again)."""
        req = self._next()
        if req is None:
            return None
        self._dirty = True
        with self._lock:
            self._running, self._yield = req, False
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
        with self._lock:
            self._closed = True
        self._shutdown(EngineError(f"{self.name}'s worker failed: {exc!r}"))

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
        with self._cv:
            while not self.has_work:
                if self._dirty and self.check_on_idle:
                    self._dirty = False
                    self._idle_check()
                    continue
                self._cv.wait()
        if not self.serve():
            return False
        step = self.next_step()
        if step is not None:
            self.run_step(step)
        return True

    def _next(self) -> Request | None:
        """The waiting request that runs next: highest priority, then earliest arrival."""
        order = self._order
        while order:
            req = self._waiting.get(order[0][1])
            if req is not None:
                return req
            heapq.heappop(order)
        return None

    def _end(self, req: Request) -> None:
        self._last_rid = req.rid
        with self._lock:
            self._running = None

    def _run_call(self, fn: Callable[[], Any], fut: concurrent.futures.Future[Any]) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn())
        except BaseException as exc:
            fut.set_exception(exc)

    def _idle_check(self) -> None:
        try:
            self.cache.check_integrity()
            if self.cache.active_locks:
                raise RuntimeError(
                    f"scheduler idle but {self.cache.active_locks} radix locks are held "
                    f"({self.cache.locked_tokens} tokens)"
                )
        except RuntimeError as exc:
            self.integrity_error = exc

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
        if req.state is None:
            self._start(req)
        elif self._last_rid != req.rid and req.state.length < req.prefill_target:
            self._catch_up(req)
        if req.future.done():
            return None
        state = req.state
        assert state is not None
        start = state.length
        if start < req.prefill_target:
            stop = min(start + self.chunk_size, len(req.ids))
            event = StepEvent(req.rid, "prefill", start, stop, req.priority)
        else:
            event = StepEvent(req.rid, "decode", start, start + 1, req.priority)
        self._log(event)
        return Step(req, event)

    def _execute(self, req: Request, event: StepEvent) -> None:
        if event.kind == "prefill":
            self._prefill_chunk(req, event)
        else:
            self._decode_step(req)

    def _start(self, req: Request) -> None:
        limit = len(req.ids) - (1 if req.kind is RequestKind.GENERATE else 0)
        match = self.cache.match_prefix(req.namespace, req.ids[:limit])
        self.cache.lock(match.node)
        req.node = match.node
        req.cached_tokens = match.length
        if req.kind is RequestKind.PREFILL and match.length == len(req.ids):
            self._finish(req, None)
            return
        req.state = self.steps.new_state(req, match.values, match.length)

    def _catch_up(self, req: Request) -> None:
        """Skip prompt tokens another request computed while ``req`` waited."""
        assert req.state is not None and req.node is not None
        limit = len(req.ids) - (1 if req.kind is RequestKind.GENERATE else 0)
        match = self.cache.match_prefix(req.namespace, req.ids[:limit])
        gained = match.length - req.state.length
        if gained <= 0:
            return
        self._move_lock(req, match.node)
        req.cached_tokens += gained
        if req.kind is RequestKind.PREFILL and match.length == len(req.ids):
            self._finish(req, None)
            return
        req.state = self.steps.new_state(req, match.values, match.length)

    def _prefill_chunk(self, req: Request, event: StepEvent) -> None:
        state = req.state
        assert state is not None
        start, stop = event.start, event.stop
        last = stop == len(req.ids)
        want_logits = last and req.kind is RequestKind.GENERATE
        interrupt = self._should_yield if req.priority < Priority.LIVE else None
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
        req.computed_tokens += stop - start
        self._insert(req, req.ids[:stop])
        if not last:
            return
        if req.kind is RequestKind.PREFILL:
            self._finish(req, None)
            return
        req.t_first_token = time.perf_counter()
        self._emit(req, logits)

    def _should_yield(self) -> bool:
        return self._yield

    def _decode_step(self, req: Request) -> None:
        state = req.state
        assert state is not None
        logits = self.steps.decode_step(state, req.output[-1])
        self.decode_steps += 1
        self._emit(req, logits)

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

    def _insert(self, req: Request, ids: tuple[int, ...]) -> None:
        """Insert the KV ``req`` computed beyond its locked path; move the lock to the end."""
        assert req.state is not None and req.node is not None
        offset = req.node.depth
        if len(ids) <= offset or not self.cache.is_attached(req.node):
            return
        kv = req.state.kv(offset, len(ids))
        result = self.cache.insert(req.namespace, ids, kv, value_offset=offset)
        if result.length > offset:
            self._move_lock(req, result.node)

    def _move_lock(self, req: Request, node: RadixNode[Any]) -> None:
        assert req.node is not None
        self.cache.lock(node)
        self.cache.unlock(req.node)
        req.node = node

    def _abort(self, rid: str) -> None:
        same = self._by_rid.get(rid)
        if same:
            self._finish(same[0], RequestAborted(f"request {rid} was aborted"))
            return
        node = self._pins.pop(rid, None)
        if node is not None:
            self.cache.unpin(node)

    def _leave(self, req: Request) -> None:
        """Drop ``req`` from the waiting set (a no-op if it is not there)."""
        if self._waiting.get(req.arrival) is not req:
            return
        del self._waiting[req.arrival]
        if not self._waiting:
            self._order.clear()  # only stale entries left
        same = self._by_rid[req.rid]
        same.remove(req)
        if not same:
            del self._by_rid[req.rid]

    def _finish(self, req: Request, outcome: str | BaseException | None) -> None:
        """Leave the queue: keep computed KV, unlock, count, resolve the future.

        ``outcome`` is ``None`` (prefill done), a finish reason (generate done) or an error;
        a RequestAborted error resolves a prefill as ABORTED instead of failing it.
        """
        self._leave(req)
        if req.node is not None:
            try:
                if req.state is not None:
                    self._insert(req, (*req.ids, *req.output)[: req.state.length])
            except Exception:
                pass  # caching what was computed is best effort; the outcome stands
            finally:
                self.cache.unlock(req.node)
        aborted = isinstance(outcome, RequestAborted)
        if isinstance(outcome, RequestAborted):
            outcome.cached_tokens = req.cached_tokens
            outcome.computed_tokens = req.computed_tokens
        self.requests += 1
        self.aborted += int(aborted)
        self.prompt_tokens += req.cached_tokens + req.computed_tokens if aborted else len(req.ids)
        self.hit_tokens += req.cached_tokens
        self.computed_tokens += req.computed_tokens
        if self.on_finish is not None:
            self.on_finish(req, outcome)
        result: PrefillResult | Completion | BaseException
        if req.kind is RequestKind.PREFILL and (outcome is None or aborted):
            status = PrefillStatus.ABORTED if aborted else PrefillStatus.DONE
            if status is PrefillStatus.DONE and req.node is not None:
                self._pin(req.rid, req.node)
            result = PrefillResult(
                rid=req.rid,
                prompt_tokens=len(req.ids),
                cached_tokens=req.cached_tokens,
                computed_tokens=req.computed_tokens,
                status=status,
            )
        elif isinstance(outcome, str):
            now = time.perf_counter()
            first = req.t_first_token if req.t_first_token is not None else now
            result = Completion(
                text=self.steps.text(req.output),
                token_ids=tuple(req.output),
                prompt_tokens=len(req.ids),
                cached_tokens=req.cached_tokens,
                ttft_s=first - req.t_submit,
                finish_reason=outcome,
                rid=req.rid,
                e2e_s=now - req.t_submit,
            )
        else:
            assert outcome is not None
            result = outcome
        req.node = None
        req.state = None
        _resolve(req.future, result)

    def _pin(self, rid: str, node: RadixNode[Any]) -> None:
        """Pin ``node`` for ``rid``; forget pins that expired (oldest first, same TTL for all)."""
        if self.pin_ttl_s <= 0:
            return
        self.cache.pin(node, self.pin_ttl_s)
        old = self._pins.pop(rid, None)
        if old is not None:
            self.cache.unpin(old)
        self._pins[rid] = node
        while self._pins:
            oldest = next(iter(self._pins))
            if self.cache.is_pinned(self._pins[oldest]):
                break
            del self._pins[oldest]

    def flush(self) -> int:
        """Drop every unlocked node and pin, zero the counters (worker)."""
        self._pins.clear()
        dropped = self.cache.reset()
        self.cache.evicted_tokens = 0
        self.reset_counters()
        return dropped

    def _log(self, event: StepEvent) -> None:
        self.events.append(event)
        if self.step_hook is not None:
            self.step_hook(event)

    def _shutdown(self, error: EngineError) -> None:
        for req in list(self._waiting.values()):
            try:
                self._finish(req, error)
            except Exception:
                self._leave(req)
                _resolve(req.future, error)
        with self._lock:
            inbox, self._inbox = self._inbox, []
            calls, self._calls = self._calls, []
        for req in inbox:
            _resolve(req.future, error)
        for _, fut in calls:
            _resolve(fut, error)


def _resolve(fut: _Future, outcome: object) -> None:
    """Set ``fut`` to ``outcome`` (an exception is raised by it) unless it is already done."""
    if fut.done():
        return
    try:
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
    except (concurrent.futures.InvalidStateError, asyncio.InvalidStateError):
        pass
