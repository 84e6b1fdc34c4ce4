"""The OpenAI chat-completions wire format of ``agentwarm serve``: the request model and the
replies (a ``chat.completion``, or ``chat.completion.chunk`` stream events), as OpenAI documents
them and SGLang's and vLLM's ``/v1/chat/completions`` answer them.

What is accepted: ``messages`` (roles system/developer/user/assistant/tool; ``content`` a string,
null, or a list of ``{"type": "text"}`` parts, which are joined), ``tools`` (function tools),
``tool_choice`` (``auto``/``none``/``required`` or a named function: read by templates that use it,
not enforced), ``max_tokens`` / ``max_completion_tokens`` (``0``: a warm request, prefilled at
speculative priority and answered with usage only), ``temperature``, ``seed``, ``stream`` with
``stream_options.include_usage``, ``user`` (the session: routing key), ``cache_salt`` /
``extra_key`` (the tenant: the cache namespace, by the rule ``/generate`` uses,
:mod:`agentwarm.engines.namespace`; each at most 256 bytes, no NUL), and the usual fields a client
sends with their default values (``n: 1``, ``top_p: 1``, no ``stop``, no ``logprobs``). A field the
engine cannot honour with another value is refused with a 400 that names it, rather than ignored;
unknown fields are ignored (as vLLM does). Every string must be valid Unicode and the body (and
the JSON in tool-call ``arguments``) nested at most :data:`~agentwarm._jsonfile.MAX_DEPTH` levels
deep, else a 400 naming the path (:func:`~agentwarm.server.http.read_json`,
:func:`~agentwarm.chat.check_tool_arguments`).
:func:`parse_chat_request` is that check, one home for it: ``agentwarm serve``'s chat route and
the gateway's warm path (:mod:`agentwarm.gateway.warm`) answer a body it refuses with the same 400.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from agentwarm.chat import Message
from agentwarm.chat.request import chat_messages, check_tools
from agentwarm.engines.namespace import namespace_key
from agentwarm.engines.sglang.protocol import NamespacePart, Text
from agentwarm.server.http import HTTPError, validate

__all__ = (
    "ChatRequest",
    "StreamOptions",
    "chat_chunk",
    "chat_completion",
    "parse_chat_request",
    "usage",
)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: StrictBool = False


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions`` (see the module docstring)."""

    model_config = ConfigDict(extra="ignore")

    model: Text | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    max_tokens: StrictInt | None = Field(default=None, ge=0)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    seed: StrictInt | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: Text | None = None
    cache_salt: NamespacePart | None = None
    extra_key: NamespacePart | None = None
    # Accepted only with the values that ask for nothing the engine lacks.
    n: StrictInt | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    logprobs: StrictBool | None = None

    @model_validator(mode="after")
    def _supported(self) -> ChatRequest:
        if self.n not in (None, 1):
            raise ValueError("n: only n=1 is supported (send one request per completion)")
        if self.top_p not in (None, 1.0):
            raise ValueError("top_p: only 1.0 is supported by this engine (use temperature)")
        if self.stop:
            raise ValueError("stop: stop sequences are not supported here; leave it unset")
        if self.logprobs:
            raise ValueError("logprobs: not supported by this engine; leave it unset")
        check_tools(self.tools)
        return self

    @property
    def namespace(self) -> str:
        """The cache namespace (tenant) of ``cache_salt`` and ``extra_key``."""
        return namespace_key(self.cache_salt, self.extra_key)

    @property
    def limit(self) -> int | None:
        """The output-token limit asked for (``max_completion_tokens`` wins), None if none."""
        return self.max_tokens if self.max_completion_tokens is None else self.max_completion_tokens

    def chat_messages(self) -> list[Message]:
        """The messages as the chat template takes them: text parts joined into ``content``.
        Raises ValueError naming the message that cannot be (:func:`agentwarm.chat.request.
        chat_messages`, which warm-up plans are checked with too; a tool call's ``arguments``
        whose JSON nests too deeply included)."""
        return chat_messages(self.messages)


def parse_chat_request(body: Any) -> ChatRequest:
    """``body`` (parsed JSON) as a :class:`ChatRequest` whose messages the chat template can
    take (:meth:`ChatRequest.chat_messages`), else an ``HTTPError`` 400 naming the field and
    what to send instead."""
    req = validate(ChatRequest, body)
    try:
        req.chat_messages()
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None
    return req


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """OpenAI's ``usage``, with the prompt tokens found in the prefix cache (those loaded from
    the disk tier included). Not split by tier: vLLM's ``PromptTokenUsageInfo`` has no field
    for it (only ``cached_tokens``; vLLM splits by source on ``/metrics`` alone,
    ``vllm:prompt_tokens_cached_by_source_total{source}``), so the split is on ``/generate``'s
    ``meta_info.cached_tokens_details`` (SGLang's) and on ``/metrics``
    (``agentwarm:prompt_tokens_cached_by_source_total{source}``)."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def chat_completion(
    rid: str,
    model: str,
    *,
    content: str | None,
    tool_calls: list[dict[str, Any]],
    finish_reason: str | None,
    usage_: dict[str, Any],
    warm: bool = False,
) -> dict[str, Any]:
    """A ``chat.completion`` object (a warm request's has no choices)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    choices = [] if warm else [{"index": 0, "message": message, "finish_reason": finish_reason}]
    return {
        "id": f"chatcmpl-{rid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage_,
    }


def chat_chunk(
    rid: str,
    model: str,
    delta: dict[str, Any] | None,
    *,
    finish_reason: Literal["stop", "length", "tool_calls"] | str | None = None,
    usage_: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` event: a delta (``None``: the usage-only last chunk, whose
    ``choices`` is empty)."""
    choices = (
        [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    )
    out: dict[str, Any] = {
        "id": f"chatcmpl-{rid}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if usage_ is not None:
        out["usage"] = usage_
    return out
