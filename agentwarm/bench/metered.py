"""``MeteredEngine``: an engine wrapper that records every request's token accounting.

The benchmark wraps each mode's engine in one, so computed / cached token counts come from the
engine's own per-request answers (``Completion.cached_tokens``, ``PrefillResult.computed_tokens``)
whatever the engine is. With ``isolate=True`` every request goes to a fresh random namespace, so
nothing is ever reused from the prefix cache: the ``cold`` baseline on any engine, a remote
server included.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace

from opentelemetry.trace import SpanKind

from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    StreamChunk,
)
from agentwarm.errors import RequestAborted

__all__ = ("MeteredEngine", "RequestRecord")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One finished request as the engine answered it.

    ``kind`` is ``"generate"`` or ``"prefill"``; ``status`` is ``"done"`` or ``"aborted"``.
    For a generate, ``computed_tokens`` is ``prompt_tokens - cached_tokens`` (the protocol's
    definition); for a prefill it is what the engine reports having computed. A finished
    generate also keeps its ``ttft_s``, ``e2e_s`` and ``output_tokens`` (``None`` / 0 otherwise).
    """

    kind: str
    priority: int
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    status: str
    rid: str = ""
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0

    @property
    def itl_s(self) -> float | None:
        """Mean inter-token latency: seconds between output tokens after the first, ``(e2e_s -
        ttft_s) / (output_tokens - 1)``; ``None`` under 2 output tokens or without an e2e time
        (an engine that reports ``e2e_s=0``)."""
        if self.ttft_s is None or not self.e2e_s or self.output_tokens < 2:
            return None
        return max(0.0, self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


class MeteredEngine(Engine):
    """Delegates to ``inner`` and appends a :class:`RequestRecord` to ``records`` per request.

    Requests that raise (other than an abort) leave no record. ``isolate`` sends each request
    to a new namespace (no prefix reuse at all). Closing the wrapper closes ``inner``.
    """

    def __init__(self, inner: Engine, *, isolate: bool = False) -> None:
        self.inner = inner
        self.isolate = isolate
        self.records: list[RequestRecord] = []
        self.model_name = inner.model_name
        self.supports_promotion = inner.supports_promotion
        self.preempts_speculation = inner.preempts_speculation
        self.chat_template = inner.chat_template  # prompts are rendered as the engine's own

    @property
    def provider_name(self) -> str:
        return self.inner.provider_name

    @property
    def span_kind(self) -> SpanKind:
        return self.inner.span_kind

    def _ns(self, namespace: str) -> str:
        return f"{namespace}-{uuid.uuid4().hex}" if self.isolate else namespace

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        params = replace(params, namespace=self._ns(params.namespace))
        result = await self.inner.prefill_with(ids, params)
        self.records.append(
            RequestRecord(
                kind="prefill",
                priority=int(params.priority),
                prompt_tokens=result.prompt_tokens,
                cached_tokens=result.cached_tokens,
                computed_tokens=result.computed_tokens,
                status=str(result.status),
                rid=result.rid,
            )
        )
        return result

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        priority = int(params.priority)
        try:
            out = await self.inner.generate_with(
                ids, replace(params, namespace=self._ns(params.namespace))
            )
        except RequestAborted:
            self._record_aborted(priority, len(ids))
            raise
        self._record_done(priority, out)
        return out

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        """Pass the inner engine's chunks through as they come; the request is recorded as by
        :meth:`generate_with` (when its completion arrives, or as aborted)."""
        priority = int(params.priority)
        inner = self.inner.stream_with(ids, replace(params, namespace=self._ns(params.namespace)))
        try:
            async with aclosing(inner):  # type: ignore[type-var]  # closing early aborts inner
                async for chunk in inner:
                    if chunk.completion is not None:
                        self._record_done(priority, chunk.completion)
                    yield chunk
        except RequestAborted:
            self._record_aborted(priority, len(ids))
            raise

    def _record_aborted(self, priority: int, prompt_tokens: int) -> None:
        self.records.append(RequestRecord("generate", priority, prompt_tokens, 0, 0, "aborted"))

    def _record_done(self, priority: int, out: Completion) -> None:
        self.records.append(
            RequestRecord(
                kind="generate",
                priority=priority,
                prompt_tokens=out.prompt_tokens,
                cached_tokens=out.cached_tokens,
                computed_tokens=out.computed_tokens,
                status="done",
                rid=out.rid,
                ttft_s=out.ttft_s,
                e2e_s=out.e2e_s,
                output_tokens=len(out.token_ids),
            )
        )

    async def abort(self, rid: str) -> None:
        await self.inner.abort(rid)

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(ids)

    async def stats(self) -> EngineStats:
        return await self.inner.stats()

    async def flush_cache(self) -> None:
        await self.inner.flush_cache()

    async def aclose(self) -> None:
        await self.inner.aclose()
