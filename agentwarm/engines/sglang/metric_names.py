"""The Prometheus names on ``/metrics`` that the SGLang client reads
(:mod:`agentwarm.engines.sglang.metrics`) and ``agentwarm serve`` writes
(:mod:`agentwarm.server.metrics`): one definition for both."""

from __future__ import annotations

from enum import StrEnum

__all__ = ("MetricName",)


class MetricName(StrEnum):
    """The Prometheus names on ``/metrics`` that the client reads and ``agentwarm serve`` writes:
    SGLang's own (``sglang:``) and agentwarm's additions (``agentwarm:``)."""

    REQUESTS = "sglang:num_requests_total"
    """Requests finished (SGLang's own name)."""
    PROMPT_TOKENS = "sglang:prompt_tokens_total"
    """Prompt tokens of finished requests."""
    CACHED_TOKENS = "sglang:cached_tokens_total"
    """Prompt tokens served from the prefix cache."""
    GENERATION_TOKENS = "sglang:generation_tokens_total"
    """Tokens generated."""
    ABORTED_REQUESTS = "sglang:num_aborted_requests_total"
    """Requests aborted."""
    MAX_TOTAL_TOKENS = "sglang:max_total_num_tokens"
    """KV cache capacity in tokens (a gauge)."""
    USED_TOKENS = "sglang:num_used_tokens"
    """KV cache tokens in use (a gauge)."""
    RUNNING_REQUESTS = "sglang:num_running_reqs"
    """Requests running (a gauge)."""
    CACHE_HIT_RATE = "sglang:cache_hit_rate"
    """Cached / prompt tokens (a gauge)."""
    PREFILL_REQUESTS = "agentwarm:prefill_requests_total"
    """agentwarm: prefill-only requests."""
    COMPUTED_TOKENS = "agentwarm:computed_tokens_total"
    """agentwarm: prompt tokens computed (not cached)."""
    CACHE_TOKENS = "agentwarm:cache_tokens"
    """agentwarm: tokens held by the radix cache (a gauge)."""
    EVICTED_TOKENS = "agentwarm:evicted_tokens_total"
    """agentwarm: tokens evicted from the cache."""
    CACHED_BY_SOURCE = "agentwarm:prompt_tokens_cached_by_source_total"
    """agentwarm: cached prompt tokens of finished requests by ``source`` (``device``,
    ``disk``), vLLM's ``vllm:prompt_tokens_cached_by_source_total`` under agentwarm's prefix."""
    DISK_HIT_TOKENS = "agentwarm:disk_hit_tokens_total"
    """agentwarm: prompt tokens loaded from the disk tier (part of the cached tokens)."""
    TIER_BYTES_WRITTEN = "agentwarm:tier_bytes_written_total"
    """agentwarm: bytes the disk tier wrote."""
    TIER_BYTES_READ = "agentwarm:tier_bytes_read_total"
    """agentwarm: bytes the disk tier read."""
    TIER_LOADS_REFUSED = "agentwarm:tier_loads_refused_total"
    """agentwarm: loads from the disk tier refused (measured slower than recomputing)."""
    TIER_STORED_BYTES = "agentwarm:tier_stored_bytes"
    HOST_TIER_STORED_BYTES = "agentwarm:host_tier_stored_bytes"
    HOST_TIER_MAX_BYTES = "agentwarm:host_tier_max_bytes"
    """agentwarm: bytes held by the disk tier (a gauge)."""
    TIER_ENABLED = "agentwarm:tier_enabled"
    """agentwarm: 1 while the disk tier is on, 0 once it turned itself off (a gauge)."""
