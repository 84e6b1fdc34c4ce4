"""Cache and traffic counters of an SGLang client: the server's ``/metrics``, else its own.

``/metrics`` (SGLang ``--enable-metrics``, and ``agentwarm serve``) is Prometheus text, read with
``prometheus_client``'s parser. Names read: ``sglang:prompt_tokens_total``,
``sglang:cached_tokens_total`` (summed over ``cache_source``), ``sglang:num_requests_total``,
``sglang:num_aborted_requests_total``, ``sglang:max_total_num_tokens`` (capacity),
``sglang:num_used_tokens`` and the ``agentwarm:*`` extras of ``agentwarm serve``
(:mod:`agentwarm.server.metrics`), its disk tier's ``agentwarm:tier_*`` and
``agentwarm:disk_hit_tokens_total`` included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agentwarm.engines.base import Completion, EngineStats, PrefillResult, PrefillStatus
from agentwarm.engines.sglang.cache_details import cached_tokens_by_source
from agentwarm.engines.sglang.metric_names import MetricName
from agentwarm.engines.sglang.protocol import MetaInfo, finish_type, token_counts

__all__ = ("ClientCounters", "parse_metrics", "stats_from_metrics")


def parse_metrics(text: str) -> dict[str, float]:
    """Sum each metric's samples over all label sets in Prometheus text exposition format.

    Parsed by ``prometheus_client``'s text parser. Samples keep their series names (a counter's
    ``_total``; a histogram's or summary's ``_bucket``, ``_sum``, ``_count``); ``NaN`` samples
    are skipped. Raises ``ValueError`` when ``text`` is not in the exposition format.
    """
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not math.isnan(sample.value):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def stats_from_metrics(metrics: Mapping[str, float]) -> EngineStats | None:
    """The :class:`EngineStats` in parsed ``/metrics``, or ``None`` when it has no request count
    (metrics off, or not an SGLang server)."""
    if MetricName.REQUESTS not in metrics:
        return None
    prompt = int(metrics.get(MetricName.PROMPT_TOKENS, 0))
    hit = int(metrics.get(MetricName.CACHED_TOKENS, 0))
    capacity = metrics.get(MetricName.MAX_TOTAL_TOKENS)
    return EngineStats(
        cached_tokens=int(
            metrics.get(MetricName.CACHE_TOKENS, metrics.get(MetricName.USED_TOKENS, 0))
        ),
        capacity_tokens=int(capacity) if capacity else None,
        evicted_tokens=int(metrics.get(MetricName.EVICTED_TOKENS, 0)),
        hit_tokens=hit,
        prompt_tokens=prompt,
        computed_tokens=int(metrics.get(MetricName.COMPUTED_TOKENS, prompt - hit)),
        requests=int(metrics[MetricName.REQUESTS]),
        aborted=int(metrics.get(MetricName.ABORTED_REQUESTS, 0)),
        **_tier(metrics),
    )


def _tier(metrics: Mapping[str, float]) -> dict[str, Any]:
    """The disk-tier fields of :class:`EngineStats` from ``agentwarm serve --kv-dir``'s
    ``agentwarm:tier_*`` series; none (the defaults: no tier) when the server has no tier."""
    if MetricName.TIER_ENABLED not in metrics:
        return {}
    return {
        "disk_hit_tokens": int(metrics.get(MetricName.DISK_HIT_TOKENS, 0)),
        "tier_bytes_written": int(metrics.get(MetricName.TIER_BYTES_WRITTEN, 0)),
        "tier_bytes_read": int(metrics.get(MetricName.TIER_BYTES_READ, 0)),
        "tier_loads_refused": int(metrics.get(MetricName.TIER_LOADS_REFUSED, 0)),
        "tier_stored_bytes": int(metrics.get(MetricName.TIER_STORED_BYTES, 0)),
        "tier_enabled": metrics[MetricName.TIER_ENABLED] > 0,
        "host_tier_stored_bytes": int(metrics.get(MetricName.HOST_TIER_STORED_BYTES, 0)),
        "host_tier_max_bytes": int(metrics.get(MetricName.HOST_TIER_MAX_BYTES, 0)),
    }


class ClientCounters:
    """The traffic one client saw, counted as its requests finish (cache size and capacity are
    unknown from the client's side)."""

    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.computed_tokens = 0
        self.aborted = 0

    def abort(self) -> None:
        """A request that ended aborted with no token counts known."""
        self.requests += 1
        self.aborted += 1

    def finished(self, prompt: int, cached: int, computed: int, *, aborted: bool = False) -> None:
        self.requests += 1
        self.prompt_tokens += prompt
        self.hit_tokens += cached
        self.computed_tokens += computed
        self.aborted += aborted

    def prefill(
        self,
        rid: str,
        prompt: int,
        cached: int,
        computed: int,
        status: PrefillStatus,
        by_source: Mapping[str, int] | None = None,
    ) -> PrefillResult:
        """Count a finished prefill and return its result."""
        self.finished(prompt, cached, computed, aborted=status is PrefillStatus.ABORTED)
        return PrefillResult(rid, prompt, cached, computed, status, dict(by_source or {}))

    def prefill_reply(self, rid: str, ids: Sequence[int], meta: MetaInfo) -> PrefillResult:
        """Count the prefill of ``ids`` the server answered with ``meta`` and return its result
        (aborted by the server: only the prompt tokens it processed count as computed)."""
        prompt, cached, computed = token_counts(meta, len(ids))
        if finish_type(meta) == "abort":
            return self.prefill(rid, prompt, cached, computed or 0, PrefillStatus.ABORTED)
        computed = prompt - cached if computed is None else computed
        by_source = cached_tokens_by_source(meta)
        return self.prefill(rid, prompt, cached, computed, PrefillStatus.DONE, by_source)

    def completion(
        self,
        rid: str,
        ids: Sequence[int],
        meta: MetaInfo,
        out_ids: Sequence[int],
        text: str,
        ttft: float,
        e2e: float,
    ) -> Completion:
        """Count a finished generation of prompt ``ids`` and return its completion (token
        counts from ``meta``, the server's, when it has them)."""
        prompt, cached, computed = token_counts(meta, len(ids))
        self.finished(prompt, cached, prompt - cached if computed is None else computed)
        return Completion(
            text=text,
            token_ids=tuple(int(t) for t in out_ids),
            prompt_tokens=prompt,
            cached_tokens=cached,
            ttft_s=ttft,
            finish_reason=finish_type(meta) or "stop",
            rid=rid,
            e2e_s=e2e,
            cached_tokens_by_source=cached_tokens_by_source(meta),
        )

    def stats(self) -> EngineStats:
        return EngineStats(
            cached_tokens=0,
            capacity_tokens=None,
            evicted_tokens=0,
            hit_tokens=self.hit_tokens,
            prompt_tokens=self.prompt_tokens,
            computed_tokens=self.computed_tokens,
            requests=self.requests,
            aborted=self.aborted,
        )
