"""The engine protocol: what the runtime needs from an inference engine.

An engine owns a prefix (radix) KV cache and its accounting. The runtime talks to it through
token ids only (never text), so that a prefetched prefix is an exact prefix of the later real
request (DESIGN §3).

Rules every implementation keeps:

* ``prefill`` computes and caches the KV of ``ids`` without decoding. It is how speculation warms
  the cache. It returns a :class:`PrefillResult`; an aborted prefill is *not* an error, it returns
  ``status=ABORTED`` and the KV computed before the abort stays cached.
* ``generate`` is a live request. ``Completion.cached_tokens`` is the number of prompt tokens whose
  KV came from the cache (computed earlier by any request, speculative or live).
* A request's options are one frozen object, :class:`GenerateParams` or :class:`PrefillParams`
  (their fields are documented there: priority, rid, namespace, session, ...). Callers use the
  keyword methods (``engine.generate(ids, max_tokens=4)``), which build it.
* ``encode`` never adds special tokens, so segment-wise encodings can be concatenated.
* Failures raise :mod:`agentwarm.errors` types, translated ``from`` the original exception.
* A request that does not fit the model context (prompt, plus ``max_tokens`` for ``generate``)
  raises :class:`~agentwarm.errors.ContextLengthExceeded` before any work: see
  :func:`check_context`, the one rule every engine applies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, final

from opentelemetry.trace import SpanKind

from agentwarm.engines.types import (
    CACHED_BY_SOURCE,
    DEFAULT_MAX_CONTEXT,
    Completion,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    PrefillStatus,
    Priority,
    StreamChunk,
    check_context,
    new_rid,
)

if TYPE_CHECKING:
    from agentwarm.chat import ChatTemplate

__all__ = (
    "CACHED_BY_SOURCE",
    "DEFAULT_MAX_CONTEXT",
    "Completion",
    "Engine",
    "EngineStats",
    "GenerateParams",
    "PrefillParams",
    "PrefillResult",
    "PrefillStatus",
    "Priority",
    "StreamChunk",
    "check_context",
    "new_rid",
)

#: The keyword entry points of :class:`Engine` and the params form each one calls.
_KEYWORD_METHODS = (
    ("prefill", "prefill_with"),
    ("generate", "generate_with"),
    ("generate_stream", "stream_with"),
)


class Engine(ABC):
    """Abstract inference engine. See the module docstring for the rules implementations keep.

    How to write an engine: subclass it and implement the *params forms* —
    :meth:`prefill_with`, :meth:`generate_with` and optionally :meth:`stream_with` (the default
    yields one chunk with the whole completion) — plus :meth:`abort`, :meth:`encode`,
    :meth:`decode` and :meth:`stats`; override :meth:`flush_cache` and :meth:`aclose` when the
    engine has a cache to flush or resources to release. Set :attr:`provider_name` and
    :attr:`span_kind` (and :attr:`supports_promotion` when true).

    The keyword methods :meth:`prefill`, :meth:`generate` and :meth:`generate_stream` are the
    callers' entry points and the one place their keywords are spelled: they build a
    :class:`PrefillParams` / :class:`GenerateParams` and call the params form. Do not override
    them: a wrapper engine (routing, metering) calls the wrapped engine's params form directly,
    passing the params object on unchanged (``dataclasses.replace`` to change one field), and
    would skip such an override.
    """

    model_name: str = "unknown"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for method, form in _KEYWORD_METHODS:
            if method in cls.__dict__:
                raise TypeError(
                    f"{cls.__qualname__} overrides Engine.{method}, which only builds the "
                    f"params object: implement {form}(ids, params) instead (wrappers call the "
                    f"params form and would skip an override of {method})"
                )

    @property
    @abstractmethod
    def provider_name(self) -> str:
        """``gen_ai.provider.name`` of this engine's ``text_completion`` spans (DESIGN §6):
        every engine class says its own (a class attribute will do), none is assumed."""

    @property
    @abstractmethod
    def span_kind(self) -> SpanKind:
        """Kind of those spans: ``INTERNAL`` for an engine in this process, ``CLIENT`` for a
        remote server (the span then stands for the request on the wire)."""

    #: True when a live request reuses an in-flight speculative prefill of its prefix (so the
    #: runtime need not wait for that prefill before sending the live request).
    supports_promotion: bool = False
    #: True when a live request preempts speculative work at once (within one layer, not one
    #: prefill chunk) and the engine runs one request at a time: a speculative token the live
    #: request overtakes is then never computed at its expense, so speculation may fill idle
    #: time past the expected window (:mod:`agentwarm.runtime.prefetch.spend`). False for
    #: servers that batch speculative prefills with live work (vLLM, SGLang).
    preempts_speculation: bool = False
    #: The model's chat template, which the runtime renders prompts with; ``None`` (no template:
    #: the runtime uses :data:`agentwarm.chat.FALLBACK`). Engines set it from their tokenizer.
    chat_template: ChatTemplate | None = None

    # --- the callers' entry points: build the params, call the params form -------------------

    @final
    async def prefill(
        self,
        ids: Sequence[int],
        *,
        priority: int = Priority.SPECULATIVE,
        rid: str | None = None,
        namespace: str = "",
        session: str | None = None,
        pin_ttl_s: float | None = None,
    ) -> PrefillResult:
        """Compute and cache the KV of ``ids`` without decoding (see :class:`PrefillParams`;
        ``rid=None`` is a new one)."""
        params = PrefillParams(
            priority=priority,
            rid=rid or new_rid(),
            namespace=namespace,
            session=session,
            pin_ttl_s=pin_ttl_s,
        )
        return await self.prefill_with(ids, params)

    @final
    async def generate(
        self,
        ids: Sequence[int],
        *,
        max_tokens: int = 16,
        temperature: float = 0.0,
        priority: int = Priority.LIVE,
        rid: str | None = None,
        namespace: str = "",
        session: str | None = None,
        seed: int | None = None,
    ) -> Completion:
        """Prefill ``ids`` (reusing cached prefix KV) and decode up to ``max_tokens`` tokens (see
        :class:`GenerateParams`; ``rid=None`` is a new one).

        Raises :class:`~agentwarm.errors.RequestAborted` if aborted.
        """
        return await self.generate_with(
            ids,
            GenerateParams(
                max_tokens=max_tokens,
                temperature=temperature,
                priority=priority,
                rid=rid or new_rid(),
                namespace=namespace,
                session=session,
                seed=seed,
            ),
        )

    @final
    def generate_stream(
        self,
        ids: Sequence[int],
        *,
        max_tokens: int = 16,
        temperature: float = 0.0,
        priority: int = Priority.LIVE,
        rid: str | None = None,
        namespace: str = "",
        session: str | None = None,
        seed: int | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """Like :meth:`generate` but yields tokens as they are decoded; the last chunk carries
        the :class:`Completion`. Closing the iterator early aborts the request."""
        return self.stream_with(
            ids,
            GenerateParams(
                max_tokens=max_tokens,
                temperature=temperature,
                priority=priority,
                rid=rid or new_rid(),
                namespace=namespace,
                session=session,
                seed=seed,
            ),
        )

    # --- what an engine implements -------------------------------------------------------------

    @abstractmethod
    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        """:meth:`prefill` with its options as one value."""

    @abstractmethod
    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        """:meth:`generate` with its options as one value."""

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        """:meth:`generate_stream` with its options as one value. The default yields one chunk
        with the whole completion; engines that decode token by token override it."""
        completion = await self.generate_with(ids, params)
        yield StreamChunk(completion.token_ids, completion.text, completion)

    @abstractmethod
    async def abort(self, rid: str) -> None:
        """Abort request ``rid`` if it is queued or running; unknown rids are ignored."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without special tokens."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``."""

    @abstractmethod
    async def stats(self) -> EngineStats:
        """Current cache and traffic counters."""

    async def flush_cache(self) -> None:  # noqa: B027 - optional hook, default no-op
        """Drop every unlocked cached prefix (SGLang's ``/flush_cache``)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, default no-op
        """Release resources (threads, connections). Idempotent."""

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
