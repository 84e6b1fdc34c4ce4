"""VLLMEngine: HTTP client of vLLM's OpenAI-compatible server (DESIGN §4).

Modules: :mod:`~agentwarm.engines.vllm.client` (:class:`VLLMEngine`),
:mod:`~agentwarm.engines.vllm.protocol` (the wire format), :mod:`~agentwarm.engines.vllm.server`
(the served model, the tokenizer), :mod:`~agentwarm.engines.vllm.stream` (one streamed request),
:mod:`~agentwarm.engines.vllm.flights` (aborts, chunked speculation's live gate),
:mod:`~agentwarm.engines.vllm.errors` (failures → :mod:`agentwarm.errors`),
:mod:`~agentwarm.engines.vllm.flags` (the server flags its answers show missing) and
:mod:`~agentwarm.engines.vllm.metrics` (``/metrics``: KV block size and capacity).

Importing this package never imports ``vllm`` (a server in its own venv) nor torch.
"""

from __future__ import annotations

from agentwarm.engines.vllm.client import DEFAULT_PREFILL_CHUNK_TOKENS, VLLMEngine

__all__ = ("DEFAULT_PREFILL_CHUNK_TOKENS", "VLLMEngine")
