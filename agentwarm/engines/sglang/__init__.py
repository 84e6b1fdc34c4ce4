"""SGLangEngine: HTTP client of SGLang's native API (DESIGN §4), also spoken by ``agentwarm serve``.

Modules: :mod:`~agentwarm.engines.sglang.protocol` (the wire format, shared with the server),
:mod:`~agentwarm.engines.sglang.client` (:class:`SGLangEngine`),
:mod:`~agentwarm.engines.sglang.connection` (HTTP, URL checks),
:mod:`~agentwarm.engines.sglang.errors` (failures → :mod:`agentwarm.errors`),
:mod:`~agentwarm.engines.sglang.tokenizers`, :mod:`~agentwarm.engines.sglang.metrics`
(``/metrics`` parsing, client counters), :mod:`~agentwarm.engines.sglang.metric_names` (the
``/metrics`` names, shared with the server) and :mod:`~agentwarm.engines.sglang.cache_details`
(``meta_info.cached_tokens_details``: cached tokens by tier).

Importing this package never imports ``sglang`` (which pulls torch and CUDA kernels).
"""

from __future__ import annotations

from agentwarm.engines.sglang.client import SGLangEngine
from agentwarm.engines.sglang.connection import check_url
from agentwarm.engines.sglang.metrics import parse_metrics
from agentwarm.engines.sglang.protocol import ROUTING_KEY_HEADER
from agentwarm.engines.sglang.tokenizers import RemoteTokenizer, TextTokenizer

__all__ = (
    "ROUTING_KEY_HEADER",
    "RemoteTokenizer",
    "SGLangEngine",
    "TextTokenizer",
    "check_url",
    "parse_metrics",
)
