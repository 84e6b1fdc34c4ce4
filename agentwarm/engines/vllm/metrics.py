"""What :class:`~agentwarm.engines.vllm.VLLMEngine` reads from vLLM's ``/metrics``.

* ``vllm:cache_config_info`` (a gauge whose labels are the cache config): ``block_size``, the
  granularity of prefix caching (``cached_tokens`` come in whole blocks: 128 tokens on CPU, 16 on
  GPU), and ``kv_cache_size_tokens`` (else ``num_gpu_blocks`` blocks, on CPU too), the KV
  capacity.
* ``vllm:kv_cache_usage_perc``: the fraction of KV blocks in use.

vLLM's traffic counters are server-wide (every client's); :meth:`VLLMEngine.stats` reports this
client's traffic (:class:`~agentwarm.engines.sglang.metrics.ClientCounters`) with the capacity
and usage read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from agentwarm.engines.sglang.connection import Connection

__all__ = ("CACHE_CONFIG", "KV_USAGE", "CacheConfig", "parse_cache_config", "read_cache_config")

CACHE_CONFIG = "vllm:cache_config_info"
KV_USAGE = "vllm:kv_cache_usage_perc"


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The KV cache of a vLLM server: ``block_size`` tokens a block, ``capacity_tokens`` in all
    (``None`` when not reported), ``usage`` the fraction in use."""

    block_size: int
    capacity_tokens: int | None
    usage: float

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
    return CacheConfig(block_size=block, capacity_tokens=capacity or None, usage=usage)


async def read_cache_config(http: Connection) -> CacheConfig | None:
    """The KV cache config from the server's ``/metrics``; ``None`` when it reports none."""
    resp = await http.request("GET", "/metrics")
    if resp.status_code != 200:
        return None
    try:
        return parse_cache_config(resp.text)
    except ValueError:
        return None
