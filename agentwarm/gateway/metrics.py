"""What the gateway measures, for ``GET /metrics`` (Prometheus text) and
``GET /v1/agentwarm/stats`` (JSON).

==========================================  =============================================
``agentwarm:gateway_requests_total``        chat requests answered, by ``status``: the HTTP
                                            status, or for a stream that broke off 499 (the
                                            client went away) or its error event's code
``agentwarm:gateway_ttft_seconds``          live time to first token (histogram): receipt
                                            to the first content or tool-call byte
``agentwarm:gateway_overhead_seconds``      the gateway's own time per request (histogram):
                                            receipt to the request handed to the upstream
                                            (body parsing, ``on_request``, routing)
``agentwarm:hooks_<key>``                   each numeric value of ``Hooks.stats()`` (gauge)
==========================================  =============================================

The registry is the app's own (:class:`~prometheus_client.CollectorRegistry`), so that two apps
in one process do not share counters. The JSON figures are percentiles of the last
``WINDOW`` samples.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from agentwarm.stats.definitions import percentile

__all__ = ("OVERHEAD", "REQUESTS", "TTFT", "WINDOW", "GatewayMetrics")

log = logging.getLogger(__name__)

REQUESTS = "agentwarm:gateway_requests"
TTFT = "agentwarm:gateway_ttft_seconds"
OVERHEAD = "agentwarm:gateway_overhead_seconds"
HOOKS_PREFIX = "agentwarm:hooks_"
#: Samples kept for the percentiles of ``/v1/agentwarm/stats``.
WINDOW = 10_000
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_OVERHEAD_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.5)
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


class GatewayMetrics:
    """The counters of one gateway app; its event loop is the only writer. ``hook_stats``
    gives the hooks' figures at scrape time."""

    #: ``Content-Type`` of :meth:`render`'s text (Prometheus text format 0.0.4).
    content_type: ClassVar[str] = CONTENT_TYPE_PLAIN_0_0_4

    def __init__(self, hook_stats: Callable[[], Mapping[str, Any]]) -> None:
        self.hook_stats = hook_stats
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            REQUESTS, "Chat requests answered, by status.", ["status"], registry=self.registry
        )
        self.ttft = Histogram(
            TTFT, "Live time to first token.", buckets=_TTFT_BUCKETS, registry=self.registry
        )
        self.overhead = Histogram(
            OVERHEAD,
            "Receipt to the request handed to the upstream.",
            buckets=_OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_HookGauges(self))
        self.count = 0
        self._ttfts: deque[float] = deque(maxlen=WINDOW)
        self._overheads: deque[float] = deque(maxlen=WINDOW)

    def forwarded(self, overhead_s: float) -> None:
        """A request went to the upstream ``overhead_s`` after it was received."""
        self.overhead.observe(overhead_s)
        self._overheads.append(overhead_s)

    def answered(self, status: int, ttft_s: float | None) -> None:
        """A chat request ended with ``status`` (and a first token after ``ttft_s``)."""
        self.count += 1
        self.requests.labels(status=str(status)).inc()
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
            self._ttfts.append(ttft_s)

    def summary(self) -> dict[str, Any]:
        """``requests``, ``ttft_p50_s``, ``ttft_p95_s``, ``overhead_p50_s``, ``overhead_p95_s``
        (``None`` before the first sample)."""
        ttfts, overheads = sorted(self._ttfts), sorted(self._overheads)
        return {
            "requests": self.count,
            "ttft_p50_s": percentile(ttfts, 50),
            "ttft_p95_s": percentile(ttfts, 95),
            "overhead_p50_s": percentile(overheads, 50),
            "overhead_p95_s": percentile(overheads, 95),
        }

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _HookGauges:
    """Collector: a gauge for each numeric top-level value of the hooks' stats."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # the names are known at scrape time only

    def collect(self) -> Iterator[Metric]:
        for key, value in self.metrics.hook_stats().items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                name = HOOKS_PREFIX + _UNSAFE.sub("_", str(key))
                yield GaugeMetricFamily(name, f"Hooks.stats()[{key!r}]", value=float(value))
