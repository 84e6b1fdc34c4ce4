"""``LocalEngine``: the embedded prefix-caching engine (torch + transformers, any device).

It implements :class:`agentwarm.engines.base.Engine` on top of a :class:`ModelRunner`, a
:class:`RadixCache` of per-node K/V and a :class:`Scheduler` whose single worker thread runs all
torch compute. The asyncio methods only validate, hand a request to the worker and await its
future.

Rules callers keep (beyond the engine protocol):

* Use it from one event loop; ``async with LocalEngine(...) as engine`` closes the worker.
* Token ids must lie in the model's vocabulary and a prompt must fit ``max_context``.
* ``abort(rid)`` of a running or queued request ends it at the next chunk or token boundary; of
  a finished speculative prefill it releases the prefill's TTL pin (the prefetcher's way to mark
  a losing branch). Cancelling the awaiting task aborts the request too.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from opentelemetry.trace import SpanKind

from agentwarm import telemetry as tm
from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    Priority,
    StreamChunk,
    check_context,
    new_rid,
)
from agentwarm.engines.local.disk import DiskLink
from agentwarm.engines.local.model import LoadedModel, load_model
from agentwarm.engines.local.runner import (
    KV,
    KV_OPS,
    ModelRunner,
    cuda_cache_bytes,
    resolve_device,
    resolve_dtype,
)
from agentwarm.engines.local.scheduler import Request, RequestKind, Scheduler, StepEvent
from agentwarm.engines.radix import RadixCache
from agentwarm.engines.tokenizers import chat_template_of
from agentwarm.errors import EngineError, InvalidRequest

if TYPE_CHECKING:
    from agentwarm.engines.tokenizers import Tokenizer

__all__ = ("DEFAULT_CACHE_BYTES", "LocalEngine")

T = TypeVar("T")


def _default_cache_bytes() -> int:
    """A quarter of physical memory, between 2 and 8 GiB (2 GiB where it cannot be read)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 2 << 30
    return min(max(physical // 4, 2 << 30), 8 << 30)


DEFAULT_CACHE_BYTES = _default_cache_bytes()
"""KV bytes the cache of an engine off CUDA may hold when neither ``max_cached_tokens`` nor
``max_cache_bytes`` is given: a quarter of physical memory, between 2 and 8 GiB. Agent prompts
branch (one transcript under several subagents' heads), so a cache that only fits a few of them
evicts what speculation just computed. On CUDA the default is half of the GPU memory left once
the weights are loaded (:func:`~agentwarm.engines.local.runner.cuda_cache_bytes`)."""


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark an abandoned future's exception as seen (no 'never retrieved' warning)."""
    if not fut.cancelled():
        fut.exception()


class LocalEngine(Engine):
    """Embedded engine: ``model`` is a preset (``"tiny"``, ``"small"``, ...: see
    :data:`~agentwarm.engines.local.model.PRESETS`), a checkpoint directory or an already loaded
    model (engines may share one; ``device``/``dtype``/``seed`` then unused). Its
    ``chat_template`` is the model tokenizer's (Qwen2.5's for the presets but ``*-bytes``).

    ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``) and ``dtype`` (``"float32"``,
    ``"bfloat16"``, ``"float16"`` or the torch dtype) place the weights, the KV cache and the
    sampling. ``max_cached_tokens`` bounds the radix cache (default: as many tokens as fit in
    ``max_cache_bytes`` of KV, whose default is :data:`DEFAULT_CACHE_BYTES` off CUDA and half
    the GPU memory left after loading on CUDA); ``chunk_size`` is the prefill chunk (the
    preemption and abort granularity); finished speculative prefills stay pinned for
    ``pin_ttl_s`` seconds unless the request gives its own (``PrefillParams.pin_ttl_s``).
    ``seed`` seeds preset weights. ``check_integrity_on_idle`` and ``step_hook`` are for tests:
    the first checks the cache whenever the worker idles, the second sees every step before it
    runs.

    ``kv_dir`` turns on the disk KV tier (default ``None``: none): a
    :class:`~agentwarm.engines.kvtier.DiskTier` in that directory, holding at most
    ``kv_disk_bytes`` (default :data:`~agentwarm.engines.kvtier.DEFAULT_KV_DISK_BYTES`) of KV
    produced by this model, dtype and chunk size only (their
    :func:`~agentwarm.engines.kvtier.model_fingerprint`; another model's files are never read).
    KV evicted from the radix cache is written there (the worker only enqueues, the tier's
    thread writes), and so is everything still cached when :meth:`aclose` stops the engine (it
    waits for the writes, off the event loop; :meth:`flush_cache` writes nothing). A request
    whose prompt continues on disk past its radix match loads those blocks instead of computing
    them when the measured read throughput makes that faster than the measured prefill
    throughput (while a figure is unknown it loads, and so measures it); loaded tokens count in
    ``cached_tokens``, split in ``cached_tokens_by_source`` (``"device"``, ``"disk"``, ``"host"``).
    A new engine on the same directory and model finds what an earlier one stored.
    ``kv_host_bytes``: the host-RAM tier above the disk (default on CUDA only; 0: none). Details:
    :mod:`~agentwarm.engines.local.disk`.

    Raises :class:`EngineError` when the model cannot be loaded, also when CUDA is asked for
    and not available; :class:`InvalidRequest` for an unknown ``dtype`` or ``device``.
    """

    supports_promotion = True
    preempts_speculation = True
    provider_name = tm.PROVIDER_LOCAL
    span_kind = SpanKind.INTERNAL

    def __init__(
        self,
        model: str | Path | LoadedModel = "tiny",
        *,
        max_cached_tokens: int | None = None,
        max_cache_bytes: int | None = None,
        chunk_size: int = 256,
        pin_ttl_s: float = 30.0,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = torch.float32,
        seed: int = 0,
        check_integrity_on_idle: bool = False,
        step_hook: Callable[[StepEvent], None] | None = None,
        kv_dir: str | Path | None = None,
        kv_disk_bytes: int | None = None,
        kv_host_bytes: int | None = None,
    ) -> None:
        if chunk_size <= 0:
            raise InvalidRequest(f"chunk_size must be positive, got {chunk_size}")
        if max_cached_tokens is not None and max_cached_tokens < 0:
            raise InvalidRequest(f"max_cached_tokens must be >= 0, got {max_cached_tokens}")
        if isinstance(model, LoadedModel):
            loaded = model
        else:
            dev, dt = resolve_device(device), resolve_dtype(dtype)
            try:
                loaded = load_model(model, device=dev, dtype=dt, seed=seed)
            except EngineError:
                raise
            except (OSError, RuntimeError, ValueError, TypeError) as exc:
                raise EngineError(f"cannot load model {str(model)!r}: {exc}") from exc
        self.runner = ModelRunner(loaded)
        self.model_name = loaded.name
        self.chat_template = chat_template_of(loaded.tokenizer, name=loaded.name)
        """The model's chat template (the tokenizer's, with its BOS/EOS), or ``None``: the
        ``*-bytes`` presets and checkpoints whose tokenizer has none."""
        if max_cached_tokens is None:
            if max_cache_bytes is None:
                on_cuda = self.runner.device.type == "cuda"
                max_cache_bytes = (
                    cuda_cache_bytes(self.runner.device) if on_cuda else DEFAULT_CACHE_BYTES
                )
            max_cached_tokens = max_cache_bytes // self.runner.kv_bytes_per_token
        self.cache: RadixCache[KV] = RadixCache(max_cached_tokens, ops=KV_OPS)
        self.scheduler = Scheduler(
            self.runner,
            self.cache,
            chunk_size=chunk_size,
            pin_ttl_s=pin_ttl_s,
            check_on_idle=check_integrity_on_idle,
            step_hook=step_hook,
        )
        self._active: set[str] = set()
        self.disk: DiskLink | None = DiskLink.open(
            loaded, self.runner, self.scheduler, kv_dir, kv_disk_bytes, chunk_size=chunk_size,
            host_bytes=kv_host_bytes, default_host_bytes=DEFAULT_CACHE_BYTES,
        )  # fmt: skip
        """The KV tiers (``kv_dir``, and a host tier above it) and their wiring, or ``None``."""

    # ------------------------------------------------------------ properties

    @property
    def tokenizer(self) -> Tokenizer:
        return self.runner.tokenizer

    @property
    def max_context(self) -> int:
        """Longest sequence (prompt + generated tokens) the model accepts."""
        return self.runner.max_context

    @property
    def chunks_executed(self) -> int:
        """Prefill chunks run so far (a counting hook for tests and benchmarks)."""
        return self.scheduler.chunks_executed

    # -------------------------------------------------------------- requests

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        req = Request(
            rid=params.rid,
            kind=RequestKind.PREFILL,
            ids=self._check_ids(ids),
            priority=int(params.priority),
            namespace=params.namespace,
            pin_ttl_s=params.pin_ttl_s,
        )
        result = await self._run(req)
        assert isinstance(result, PrefillResult)
        return result

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        result = await self._run(self._generate_request(ids, params, time.perf_counter()))
        assert isinstance(result, Completion)
        return result

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        """Yield one chunk per generated token, then a last chunk carrying the Completion.

        Raises :class:`~agentwarm.errors.RequestAborted` if the request is aborted; closing the
        iterator early aborts the request.
        """
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[int | None] = asyncio.Queue()

        def on_token(token: int) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, token)

        req = self._generate_request(ids, params, t0)
        req.on_token = on_token
        fut = self._submit(req)
        fut.add_done_callback(lambda _: queue.put_nowait(None))
        tokens: list[int] = []
        sent = ""
        try:
            while (token := await queue.get()) is not None:
                tokens.append(token)
                text = self.decode(tokens)
                text = text.rstrip("\ufffd")
                delta = ""
                if text.startswith(sent):
                    delta, sent = text[len(sent) :], text
                yield StreamChunk((token,), delta)
            completion = fut.result()
            assert isinstance(completion, Completion)
            rest = completion.text[len(sent) :] if completion.text.startswith(sent) else ""
            yield StreamChunk((), rest, completion)
        finally:
            if not fut.done():
                self.scheduler.abort(req.rid)
                fut.add_done_callback(_retrieve)  # nobody reads its RequestAborted now
            self._active.discard(req.rid)

    async def next_token_logits(
        self,
        ids: Sequence[int],
        *,
        priority: int = Priority.LIVE,
        namespace: str = "",
        rid: str | None = None,
    ) -> torch.Tensor:
        """Float32 next-token logits after ``ids`` (``[vocab]``), computed like a one-token
        greedy ``generate`` (reusing and filling the cache); for scoring and exactness tests."""
        captured: list[torch.Tensor] = []
        params = GenerateParams(
            max_tokens=1, priority=priority, rid=rid or new_rid(), namespace=namespace
        )
        req = self._generate_request(ids, params, time.perf_counter())
        req.on_logits = lambda logits: captured.append(logits.detach().clone())
        await self._run(req)
        return captured[0]

    def _generate_request(self, ids: Sequence[int], params: GenerateParams, t0: float) -> Request:
        if params.max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be >= 1, got {params.max_tokens} (use prefill)")
        if params.temperature < 0:
            raise InvalidRequest(f"temperature must be >= 0, got {params.temperature}")
        checked = self._check_ids(ids, max_tokens=params.max_tokens)
        return Request(
            rid=params.rid,
            kind=RequestKind.GENERATE,
            ids=checked,
            priority=int(params.priority),
            namespace=params.namespace,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            seed=params.seed,
            t_submit=t0,
        )

    def _check_ids(self, ids: Sequence[int], *, max_tokens: int = 0) -> tuple[int, ...]:
        """``ids`` as a tuple, checked: not empty, within the context with ``max_tokens`` more
        (a live request's error then states its max_tokens), inside the vocabulary."""
        out = tuple(int(i) for i in ids)
        if not out:
            raise InvalidRequest("empty prompt: ids must hold at least one token")
        check_context(len(out), self.max_context, max_tokens=max_tokens)
        lo, hi = min(out), max(out)
        if lo < 0 or hi >= self.runner.vocab_size:
            bad = lo if lo < 0 else hi
            raise InvalidRequest(f"token id {bad} outside vocabulary of {self.runner.vocab_size}")
        return out

    def _submit(self, req: Request) -> asyncio.Future[PrefillResult | Completion]:
        if req.rid in self._active:
            raise InvalidRequest(f"request id {req.rid!r} is already in flight")
        fut = asyncio.wrap_future(self.scheduler.submit(req))
        self._active.add(req.rid)
        return fut

    async def _run(self, req: Request) -> PrefillResult | Completion:
        fut = self._submit(req)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            self.scheduler.abort(req.rid)
            fut.add_done_callback(_retrieve)
            raise
        finally:
            self._active.discard(req.rid)

    async def abort(self, rid: str) -> None:
        self.scheduler.abort(rid)

    # ----------------------------------------------------------------- misc

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    async def stats(self) -> EngineStats:
        return await self._on_worker(self._stats)

    def _stats(self) -> EngineStats:
        sched = self.scheduler
        disk = self.disk.stats_fields() if self.disk is not None else {}
        return EngineStats(
            cached_tokens=self.cache.total_tokens,
            capacity_tokens=self.cache.max_tokens,
            evicted_tokens=self.cache.evicted_tokens,
            hit_tokens=sched.traffic.hit_tokens,
            prompt_tokens=sched.traffic.prompt_tokens,
            computed_tokens=sched.traffic.computed_tokens,
            requests=sched.traffic.requests,
            aborted=sched.traffic.aborted,
            disk_hit_tokens=sched.traffic.disk_hit_tokens,
            **disk,
        )

    async def flush_cache(self) -> None:
        await self._on_worker(self.scheduler.flush)

    async def check_integrity(self) -> None:
        """Check the radix cache on the worker thread; raise RuntimeError with the counts.

        Also raises a failure found earlier by ``check_integrity_on_idle``.
        """

        def check() -> None:
            if self.scheduler.integrity_error is not None:
                raise self.scheduler.integrity_error
            self.cache.check_integrity()

        await self._on_worker(check)

    async def _on_worker(self, fn: Callable[[], T]) -> T:
        return await asyncio.wrap_future(self.scheduler.call(fn))

    async def aclose(self) -> None:
        """Stop the worker; with a disk tier, then write what is still cached to it and wait
        for the writes (in a thread: the event loop keeps running)."""
        if not self.scheduler.closed:
            await asyncio.to_thread(self.scheduler.close)
        disk, self.disk = self.disk, None
        if disk is not None:
            await asyncio.to_thread(disk.close)

    async def __aenter__(self) -> LocalEngine:
        return self

    def __repr__(self) -> str:
        return (
            f"LocalEngine(model={self.model_name!r}, max_cached_tokens={self.cache.max_tokens}, "
            f"chunk_size={self.scheduler.chunk_size}, device={self.runner.device})"
        )
