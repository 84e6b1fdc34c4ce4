"""How :class:`~agentwarm.engines.sglang.SGLangEngine` finds the tokenizer that matches a
server, and the tokenizer of last resort that asks the server (:class:`RemoteTokenizer`).

The tokenizers themselves (the protocol, the byte tokenizer, the Hugging Face adapter and
:func:`load_tokenizer`) live in :mod:`agentwarm.engines.tokenizers`, shared with the embedded
engine; they are re-exported here, where the SGLang client imports them. ``encode`` never adds
special tokens (segment-wise encodings must concatenate). Loading never downloads and never
imports torch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from agentwarm.engines.sglang.protocol import DetokenizeRequest, TokenizeRequest
from agentwarm.engines.tokenizers import (
    BUILTIN_TOKENIZERS,
    ByteTokenizer,
    HFTokenizer,
    load_tokenizer,
)
from agentwarm.engines.tokenizers import Tokenizer as TextTokenizer
from agentwarm.errors import EngineError, EngineUnavailable
from agentwarm.redact import redact_credentials

__all__ = (
    "ByteTokenizer",
    "HFTokenizer",
    "RemoteTokenizer",
    "TextTokenizer",
    "load_tokenizer",
    "tokenizer_from_info",
)

log = logging.getLogger(__name__)


class RemoteTokenizer:
    """Tokenizes through the server's ``/tokenize`` and ``/detokenize`` endpoints.

    A last resort when no local tokenizer matches the server's: every call is a blocking HTTP
    round trip (it blocks the event loop for its duration), so use it only against a server in
    another process, preferably on loopback. It knows no chat template.
    """

    chat_template: str | None = None
    bos_token = ""
    eos_token = ""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        trust_env: bool = False,
    ) -> None:
        self._base_url = url.rstrip("/")
        self.url = redact_credentials(self._base_url)  # for messages
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=self._base_url, headers=headers, timeout=timeout, trust_env=trust_env
        )

    def encode(self, text: str) -> list[int]:
        request = TokenizeRequest.model_construct(prompt=text, add_special_tokens=False)
        body = self._call("/tokenize", request.model_dump())
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise EngineError(f"{self.url}/tokenize: reply has no token list: {body!r:.200}")
        return [int(t) for t in tokens]

    def decode(self, ids: Sequence[int]) -> str:
        request = DetokenizeRequest.model_construct(tokens=[int(i) for i in ids])
        body = self._call("/detokenize", request.model_dump())
        return str(body.get("text", ""))

    def close(self) -> None:
        self._client.close()

    def _call(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = self._client.post(path, json=payload)
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"{self.url}{path}: {redact_credentials(str(exc))}") from exc
        if resp.status_code != 200:
            raise EngineError(f"{self.url}{path}: HTTP {resp.status_code}: {resp.text[:200]}")
        data = resp.json()
        if not isinstance(data, dict):
            raise EngineError(f"{self.url}{path}: reply is not a JSON object")
        return data

    def __repr__(self) -> str:
        return f"RemoteTokenizer({self.url!r})"


def tokenizer_from_info(
    info: Mapping[str, Any], base_url: str, *, api_key: str | None, trust_env: bool
) -> tuple[TextTokenizer | None, str]:
    """Blocking: the tokenizer a server's ``/model_info`` points to, and a note of what was
    tried when there is none.

    In order: the built-in tokenizer (``"byte"``, ``"qwen2.5"``) the server (``agentwarm
    serve``) says it uses; the server's ``tokenizer_path`` or ``model_path`` when it loads
    locally; the server's ``/tokenize`` endpoint (:class:`RemoteTokenizer`).
    """
    tried: list[str] = []
    ext = info.get("agentwarm")
    if isinstance(ext, Mapping) and ext.get("tokenizer") in BUILTIN_TOKENIZERS:
        return load_tokenizer(str(ext["tokenizer"])), ""
    for key in ("tokenizer_path", "model_path"):
        path = info.get(key)
        if not path:
            continue
        try:
            return load_tokenizer(str(path)), ""
        except Exception as exc:  # any loader failure means "not usable here"
            tried.append(f"{key}={path!r} ({type(exc).__name__})")
    remote = RemoteTokenizer(base_url, api_key=api_key, trust_env=trust_env)
    try:
        remote.encode("a")
    except EngineError as exc:
        remote.close()
        tried.append(f"{remote.url}/tokenize ({exc})")
        return None, "tried " + "; ".join(tried)
    log.warning("%s: no local tokenizer matches the server; using its /tokenize", remote.url)
    return remote, ""
