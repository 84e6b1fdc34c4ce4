"""The values of the engine protocol: request options, results, statistics, priorities, and
the one context-length rule. :mod:`agentwarm.engines.base` (the :class:`Engine` protocol)
re-exports every name, so engine authors import them from either.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from agentwarm.errors import ContextLengthExceeded

__all__ = (
    "CACHED_BY_SOURCE",
    "DEFAULT_MAX_CONTEXT",
    "SOURCE_DEVICE",
    "SOURCE_DISK",
    "SOURCE_HOST",
    "Completion",
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

#: Context length (tokens) of the built-in model presets and of the FakeEngine by default.
DEFAULT_MAX_CONTEXT = 8192


class Priority(IntEnum):
    """Priority classes. Higher wins, as in SGLang's ``--enable-priority-scheduling``."""

    SPECULATIVE = 0
    LIVE = 10


class PrefillStatus(StrEnum):
    DONE = "done"
    ABORTED = "aborted"


SOURCE_DEVICE, SOURCE_HOST, SOURCE_DISK = "device", "host", "disk"
CACHED_BY_SOURCE = (SOURCE_DEVICE, SOURCE_HOST, SOURCE_DISK)
"""The keys of ``cached_tokens_by_source`` (:class:`PrefillResult`, :class:`Completion`): an
engine with lower KV tiers reports ``device`` and one key per tier it has, summing to
``cached_tokens``; one without leaves the mapping empty. ``"device"``: found in the engine's own
prefix cache (the radix tree, in GPU memory on CUDA, in host RAM on CPU, where it is the host
tier itself); ``"host"``: loaded from the host-RAM tier (``LocalEngine(kv_dir=...)`` on CUDA);
``"disk"``: loaded from the disk tier (``LocalEngine(kv_dir=...)``). They are the ``device``,
``host`` and ``disk`` sources of vLLM's ``PromptTokenStats.cached_tokens_by_source`` (metric
``vllm:prompt_tokens_cached_by_source_total{source}``, whose other sources, ``p2p`` and
``external_unspecified``, agentwarm's engines do not have)."""


@dataclass(frozen=True, slots=True)
class PrefillResult:
    """Result of a prefill-only request.

    ``cached_tokens`` were already in the cache when the request was scheduled (or loaded from
    a lower tier, see :data:`CACHED_BY_SOURCE`); ``computed_tokens`` were computed by this
    request (fewer than ``prompt_tokens - cached_tokens`` when it was aborted part-way).
    """

    rid: str
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    status: PrefillStatus
    #: ``cached_tokens`` split by the tier they came from (:data:`CACHED_BY_SOURCE`).
    cached_tokens_by_source: Mapping[str, int] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status is PrefillStatus.DONE


