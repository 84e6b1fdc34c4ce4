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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentwarm.engines.base import EngineStats

__all__ = ("ServerMetrics",)

_COUNTERS: dict[str, str] = {
    "sglang:num_requests_total": "Number of requests processed.",
    "sglang:prompt_tokens_total": "Number of prefill tokens processed.",
    "sglang:cached_tokens_total": "Number of cached prompt tokens.",
    "sglang:generation_tokens_total": "Number of generation tokens processed.",
    "sglang:num_aborted_requests_total": "Number of requests aborted.",
    "agentwarm:prefill_requests_total": "Number of prefill-only requests processed.",
    "agentwarm:computed_tokens_total": "Number of prompt tokens computed (not cached).",
}


@dataclass
class ServerMetrics:
    """Counters of one server; the server's event loop is their only writer."""

    model_name: str
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTERS, 0))

    def record(
        self,
        *,
        prompt_tokens: int,
        cached_tokens: int,
        computed_tokens: int,
        generation_tokens: int,
        aborted: bool,
        prefill_only: bool,
    ) -> None:
        c = self.counters
        c["sglang:num_requests_total"] += 1
        c["sglang:prompt_tokens_total"] += (
            cached_tokens + computed_tokens if aborted else prompt_tokens
        )
        c["sglang:cached_tokens_total"] += cached_tokens
        c["sglang:generation_tokens_total"] += generation_tokens
        c["sglang:num_aborted_requests_total"] += aborted
        c["agentwarm:prefill_requests_total"] += prefill_only
        c["agentwarm:computed_tokens_total"] += computed_tokens

    def render(self, stats: EngineStats | None, running: int) -> str:
        """The exposition text; ``stats`` is ``None`` when the engine could not report."""
        label = '{model_name="' + _escape(self.model_name) + '"}'
        out: list[str] = []

        def sample(name: str, kind: str, doc: str, value: float) -> None:
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} {kind}")
            out.append(f"{name}{label} {float(value)}")

        for name, doc in _COUNTERS.items():
            sample(name, "counter", doc, self.counters[name])
        sample("sglang:num_running_reqs", "gauge", "The number of running requests.", running)
        if stats is not None:
            if stats.capacity_tokens is not None:
                sample(
                    "sglang:max_total_num_tokens",
                    "gauge",
                    "Maximum total number of tokens in the KV cache pool.",
                    stats.capacity_tokens,
                )
            sample(
                "sglang:num_used_tokens", "gauge", "The number of used tokens.", stats.cached_tokens
            )
            rate = stats.hit_tokens / stats.prompt_tokens if stats.prompt_tokens else 0.0
            sample("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", rate)
            sample(
                "agentwarm:cache_tokens",
                "gauge",
                "Tokens held in the prefix cache.",
                stats.cached_tokens,
            )
            sample(
                "agentwarm:evicted_tokens_total",
                "counter",
                "Tokens evicted from the prefix cache.",
                stats.evicted_tokens,
            )
        return "\n".join(out) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
