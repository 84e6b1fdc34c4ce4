"""Prometheus text for ``GET /metrics`` of ``agentwarm serve``, under SGLang's metric names.

Traffic counters are counted by the server as requests finish (every finished request, aborted
ones included, as SGLang's ``TokenizerMetricsCollector`` does); cache gauges come from the
engine's :class:`~agentwarm.engines.base.EngineStats` at scrape time.

Aborted requests (``POST /abort_request``, or a client that disconnects, streaming or not) count
in ``num_aborted_requests_total`` and ``num_requests_total``, and add to the token counters only
the prompt tokens processed before the abort (cached + computed): a request aborted while
queued adds none, as in SGLang, where only requests that reached the scheduler report prompt
tokens. So ``cached_tokens_total / prompt_tokens_total`` (and ``cache_hit_rate``) stay the hit
rate of the work done however many requests are aborted. Names:

=====================================  ====================================================
``sglang:num_requests_total``          finished requests (prefill-only and generate)
``sglang:prompt_tokens_total``         their prompt tokens (of aborted ones: those processed)
``sglang:cached_tokens_total``         prompt tokens served from the prefix cache
``sglang:generation_tokens_total``     decoded tokens
``sglang:num_aborted_requests_total``  requests that ended aborted
``sglang:num_running_reqs``            requests in flight now
``sglang:max_total_num_tokens``        cache capacity in tokens (absent when unbounded)
``sglang:num_used_tokens``             tokens held in the cache now
``sglang:cache_hit_rate``              engine hit tokens / prompt tokens since start
``agentwarm:prefill_requests_total``   prefill-only requests (``max_new_tokens: 0``)
``agentwarm:computed_tokens_total``    prompt tokens the server had to compute
``agentwarm:cache_tokens``             same as ``sglang:num_used_tokens``
``agentwarm:evicted_tokens_total``     tokens the engine evicted
=====================================  ====================================================

With a disk tier (``agentwarm serve --kv-dir DIR``; absent otherwise), counted by the server
as requests finish, vLLM's split of the cached tokens under agentwarm's prefix (vLLM's
``vllm:prompt_tokens_cached_by_source_total{source}``; its ``device`` and ``disk`` sources):

``agentwarm:prompt_tokens_cached_by_source_total{source="device"}`` (from the radix cache),
``{source="host"}`` (loaded from the host-RAM tier, on CUDA) and ``{source="disk"}`` (loaded from
the disk tier), absent until a request reported a split;

and from the engine's :class:`~agentwarm.engines.base.EngineStats`:

=========================================  ================================================
``agentwarm:disk_hit_tokens_total``        prompt tokens loaded from a lower tier (host
                                           or disk; part of the engine's hit tokens)
``agentwarm:tier_bytes_written_total``     bytes written to the tier
``agentwarm:tier_bytes_read_total``        bytes read from the tier
``agentwarm:tier_loads_refused_total``     loads refused: measured slower than recomputing
``agentwarm:tier_stored_bytes``            bytes stored in the tier now
``agentwarm:tier_enabled``                 1 while the tier is on, 0 once it turned itself
                                           off (disk full, unwritable)
``agentwarm:host_tier_stored_bytes``       bytes in the host-RAM tier now (CUDA only)
``agentwarm:host_tier_max_bytes``          the host-RAM tier's budget (CUDA only)
=========================================  ================================================

The text is written by ``prometheus_client`` (:func:`~prometheus_client.generate_latest`, the
0.0.4 text format its own exporters answer by default) from the families :class:`ServerMetrics`
yields as a custom collector, so that the series are exactly SGLang's names above (a
``prometheus_client.Counter`` would add a ``_created`` series to each counter).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from agentwarm.engines.base import EngineStats
from agentwarm.engines.sglang.metric_names import MetricName

__all__ = ("ServerMetrics",)

_LABELS = ("model_name",)

_COUNTERS: dict[str, str] = {
    MetricName.REQUESTS: "Number of requests processed.",
    MetricName.PROMPT_TOKENS: "Number of prefill tokens processed.",
    MetricName.CACHED_TOKENS: "Number of cached prompt tokens.",
    MetricName.GENERATION_TOKENS: "Number of generation tokens processed.",
    MetricName.ABORTED_REQUESTS: "Number of requests aborted.",
    MetricName.PREFILL_REQUESTS: "Number of prefill-only requests processed.",
    MetricName.COMPUTED_TOKENS: "Number of prompt tokens computed (not cached).",
}


class ServerMetrics:
    """Counters of one server and the collector of its ``/metrics``.

    The server's event loop is the only writer of ``counters`` and the only caller of
    :meth:`render`; ``registry`` holds this collector alone.
    """

    #: ``Content-Type`` of :meth:`render`'s text (Prometheus text format 0.0.4).
    content_type: ClassVar[str] = CONTENT_TYPE_PLAIN_0_0_4

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.counters: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        #: Cached tokens by source, of the requests whose engine split them (vLLM's counter).
        self.cached_by_source: dict[str, int] = {}
        self._scrape: tuple[EngineStats | None, int] = (None, 0)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def record(
        self,
        *,
        prompt_tokens: int,
        cached_tokens: int,
        computed_tokens: int,
        generation_tokens: int,
        aborted: bool,
        prefill_only: bool,
        cached_by_source: Mapping[str, int] | None = None,
    ) -> None:
        for source, tokens in (cached_by_source or {}).items():
            self.cached_by_source[source] = self.cached_by_source.get(source, 0) + tokens
        c = self.counters
        c[MetricName.REQUESTS] += 1
        c[MetricName.PROMPT_TOKENS] += cached_tokens + computed_tokens if aborted else prompt_tokens
        c[MetricName.CACHED_TOKENS] += cached_tokens
        c[MetricName.GENERATION_TOKENS] += generation_tokens
        c[MetricName.ABORTED_REQUESTS] += aborted
        c[MetricName.PREFILL_REQUESTS] += prefill_only
        c[MetricName.COMPUTED_TOKENS] += computed_tokens

    def render(self, stats: EngineStats | None, running: int) -> bytes:
        """The exposition (:attr:`content_type`); ``stats`` is ``None`` when the engine could
        not report, ``running`` the requests in flight."""
        self._scrape = (stats, running)
        try:
            return generate_latest(self.registry)
        finally:
            self._scrape = (None, 0)

    def collect(self) -> Iterator[Metric]:
        """The metric families of the scrape :meth:`render` is writing."""
        stats, running = self._scrape
        for name, doc in _COUNTERS.items():
            yield self._family(CounterMetricFamily, name, doc, self.counters[name])
        if self.cached_by_source:
            family = CounterMetricFamily(
                MetricName.CACHED_BY_SOURCE,
                "Number of cached prompt tokens by source.",
                labels=(*_LABELS, "source"),
            )
            for source, tokens in sorted(self.cached_by_source.items()):
                family.add_metric([self.model_name, source], float(tokens))
            yield family
        yield self._family(
            GaugeMetricFamily,
            MetricName.RUNNING_REQUESTS,
            "The number of running requests.",
            running,
        )
        if stats is None:
            return
        if stats.capacity_tokens is not None:
            yield self._family(
                GaugeMetricFamily,
                MetricName.MAX_TOTAL_TOKENS,
                "Maximum total number of tokens in the KV cache pool.",
                stats.capacity_tokens,
            )
        yield self._family(
            GaugeMetricFamily,
            MetricName.USED_TOKENS,
            "The number of used tokens.",
            stats.cached_tokens,
        )
        rate = stats.hit_tokens / stats.prompt_tokens if stats.prompt_tokens else 0.0
        yield self._family(
            GaugeMetricFamily, MetricName.CACHE_HIT_RATE, "The prefix cache hit rate.", rate
        )
        yield self._family(
            GaugeMetricFamily,
            MetricName.CACHE_TOKENS,
            "Tokens held in the prefix cache.",
            stats.cached_tokens,
        )
        yield self._family(
            CounterMetricFamily,
            MetricName.EVICTED_TOKENS,
            "Tokens evicted from the prefix cache.",
            stats.evicted_tokens,
        )
        if stats.tier_enabled is not None:
            yield from self._tier(stats)

    def _tier(self, stats: EngineStats) -> Iterator[Metric]:
        """The disk tier's families (an engine that has one)."""
        for name, doc, value in (
            (MetricName.DISK_HIT_TOKENS, "Prompt tokens loaded from the disk tier.",
             stats.disk_hit_tokens),
            (MetricName.TIER_BYTES_WRITTEN, "Bytes written to the disk tier.",
             stats.tier_bytes_written),
            (MetricName.TIER_BYTES_READ, "Bytes read from the disk tier.", stats.tier_bytes_read),
            (MetricName.TIER_LOADS_REFUSED, "Disk-tier loads refused as slower than recomputing.",
             stats.tier_loads_refused),
        ):  # fmt: skip
            yield self._family(CounterMetricFamily, name, doc, value)
        yield self._family(
            GaugeMetricFamily,
            MetricName.TIER_STORED_BYTES,
            "Bytes stored in the disk tier.",
            stats.tier_stored_bytes,
        )
        yield self._family(
            GaugeMetricFamily,
            MetricName.TIER_ENABLED,
            "1 while the disk tier is on, 0 once it turned itself off.",
            int(bool(stats.tier_enabled)),
        )
        if stats.host_tier_max_bytes:
            for name, doc, value in (
                (MetricName.HOST_TIER_STORED_BYTES, "Bytes stored in the host-RAM tier.",
                 stats.host_tier_stored_bytes),
                (MetricName.HOST_TIER_MAX_BYTES, "The host-RAM tier's budget in bytes.",
                 stats.host_tier_max_bytes),
            ):  # fmt: skip
                yield self._family(GaugeMetricFamily, name, doc, value)

    def _family(
        self,
        kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
        name: str,
        doc: str,
        value: float,
    ) -> Metric:
        family = kind(name, doc, labels=_LABELS)
        family.add_metric([self.model_name], float(value))
        return family