@dataclass(frozen=True, slots=True)
class Completion:
    """Result of a live ``generate`` call.

    ``ttft_s`` is measured from the call to the first generated token;
    ``cached_tokens`` of the ``prompt_tokens`` came from the prefix cache.
    ``finish_reason`` is ``"stop"`` (EOS or stop token), ``"length"`` or ``"abort"``.
    ``tool_calls`` are the tool calls found in ``text`` (OpenAI's ``{"id", "type": "function",
    "function": {"name", "arguments"}}``): filled by the runtime's ``ctx.llm`` when the engine's
    chat template belongs to a model family whose call format agentwarm knows
    (:func:`agentwarm.chat.parse_tool_calls`), else empty. Engines leave it empty.
    """

    text: str
    token_ids: tuple[int, ...]
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    finish_reason: str
    rid: str = ""
    e2e_s: float = 0.0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    #: ``cached_tokens`` split by the tier they came from (:data:`CACHED_BY_SOURCE`).
    cached_tokens_by_source: Mapping[str, int] = field(default_factory=dict)

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens this request had to prefill itself."""
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One piece of a streamed generation; the last chunk carries the final ``completion``."""

    token_ids: tuple[int, ...]
    text: str
    completion: Completion | None = None


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Cache and traffic counters of an engine, cumulative since start (or last flush).

    ``prompt_tokens`` counts the prompts of finished requests; an aborted request adds only the
    prompt tokens processed before the abort (its ``hit_tokens`` + ``computed_tokens``), so that
    ``hit_tokens / prompt_tokens`` stays the hit rate of the work done.

    The ``tier_*`` fields describe a disk KV tier (``LocalEngine(kv_dir=...)``); engines without
    one keep the defaults. ``disk_hit_tokens`` are the part of ``hit_tokens`` loaded from a tier
    below the device cache: the host and disk tiers of ``LocalEngine``; for a vLLM server every
    source of ``vllm:prompt_tokens_cached_by_source_total`` but ``device`` (host, disk, p2p, a
    connector's);
    ``tier_bytes_written`` / ``tier_bytes_read`` / ``tier_stored_bytes`` are the tier's own
    counters since it was opened (a flush does not zero them); ``tier_loads_refused`` counts
    loads refused because recomputing was measured to be faster; ``tier_enabled`` is ``None``
    without a tier, ``False`` once the tier turned itself off (disk full, unwritable).
    ``host_tier_stored_bytes`` / ``host_tier_max_bytes``: the host-RAM tier between the device
    cache and the disk tier (``LocalEngine`` on CUDA; 0 without one).
    """

    cached_tokens: int
    capacity_tokens: int | None
    evicted_tokens: int
    hit_tokens: int
    prompt_tokens: int
    computed_tokens: int
    requests: int
    aborted: int
    disk_hit_tokens: int = 0
    tier_bytes_written: int = 0
    tier_bytes_read: int = 0
    tier_loads_refused: int = 0
    tier_stored_bytes: int = 0
    tier_enabled: bool | None = None
    host_tier_stored_bytes: int = 0
    host_tier_max_bytes: int = 0


def check_context(prompt_tokens: int, limit: int, *, max_tokens: int = 0) -> None:
    """Raise :class:`~agentwarm.errors.ContextLengthExceeded` unless a prompt of
    ``prompt_tokens`` and up to ``max_tokens`` generated tokens fit a context of ``limit``.

    A live request whose output would run past the context is refused up front (as SGLang
    does), rather than answered with the few tokens that happen to fit."""
    if prompt_tokens > limit:
        raise ContextLengthExceeded(
            f"prompt of {prompt_tokens} tokens exceeds the model context of {limit} tokens; "
            "shorten the prompt (system, tools, transcript) or use a longer-context model",
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            limit=limit,
        )
    if prompt_tokens + max_tokens > limit:
        raise ContextLengthExceeded(
            f"prompt of {prompt_tokens} tokens + max_tokens {max_tokens} exceeds the model "
            f"context of {limit} tokens; lower max_tokens to at most {limit - prompt_tokens} "
            "or shorten the prompt",
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            limit=limit,
        )


def new_rid() -> str:
    """A fixed-length (32 hex chars) unique request id; safe for SGLang's prefix-matched aborts."""
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillParams:
    """The options of one prefill request (``Engine.prefill``'s keywords, as one value).

    Wrappers pass it on unchanged, or change one field with :func:`dataclasses.replace`.
    """

    #: Higher runs first (SGLang's convention); :class:`Priority` names the two classes
    #: agentwarm uses. Live work always goes before speculative work.
    priority: int = Priority.SPECULATIVE
    #: Identifies the request for ``abort``: a new :func:`new_rid` by default (fixed length and
    #: unique, because SGLang matches rids by prefix). One params object is one request.
    rid: str = field(default_factory=new_rid)
    #: Part of the cache key (tenant isolation, SGLang's ``cache_salt``): two namespaces never
    #: share cached KV.
    namespace: str = ""
    #: Routing key: engines with several workers send every request of one session (a workflow
    #: run) to the same worker. Single-worker engines ignore it.
    session: str | None = None
    #: How long the finished prefill's prefix stays pinned in the cache (protected from
    #: eviction), in seconds; ``None``: the engine's default. A prefill of a prefix already
    #: cached renews its pin (a pin never shortens). Engines without pins ignore it (the
    #: SGLang client does not send it); ``0`` pins nothing.
    pin_ttl_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateParams:
    """The options of one live request (``Engine.generate``'s keywords, as one value).

    ``priority``, ``rid``, ``namespace`` and ``session`` mean what they mean in
    :class:`PrefillParams`; wrappers pass it on unchanged or change one field with
    :func:`dataclasses.replace`.
    """

    #: Most tokens to decode.
    max_tokens: int = 16
    #: 0 is greedy decoding.
    temperature: float = 0.0
    #: See :class:`PrefillParams`; a live request's default is :attr:`Priority.LIVE`.
    priority: int = Priority.LIVE
    #: See :class:`PrefillParams`.
    rid: str = field(default_factory=new_rid)
    #: See :class:`PrefillParams`.
    namespace: str = ""
    #: See :class:`PrefillParams`.
    session: str | None = None
    #: Sampling seed, used when ``temperature > 0``: the same prompt, seed and temperature give
    #: the same output.
    seed: int | None = None
