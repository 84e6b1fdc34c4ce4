"""The embedded engine's scheduler: one worker thread, priority classes, chunked prefill.

A request's life: ``submit`` → waiting → (first step) match the radix tree, lock the matched
path, copy the cached KV into a :class:`SequenceState` → prefill chunks → (generate only)
decode steps → finish (insert the computed KV, unlock, resolve the future).

Rules the scheduler keeps:

* One worker thread owns the model runner and the radix tree; other threads only call
  :meth:`Scheduler.submit`, :meth:`Scheduler.abort`, :meth:`Scheduler.call` and
  :meth:`Scheduler.close`, which hand work over under a condition variable.
* Every step (one prefill chunk of at most ``chunk_size`` tokens, or one decode token) goes to
  the waiting request with the highest priority, then the earliest arrival. Live work therefore
  preempts speculative work at the next chunk boundary, and aborts take effect there too. The
  batch size is one: within a priority class requests run first come, first served.
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
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from agentwarm.engines.base import Completion, PrefillResult, PrefillStatus, Priority
from agentwarm.engines.local.runner import KV, Interrupted, make_generator, sample
from agentwarm.errors import EngineError, EngineUnavailable, RequestAborted

if TYPE_CHECKING:
    from agentwarm.engines.local.runner import ModelRunner, SequenceState
    from agentwarm.engines.radix import RadixCache, RadixNode

__all__ = ("Request", "RequestKind", "Scheduler", "StepEvent")

T = TypeVar("T")
_MAX_EVENTS = 4096


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

    ``on_token`` (generate only) is called on the worker thread with each generated token id,
    ``on_logits`` with the float32 next-token logits before each sample; both must be
    thread-safe and quick.
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
    on_logits: Callable[[torch.Tensor], None] | None = None
    t_submit: float = field(default_factory=time.perf_counter)
    future: concurrent.futures.Future[PrefillResult | Completion] = field(
        default_factory=concurrent.futures.Future
    )

    arrival: int = 0
    state: SequenceState | None = None
    node: RadixNode[KV] | None = None
    cached_tokens: int = 0
    computed_tokens: int = 0
    output: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    t_first_token: float | None = None

    @property
    def prefill_target(self) -> int:
        """Prompt tokens whose KV this request needs before it can decode."""
        return len(self.ids)


class Scheduler:
    """Owns the waiting queue, the radix tree and the worker thread. See the module docstring.

    ``step_hook`` (tests) is called on the worker thread with each :class:`StepEvent` right
    before the step runs. ``check_on_idle`` runs :meth:`check_integrity` whenever the worker
    runs out of work; a failure is kept in ``integrity_error``.
    """

    def __init__(
        self,
        runner: ModelRunner,
        cache: RadixCache[KV],
        *,
        chunk_size: int = 256,
        pin_ttl_s: float = 30.0,
        check_on_idle: bool = False,
        step_hook: Callable[[StepEvent], None] | None = None,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        self.runner = runner
        self.cache = cache
        self.chunk_size = chunk_size
        self.pin_ttl_s = pin_ttl_s
        self.check_on_idle = check_on_idle
        self.step_hook = step_hook
        self.integrity_error: RuntimeError | None = None
        self.eos_token_id = runner.eos_token_id

        self.chunks_executed = 0
        self.chunks_interrupted = 0
        self.decode_steps = 0
        self.events: deque[StepEvent] = deque(maxlen=_MAX_EVENTS)
        self.reset_counters()

        self._cv = threading.Condition()
        self._inbox: list[Request] = []
        self._aborts: list[str] = []
        self._calls: list[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = []
        self._closed = False
        self._waiting: list[Request] = []
        self._pins: dict[str, RadixNode[KV]] = {}
        self._arrivals = itertools.count()
        self._last_rid: str | None = None
        self._running: Request | None = None
        self._yield = False
        self._dirty = False
        self._thread = threading.Thread(target=self._loop, name="agentwarm-engine", daemon=True)
        self._thread.start()

    def reset_counters(self) -> None:
        """Zero the traffic counters reported by ``stats`` (worker thread or before start)."""
        self.requests = 0
        self.aborted = 0
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.computed_tokens = 0

    # -------------------------------------------------------- any thread

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, req: Request) -> concurrent.futures.Future[PrefillResult | Completion]:
        """Queue ``req``; its future resolves with a PrefillResult / Completion or an error."""
        with self._cv:
            if self._closed:
                raise EngineUnavailable("the local engine is closed")
            self._inbox.append(req)
            running = self._running
            if running is not None and req.priority > running.priority:
                self._yield = True
            self._cv.notify()
        return req.future

    def abort(self, rid: str) -> None:
        """Abort ``rid`` at the next step boundary; drop its pin if it is a finished prefill."""
        with self._cv:
            self._aborts.append(rid)
            self._cv.notify()

    def call(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``fn`` on the worker thread between steps; its result resolves the future."""
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._cv:
            if self._closed:
                raise EngineUnavailable("the local engine is closed")
            self._calls.append((fn, fut))
            self._cv.notify()
        return fut

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker: queued and running requests fail with EngineUnavailable."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -------------------------------------------------------- worker thread

    def _loop(self) -> None:
        try:
            with torch.inference_mode():
                while self._serve_once():
                    pass
        except BaseException as exc:
            with self._cv:
                self._closed = True
            self._shutdown(EngineError(f"the local engine's worker failed: {exc!r}"))
            raise

    def _serve_once(self) -> bool:
        """Take new work, apply calls and aborts, run one step. False once closed."""
        with self._cv:
            while not (self._inbox or self._aborts or self._calls or self._closed or self._waiting):
                if self._dirty and self.check_on_idle:
                    self._dirty = False
                    self._idle_check()
                    continue
                self._cv.wait()
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
            calls, self._calls = self._calls, []
            closed = self._closed
        for req in inbox:
            req.arrival = next(self._arrivals)
            self._waiting.append(req)
        for fn, fut in calls:
            self._run_call(fn, fut)
        for rid in aborts:
            self._abort(rid)
        if closed:
            self._shutdown(EngineUnavailable("the local engine was closed"))
            return False
        if self._waiting:
            self._dirty = True
            req = max(self._waiting, key=lambda r: (r.priority, -r.arrival))
            with self._cv:
                self._running, self._yield = req, False
            try:
                self._step(req)
            finally:
                with self._cv:
                    self._running = None
        return True

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

    def _step(self, req: Request) -> None:
        try:
            if req.state is None:
                self._start(req)
            elif self._last_rid != req.rid and req.state.length < req.prefill_target:
                self._catch_up(req)
            if req.future.done():
                return
            assert req.state is not None
            if req.state.length < req.prefill_target:
                self._prefill_chunk(req)
            else:
                self._decode_step(req)
        except BaseException as exc:
            err = exc if isinstance(exc, EngineError) else EngineError(f"request failed: {exc}")
            if err is not exc:
                err.__cause__ = exc
            self._finish(req, err)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._last_rid = req.rid

    def _start(self, req: Request) -> None:
        limit = len(req.ids) - (1 if req.kind is RequestKind.GENERATE else 0)
        match = self.cache.match_prefix(req.namespace, req.ids[:limit])
        self.cache.lock(match.node)
        req.node = match.node
        req.cached_tokens = match.length
        if req.kind is RequestKind.PREFILL and match.length == len(req.ids):
            self._finish(req, None)
            return
        if req.kind is RequestKind.GENERATE:
            req.generator = make_generator(req.seed, self.runner.device)
        req.state = self._new_state(req, match.values)

    def _new_state(self, req: Request, values: tuple[KV | None, ...]) -> SequenceState:
        pieces = [v for v in values if v is not None]
        reserve = len(req.ids) + req.max_tokens - sum(int(p.shape[3]) for p in pieces)
        return self.runner.new_state(pieces, reserve=reserve)

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
        req.state = self._new_state(req, match.values)

    def _prefill_chunk(self, req: Request) -> None:
        state = req.state
        assert state is not None
        start = state.length
        stop = min(start + self.chunk_size, len(req.ids))
        last = stop == len(req.ids)
        self._log(StepEvent(req.rid, "prefill", start, stop, req.priority))
        want_logits = last and req.kind is RequestKind.GENERATE
        if req.priority < Priority.LIVE:
            state.interrupt = self._should_yield
        try:
            logits = self.runner.extend(state, req.ids[start:stop], want_logits=want_logits)
        except Interrupted:
            # Still waiting: the next step serves the newcomer (or the abort) first. The log
            # keeps "prefill" for chunks that ran; this one is marked as interrupted.
            self.chunks_interrupted += 1
            self.events.pop()
            self._log(StepEvent(req.rid, "interrupted", start, stop, req.priority))
            return
        finally:
            state.interrupt = None
        self.chunks_executed += 1
        req.computed_tokens += stop - start
        self._insert(req, req.ids[:stop])
        if not last:
            return
        if req.kind is RequestKind.PREFILL:
            self._finish(req, None)
            return
        assert logits is not None
        req.t_first_token = time.perf_counter()
        self._emit(req, logits)

    def _should_yield(self) -> bool:
        return self._yield

    def _decode_step(self, req: Request) -> None:
        state = req.state
        assert state is not None
        token = req.output[-1]
        self._log(StepEvent(req.rid, "decode", state.length, state.length + 1, req.priority))
        logits = self.runner.decode_step(state, token)
        self.decode_steps += 1
        self._emit(req, logits)

    def _emit(self, req: Request, logits: torch.Tensor) -> None:
        """Sample the next token of a generate request and finish it if it must stop."""
        assert req.state is not None
        if req.on_logits is not None:
            req.on_logits(logits)
        token = sample(logits, temperature=req.temperature, generator=req.generator)
        if token == self.eos_token_id:
            self._finish(req, "stop")
            return
        req.output.append(token)
        if req.on_token is not None:
            req.on_token(token)
        if len(req.output) >= req.max_tokens or req.state.length >= self.runner.max_context:
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

    def _move_lock(self, req: Request, node: RadixNode[KV]) -> None:
        assert req.node is not None
        self.cache.lock(node)
        self.cache.unlock(req.node)
        req.node = node

    def _abort(self, rid: str) -> None:
        for req in self._waiting:
            if req.rid == rid:
                self._finish(req, RequestAborted(f"request {rid} was aborted"))
                return
        node = self._pins.pop(rid, None)
        if node is not None:
            self.cache.unpin(node)

    def _finish(self, req: Request, outcome: str | BaseException | None) -> None:
        """Leave the queue: keep computed KV, unlock, count, resolve the future.

        ``outcome`` is ``None`` (prefill done), a finish reason (generate done) or an error;
        a RequestAborted error resolves a prefill as ABORTED instead of failing it.
        """
        if req in self._waiting:
            self._waiting.remove(req)
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
                text=self.runner.tokenizer.decode(req.output),
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

    def _pin(self, rid: str, node: RadixNode[KV]) -> None:
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
        """Drop every unlocked node and pin, zero the counters (worker thread)."""
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
        for req in list(self._waiting):
            try:
                self._finish(req, error)
            except Exception:
                self._waiting.remove(req)
                _resolve(req.future, error)
        with self._cv:
            inbox, self._inbox = self._inbox, []
            calls, self._calls = self._calls, []
        for req in inbox:
            _resolve(req.future, error)
        for _, fut in calls:
            _resolve(fut, error)


def _resolve(fut: concurrent.futures.Future[Any], outcome: object) -> None:
    """Set ``fut`` to ``outcome`` (an exception is raised by it) unless it is already done."""
    if fut.done():
        return
    try:
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        pass
