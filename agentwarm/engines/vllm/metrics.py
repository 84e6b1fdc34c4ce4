"""What :class:`~agentwarm.engines.vllm.VLLMEngine` reads from vLLM's ``/metrics``.

* ``vllm:cache_config_info`` (a gauge whose labels are the cache config): ``block_size``, the
  granularity of prefix caching (``cached_tokens`` come in whole blocks: 128 tokens on CPU, 16 on
  GPU), ``kv_cache_size_tokens`` (else ``num_gpu_blocks`` blocks, on CPU too), the KV
  capacity, and ``kv_offloading_size`` / ``kv_offloading_backend`` (``--kv-offloading-size
  GiB``: a CPU tier below the device cache; ``"None"`` without one).
* ``vllm:kv_cache_usage_perc``: the fraction of KV blocks in use.
* The server's traffic (:func:`parse_server_stats`): ``vllm:prompt_tokens_total``,
  ``vllm:prompt_tokens_cached_total`` (cached = local prefix cache + KV connector, the
  ``usage.prompt_tokens_details.cached_tokens`` of every request added up),
  ``vllm:prompt_tokens_cached_by_source_total{source}`` (the tier that supplied them:
  ``device``; below it ``host``, ``disk``, ``p2p``, ``external_unspecified`` — a connector
  that does not say), ``vllm:external_prefix_cache_queries_total`` (tokens looked up in a KV
  connector: > 0 once a connector is configured and asked) and
  ``vllm:request_success_total{finished_reason}``.

vLLM's traffic counters are server-wide (every client's); :meth:`VLLMEngine.stats` reports this
client's traffic (:class:`~agentwarm.engines.sglang.metrics.ClientCounters`) with the capacity,
usage and tier read here, :meth:`VLLMEngine.server_stats` the server's.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from agentwarm.engines.sglang.connection import Connection
from agentwarm.engines.types import EngineStats

__all__ = (
    "CACHE_CONFIG",
    "DEVICE_SOURCE",
    "KV_USAGE",
    "CacheConfig",
    "parse_cache_config",
    "parse_server_stats",
    "read_cache_config",
    "read_metrics",
    "read_server_metrics",
    "with_server",
)

CACHE_CONFIG = "vllm:cache_config_info"
KV_USAGE = "vllm:kv_cache_usage_perc"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
CACHED_TOKENS = "vllm:prompt_tokens_cached_total"
CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"
EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries_total"
REQUESTS = "vllm:request_success_total"
#: The ``source`` of ``vllm:prompt_tokens_cached_by_source_total`` that is the device cache
#: (vLLM's ``CacheHitSource.DEVICE``); every other source is a tier below it.
DEVICE_SOURCE = "device"


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The KV cache of a vLLM server: ``block_size`` tokens a block, ``capacity_tokens`` in all
    (``None`` when not reported), ``usage`` the fraction in use, ``offload_gib`` the GiB of its
    ``--kv-offloading-size`` CPU tier (``None``: none) and ``offload_backend`` its backend."""

    block_size: int
    capacity_tokens: int | None
    usage: float
    offload_gib: float | None = None
    offload_backend: str | None = None

    @property
    def used_tokens(self) -> int:
        capacity = self.capacity_tokens
        return 0 if capacity is None else round(self.usage * capacity)


def parse_cache_config(text: str) -> CacheConfig | None:
    """The :class:`CacheConfig` in Prometheus text, ``None`` when it has no
    ``vllm:cache_config_info`` with a ``block_size`` (not a vLLM server). Raises ``ValueError``
    when ``text`` is not in the exposition format."""
    labels: dict[str, str] | None = None
    usage = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == CACHE_CONFIG and labels is None:
                labels = dict(sample.labels)
            elif sample.name == KV_USAGE and not math.isnan(sample.value):
                usage = max(usage, float(sample.value))
    if labels is None or not str(labels.get("block_size", "")).isdigit():
        return None
    block = int(labels["block_size"])
    tokens = str(labels.get("kv_cache_size_tokens", ""))
    blocks = str(labels.get("num_gpu_blocks", ""))
    capacity = int(tokens) if tokens.isdigit() else int(blocks) * block if blocks.isdigit() else 0
    offload = _positive(labels.get("kv_offloading_size"))
    return CacheConfig(
        block_size=block,
        capacity_tokens=capacity or None,
        usage=usage,
        offload_gib=offload,
        offload_backend=labels.get("kv_offloading_backend") if offload is not None else None,
    )


