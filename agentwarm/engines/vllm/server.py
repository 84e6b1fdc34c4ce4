"""What a :class:`~agentwarm.engines.vllm.VLLMEngine` learns about the server before its first
request: the served model (``/v1/models``: its id, the path it was loaded from, its
``max_model_len``) and the tokenizer that matches it.

The tokenizer is the served model's directory when that path exists on this machine (a server
on this host started with ``--model DIR``; its chat template comes with it), else the server's
``/tokenize`` and ``/detokenize`` (:class:`VLLMRemoteTokenizer`: no chat template, a blocking
round trip per call).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentwarm.engines.sglang.connection import Connection
from agentwarm.engines.sglang.tokenizers import RemoteTokenizer
from agentwarm.engines.tokenizers import Tokenizer, load_tokenizer
from agentwarm.engines.vllm.metrics import CacheConfig, read_cache_config
from agentwarm.errors import EngineError

__all__ = (
    "ServedModel",
    "VLLMRemoteTokenizer",
    "read_server",
    "served_model",
    "tokenizer_for",
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServedModel:
    """The model a vLLM server serves: ``name`` (the ``model`` field of requests), ``root``
    (where the server loaded it from), ``max_model_len`` (its context, tokens)."""

    name: str
    root: str
    max_model_len: int


async def served_model(http: Connection) -> ServedModel:
    """The first model of ``GET /v1/models``; :class:`~agentwarm.errors.EngineError` naming
    the endpoint when the server has none (not a vLLM server)."""
    resp = await http.request("GET", "/v1/models")
    if resp.status_code != 200:
        raise http.status_error(resp, "/v1/models")
    try:
        data = resp.json()["data"][0]
        return ServedModel(
            name=str(data["id"]),
            root=str(data.get("root") or data["id"]),
            max_model_len=int(data["max_model_len"]),
        )
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise EngineError(
            f"{http.url}/v1/models: no served model with a max_model_len in {resp.text[:200]!r}"
            " (is this a vLLM server?)"
        ) from exc


class VLLMRemoteTokenizer(RemoteTokenizer):
    """:class:`~agentwarm.engines.sglang.tokenizers.RemoteTokenizer` on vLLM's endpoints
    (``/detokenize`` answers ``{"prompt": text}``)."""

    def decode(self, ids: Sequence[int]) -> str:
        body = self._call("/detokenize", {"tokens": [int(i) for i in ids]})
        return str(body.get("prompt", ""))


def tokenizer_for(model: ServedModel, base_url: str, *, api_key: str | None) -> Tokenizer:
    """Blocking: the served model's local directory's tokenizer, else the server's."""
    root = Path(model.root)
    if root.is_dir():
        try:
            tokenizer = load_tokenizer(root)
        except Exception as exc:  # any loader failure means "not usable here"
            log.warning("%s: cannot load its tokenizer (%s); using the server's", root, exc)
        else:
            if tokenizer is not None:
                return tokenizer
    remote = VLLMRemoteTokenizer(base_url, api_key=api_key)
    remote.encode("a")  # fails now, with the server's answer, if it cannot tokenize
    log.warning("%s: %s is not a local directory; tokenizing with its /tokenize", remote.url, root)
    return remote


async def read_server(
    http: Connection, *, tokenizer: Tokenizer | None, api_key: str | None
) -> tuple[ServedModel, CacheConfig | None, Tokenizer]:
    """What a client reads before its first request: the served model, the KV cache config
    (``/metrics``) and the tokenizer (``tokenizer``, else :func:`tokenizer_for`, in a thread)."""
    model = await served_model(http)
    cache = await read_cache_config(http)
    if tokenizer is None:
        tokenizer = await asyncio.to_thread(tokenizer_for, model, http.base_url, api_key=api_key)
    return model, cache, tokenizer
