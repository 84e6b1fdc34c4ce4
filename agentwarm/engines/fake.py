"""``FakeEngine``: the embedded engine's scheduler and radix cache over a cost model, no torch.

It runs the real :class:`~agentwarm.engines.local.scheduler.Scheduler` (one worker, chunked
prefill, priority classes, live work interrupting speculative chunks, aborts at step
boundaries, promotion, pins, the same accounting), driven by an asyncio task instead of a
thread, with a step runner that computes nothing
(:class:`~agentwarm.engines.cost_model.CostModel`): a prefill chunk of ``n`` tokens takes
``n * seconds_per_token`` and each output token ``seconds_per_output_token``. Zero means no
wait: a free prefill chunk only yields to the event loop once (so that work submitted at the
same moment is ordered by the scheduler), free decode steps run back to back. Time is kept on a
clock that catches up when the loop wakes the worker a little late (up to ``_MAX_LAG_S``), so a
run of short steps takes the cost model's time, not the loop's timer granularity times the
number of steps. Use it to test workflows and policies fast and exactly.

Text is byte-encoded (one token per UTF-8 byte). Outputs are pseudo-random lowercase words that
depend only on the prompt ids (and ``seed`` when ``temperature > 0``), so a run is reproducible
and outputs are identical with or without prefetching.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry.trace import SpanKind

from agentwarm import telemetry as tm
from agentwarm.engines.base import (
    DEFAULT_MAX_CONTEXT,
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    StreamChunk,
    check_context,
)
from agentwarm.engines.cost_model import CostModel
from agentwarm.engines.local.scheduler import Request, RequestKind, Scheduler, Step
from agentwarm.engines.radix import RadixCache
from agentwarm.errors import EngineUnavailable, InvalidRequest, RequestAborted

__all__ = ("DEFAULT_LOG_LIMIT", "FakeEngine", "RequestLog")

_MAX_LAG_S = 0.01
"""How far the cost model's clock may lag the loop and catch up: more than the loop's timer
granularity (about 1 ms per wait), less than a stall of a busy machine, which delays the engine
as it delays everything else instead of letting it burst through the steps it missed."""

DEFAULT_LOG_LIMIT = 10_000
"""How many finished requests (``FakeEngine.log``) and aborts (``FakeEngine.aborts``) a
FakeEngine keeps by default: plenty for a test, bounded for a long-running ``agentwarm serve
--engine fake`` (each entry holds the request's rid, namespace and session, up to ~1 KB)."""

T = TypeVar("T")


class _History(list[T]):
    """A list that keeps only the last ``limit`` items given to ``append`` (the oldest go
    first); a plain list otherwise, so tests index, slice and compare it as one."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def append(self, item: T) -> None:
        super().append(item)
        if len(self) > self.limit:
            del self[0]


@dataclass(slots=True)
class RequestLog:
    """One finished request as the engine saw it (for tests and debugging)."""

    rid: str
    kind: str
    priority: int
    namespace: str
    session: str | None
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    status: str


@dataclass(eq=False)
class _Request(Request):
    session: str | None = None


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark an abandoned future's exception as seen (no 'never retrieved' warning)."""
    if not fut.cancelled():
        fut.exception()


class FakeEngine(Engine):
    """Deterministic engine for tests and simulations (see module docstring).

    ``max_cached_tokens`` bounds the radix cache; finished speculative prefills pin their prefix
    for ``pin_ttl_s``. ``log`` records the last ``log_limit`` finished requests and ``aborts``
    the last ``log_limit`` aborts received (see :data:`DEFAULT_LOG_LIMIT`); ``stats()`` counts
    all. ``max_context`` is the model context in tokens (bytes), as the built-in presets' by
    default: a longer prompt, or a prompt plus ``max_tokens`` past it, raises
    ``ContextLengthExceeded``. ``scheduler`` is the scheduler; its ``events`` keep the last
    ``log_limit`` steps. A subclass overriding :meth:`generate_with` (a test double reshaping
    completions) streams its completion as one chunk: a stream ends with what generate returns.
    """

    supports_promotion = True
    preempts_speculation = True
    provider_name = tm.PROVIDER_FAKE
    span_kind = SpanKind.INTERNAL

    def __init__(
        self,
        *,
        seconds_per_token: float = 2e-5,
        seconds_per_output_token: float = 2e-4,
        chunk_size: int = 256,
        max_cached_tokens: int | None = None,
        pin_ttl_s: float = 30.0,
        max_context: int = DEFAULT_MAX_CONTEXT,
        model_name: str = "fake",
        log_limit: int = DEFAULT_LOG_LIMIT,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        if log_limit < 0:
            raise ValueError("log_limit must be >= 0")
        if max_context < 1:
            raise ValueError("max_context must be >= 1")
        self.seconds_per_token = seconds_per_token
        self.seconds_per_output_token = seconds_per_output_token
        self.chunk_size = chunk_size
        self.pin_ttl_s = pin_ttl_s
        self.max_context = max_context
        self.model_name = model_name
        self.cache: RadixCache[None] = RadixCache(max_cached_tokens)
        self.log: list[RequestLog] = _History(log_limit)
        self.aborts: list[str] = _History(log_limit)
        self.scheduler = Scheduler(
            CostModel(max_context, self.decode),
            self.cache,
            chunk_size=chunk_size,
            pin_ttl_s=pin_ttl_s,
            thread=False,
            name="FakeEngine",
            max_events=log_limit,
        )
        self.scheduler.on_finish = self._logged
        self._worker: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._cut: asyncio.Future[bool] | None = None  # set to end the wait for a step early
        self._cut_by_priority = False  # whether work of higher priority may end that wait
        self._closed = False

    @property
    def chunks(self) -> int:
        """Prefill chunks run so far (interrupted ones not counted)."""
        return self.scheduler.chunks_executed

    # --- protocol ---------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        result = await self._run(self._request(ids, params))
        assert isinstance(result, PrefillResult)
        return result

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        result = await self._run(self._request(ids, params))
        assert isinstance(result, Completion)
        return result

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        """Yield one chunk per output token as it is decoded, then a chunk carrying the
        Completion.

        Raises :class:`~agentwarm.errors.RequestAborted` if the request is aborted (the tokens
        yielded before stay yielded); closing the iterator early aborts the request."""
        if type(self).generate_with is not FakeEngine.generate_with:
            async for chunk in super().stream_with(ids, params):  # the subclass's completion
                yield chunk
            return
        req = self._request(ids, params)
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        req.on_token = queue.put_nowait
        fut = self._submit(req)
        fut.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (token := await queue.get()) is not None:
                yield StreamChunk((token,), self.decode((token,)))
            completion = fut.result()
            assert isinstance(completion, Completion)
            yield StreamChunk((), "", completion)
        finally:
            if not fut.done():
                self._abort(req.rid)
                fut.add_done_callback(_retrieve)

    async def abort(self, rid: str) -> None:
        """Abort a queued or running request at its next step boundary; for a finished
        speculative prefill, drop its pin (the runtime aborts losing branches, whose prefixes
        should not crowd out live ones)."""
        self.aborts.append(rid)
        self._abort(rid)

    async def stats(self) -> EngineStats:
        sched = self.scheduler
        return EngineStats(
            cached_tokens=self.cache.total_tokens,
            capacity_tokens=self.cache.max_tokens,
            evicted_tokens=self.cache.evicted_tokens,
            hit_tokens=sched.traffic.hit_tokens,
            prompt_tokens=sched.traffic.prompt_tokens,
            computed_tokens=sched.traffic.computed_tokens,
            requests=sched.traffic.requests,
            aborted=sched.traffic.aborted,
        )

    async def flush_cache(self) -> None:
        """Drop every unlocked prefix and pin and zero the counters, between two steps."""
        if self.scheduler.closed:
            self.scheduler.flush()
            return
        done = self.scheduler.call(self.scheduler.flush)
        self._kick()
        await asyncio.wrap_future(done)

    async def aclose(self) -> None:
        self._closed = True
        self.scheduler.close()
        self._cut_short()
        self._kick(start=False)
        worker, self._worker = self._worker, None
        if worker is not None and worker.get_loop() is asyncio.get_running_loop():
            await asyncio.gather(worker, return_exceptions=True)

    # --- requests ---------------------------------------------------------------------------

    def _request(self, ids: Sequence[int], params: PrefillParams | GenerateParams) -> _Request:
        if self._closed:
            raise EngineUnavailable("FakeEngine is closed")
        if not ids:
            raise InvalidRequest("empty prompt: ids must hold at least one token")
        live = params if isinstance(params, GenerateParams) else None
        max_tokens = max(1, live.max_tokens) if live else 0
        check_context(len(ids), self.max_context, max_tokens=max_tokens)
        return _Request(
            rid=params.rid,
            kind=RequestKind.GENERATE if live else RequestKind.PREFILL,
            ids=tuple(ids),
            priority=int(params.priority),
            namespace=params.namespace,
            max_tokens=max_tokens,
            temperature=live.temperature if live else 0.0,
            seed=live.seed if live else None,
            session=params.session,
            future=asyncio.get_running_loop().create_future(),
            pin_ttl_s=params.pin_ttl_s if isinstance(params, PrefillParams) else None,
        )

    def _submit(self, req: _Request) -> asyncio.Future[Any]:
        fut = self.scheduler.submit(req)
        assert isinstance(fut, asyncio.Future)
        if self._cut_by_priority and self.scheduler.yield_requested:
            self._cut_short()
        self._kick()
        return fut

    async def _run(self, req: _Request) -> PrefillResult | Completion:
        fut = self._submit(req)
        try:
            result: PrefillResult | Completion = await asyncio.shield(fut)
            return result
        except asyncio.CancelledError:
            if not fut.done():
                self._abort(req.rid)
                fut.add_done_callback(_retrieve)
            raise

    def _cut_short(self) -> None:
        """End the worker's wait for the step in flight now."""
        if self._cut is not None and not self._cut.done():
            self._cut.set_result(True)

    def _abort(self, rid: str) -> None:
        self.scheduler.abort(rid)
        self._kick()

    def _logged(self, req: Request, outcome: str | BaseException | None) -> None:
        aborted = isinstance(outcome, RequestAborted)
        status = "error" if isinstance(outcome, BaseException) and not aborted else "done"
        self.log.append(
            RequestLog(
                rid=req.rid,
                kind=req.kind.value,
                priority=req.priority,
                namespace=req.namespace,
                session=req.session if isinstance(req, _Request) else None,
                prompt_tokens=len(req.ids),
                cached_tokens=req.cached_tokens,
                computed_tokens=req.computed_tokens,
                status="aborted" if aborted else status,
            )
        )

    # --- the worker -------------------------------------------------------------------------

    def _kick(self, *, start: bool = True) -> None:
        """Wake the worker; start it (on the running loop) if it is not running."""
        worker = self._worker
        if start and (worker is None or worker.done()):
            self._wake = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._work())
        if self._wake is not None:
            self._wake.set()

    async def _work(self) -> None:
        """Serve the scheduler: plan a step, spend its cost, run it; sleep while idle."""
        sched, wake = self.scheduler, self._wake
        assert wake is not None
        loop = asyncio.get_running_loop()
        due = loop.time()  # when the work done so far is finished on the cost model's clock
        try:
            while True:
                if not sched.has_work:
                    wake.clear()
                    await wake.wait()
                    due = loop.time()
                    continue
                if not sched.serve():
                    return
                step = sched.next_step()
                if step is None:
                    continue
                due = await self._spend(step, due, loop)
                sched.run_step(step)
                del step  # keep no finished request alive while idle
        except BaseException as exc:
            sched.fail(exc)
            raise

    async def _spend(self, step: Step, due: float, loop: asyncio.AbstractEventLoop) -> float:
        """Wait out ``step``'s cost (a free prefill chunk yields once). Work of higher priority
        cuts an interruptible chunk short, and ``aclose`` any step: the cost model is told and
        interrupts the chunk if the scheduler asks it to yield. Returns the new ``due``."""
        if step.event.kind == "decode":
            cost = self.seconds_per_output_token
        else:
            cost = (step.event.stop - step.event.start) * self.seconds_per_token
        if cost <= 0 and step.event.kind == "decode":
            return due  # free decode steps run back to back, without yielding to the loop
        now = loop.time()
        due = max(due, now - _MAX_LAG_S) + cost
        delay = due - now
        if delay <= 0:
            await asyncio.sleep(0)
            return due
        cut = self._cut = loop.create_future()
        self._cut_by_priority = step.interruptible
        timer = loop.call_later(delay, _settle, cut)
        try:
            if await cut:
                step.req.state.cut = True
                return loop.time()
            return due
        finally:
            timer.cancel()
            self._cut = None

    def __repr__(self) -> str:
        return (
            f"FakeEngine(seconds_per_token={self.seconds_per_token}, "
            f"seconds_per_output_token={self.seconds_per_output_token}, "
            f"chunk_size={self.chunk_size}, max_cached_tokens={self.cache.max_tokens})"
        )


def _settle(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