def parse_server_stats(text: str) -> EngineStats | None:
    """The server-wide :class:`~agentwarm.engines.types.EngineStats` in Prometheus text, ``None``
    without ``vllm:prompt_tokens_total`` (not a vLLM server, or one started with
    ``--disable-log-stats``). ``hit_tokens`` are every cached prompt token, the lower tiers'
    included; ``disk_hit_tokens`` those a tier below the device cache supplied (every source
    but ``device``); ``tier_enabled`` is ``True`` when the server has such a tier (an
    offloading size, a connector that was asked, or hits from one), else ``None``. Raises
    ``ValueError`` when ``text`` is not in the exposition format."""
    totals: dict[str, float] = defaultdict(float)
    by_source: dict[str, float] = defaultdict(float)
    aborted = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if math.isnan(sample.value):
                continue
            totals[sample.name] += sample.value
            if sample.name == CACHED_BY_SOURCE:
                by_source[sample.labels.get("source", "")] += sample.value
            elif sample.name == REQUESTS and sample.labels.get("finished_reason") == "abort":
                aborted += sample.value
    if PROMPT_TOKENS not in totals:
        return None
    cache = parse_cache_config(text)
    prompt, hits = int(totals[PROMPT_TOKENS]), int(totals.get(CACHED_TOKENS, 0))
    lower = int(sum(n for source, n in by_source.items() if source != DEVICE_SOURCE))
    tiered = (cache is not None and cache.offload_gib is not None) or lower > 0
    tiered = tiered or totals.get(EXTERNAL_QUERIES, 0) > 0
    return EngineStats(
        cached_tokens=cache.used_tokens if cache else 0,
        capacity_tokens=cache.capacity_tokens if cache else None,
        evicted_tokens=0,  # vLLM exports no eviction count
        hit_tokens=hits,
        prompt_tokens=prompt,
        computed_tokens=max(prompt - hits, 0),
        requests=int(totals.get(REQUESTS, 0)),
        aborted=int(aborted),
        disk_hit_tokens=lower,
        tier_enabled=True if tiered else None,
    )


def with_server(
    mine: EngineStats, cache: CacheConfig | None, server: EngineStats | None
) -> EngineStats:
    """A client's own traffic ``mine`` with the server's KV capacity and tokens in use
    (``cache``) and whether it has a tier below the device cache (``server``'s
    ``tier_enabled``). vLLM says which tier supplied a request's cached tokens only
    server-wide, so ``disk_hit_tokens`` stays 0 here (``hit_tokens`` counts them all)."""
    if cache is None:
        return mine
    return dataclasses.replace(
        mine,
        cached_tokens=cache.used_tokens,
        capacity_tokens=cache.capacity_tokens,
        tier_enabled=server.tier_enabled if server else None,
    )


async def read_metrics(http: Connection) -> str | None:
    """The server's ``/metrics`` text; ``None`` when it answers anything but 200."""
    resp = await http.request("GET", "/metrics")
    return resp.text if resp.status_code == 200 else None


async def read_cache_config(http: Connection) -> CacheConfig | None:
    """The KV cache config from the server's ``/metrics``; ``None`` when it reports none."""
    text = await read_metrics(http)
    if text is None:
        return None
    try:
        return parse_cache_config(text)
    except ValueError:
        return None


async def read_server_metrics(http: Connection) -> tuple[CacheConfig | None, EngineStats | None]:
    """The cache config and the server's counters from one read of ``/metrics`` (each
    ``None`` when it reports none)."""
    text = await read_metrics(http)
    if text is None:
        return None, None
    try:
        return parse_cache_config(text), parse_server_stats(text)
    except ValueError:
        return None, None


def _positive(value: str | None) -> float | None:
    """``value`` as a positive finite number, else ``None`` (vLLM writes ``"None"``)."""
    try:
        number = float(value or "")
    except ValueError:
        return None
    return number if number > 0 and math.isfinite(number) else None
