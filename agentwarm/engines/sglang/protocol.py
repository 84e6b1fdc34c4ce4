"""SGLang's native HTTP API, the subset agentwarm speaks: one definition for client and server.

:class:`~agentwarm.engines.sglang.SGLangEngine` builds its requests and reads the replies with
these definitions; ``agentwarm serve`` (:mod:`agentwarm.server.app`) validates requests and
builds replies with the same ones. Field names and defaults follow SGLang 0.5.x
(``GenerateReqInput``, ``SamplingParams``, ``AbortReq``;
``python/sglang/srt/entrypoints/http_server.py``):

* ``POST /generate`` with ``input_ids`` (or ``text``), ``sampling_params`` (``max_new_tokens: 0``
  is a prefill-only pass that inserts the prompt into the radix cache), ``rid``, ``priority`` and
  the namespace in both ``cache_salt`` (native field since SGLang PR #30827) and ``extra_key``
  (the field 0.5.x releases read, and the only one sglang-router 0.3 forwards). The reply's
  ``meta_info`` has ``prompt_tokens``, ``cached_tokens``, ``completion_tokens``,
  ``finish_reason`` (``{"type": "abort", ...}`` when aborted) and ``e2e_latency``.
* ``stream: true`` answers Server-Sent Events ``data: {json}`` ending in ``data: [DONE]``. By
  default each event repeats the whole output so far (``--stream-output`` or
  ``--incremental-streaming-output`` send deltas); :func:`output_delta` reads both.
* The routing key (sglang-router's ``manual`` and ``consistent_hashing`` policies) is the
  :data:`ROUTING_KEY_HEADER` header.
* ``POST /abort_request {"rid"}``, ``/tokenize``, ``/detokenize``; ``GET /health``,
  ``/model_info`` (older: ``/get_model_info``), ``/server_info``, ``/metrics``
  (``--enable-metrics``); ``POST /flush_cache``.

Requests are pydantic models: they ignore unknown fields, as SGLang does, because sglang-router
re-sends every request with its own defaults (``model``, ``log_metrics``,
``return_hidden_states``, ...); the fields they know are type-checked strictly (a string where an
int belongs is a 400, not a guess). Replies are typed dicts (:class:`GenerateReply`), read
leniently by the functions below whatever fields an SGLang version adds or leaves out.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Annotated, Any, Required, TypedDict, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    field_validator,
)

from agentwarm._jsonfile import find_flaw
from agentwarm.engines.namespace import check_field, check_part, namespace_parts
from agentwarm.engines.sglang.cache_details import CachedTokensDetails
from agentwarm.errors import InvalidRequest

__all__ = (
    "MIN_TEMPERATURE",
    "ROUTING_KEY_HEADER",
    "SALT_FIELDS",
    "AbortRequest",
    "DetokenizeRequest",
    "FinishReason",
    "GenerateReply",
    "GenerateRequest",
    "MetaInfo",
    "NamespacePart",
    "SamplingParams",
    "Text",
    "TokenizeRequest",
    "finish_message",
    "finish_type",
    "generate_body",
    "meta_info",
    "output_delta",
    "server_ttft",
    "sse_payloads",
    "token_counts",
)

ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
"""Header that sglang-router's ``manual`` and ``consistent_hashing`` policies route on."""

SALT_FIELDS = ("cache_salt", "extra_key")
"""The request fields that carry the namespace (see :mod:`agentwarm.engines.namespace`)."""

#: Smallest non-zero ``temperature`` (SGLang's sampling epsilon); below it logits overflow.
MIN_TEMPERATURE = 1e-6


def _valid_unicode(value: str) -> str:
    """JSON may carry lone surrogates (``"\\ud800"``), which no UTF-8 encoder accepts."""
    flaw = find_flaw(value, max_depth=None)
    if flaw is not None:
        raise ValueError(flaw.problem())
    return value


Text = Annotated[str, AfterValidator(_valid_unicode)]
"""A string that encodes as UTF-8 (no lone surrogates)."""


def _namespace_part(value: str, info: ValidationInfo) -> str:
    return check_part(str(info.field_name), value)


NamespacePart = Annotated[Text, AfterValidator(_namespace_part)]
"""A ``cache_salt`` or ``extra_key`` (:func:`~agentwarm.engines.namespace.check_part`)."""

TokenId = Annotated[StrictInt, Field(ge=0)]


def _usable_temperature(value: float) -> float:
    if 0.0 < value < MIN_TEMPERATURE:
        raise ValueError(
            f"{value!r} is too small to sample with: use 0 for greedy decoding, or at least "
            f"{MIN_TEMPERATURE}"
        )
    return value


# ---------------------------------------------------------------------- requests


class SamplingParams(BaseModel):
    """``sampling_params``: ``max_new_tokens`` (0 = prefill only; default 128 as in SGLang, capped
    by the server's limit), ``temperature`` (default 1.0 as in SGLang), ``sampling_seed``.

    Other SGLang sampling options (``top_p``, ``top_k``, ``stop``, ``ignore_eos``, ...) are
    accepted and ignored: the embedded engine samples with temperature only.
    """

    model_config = ConfigDict(extra="ignore")

    max_new_tokens: StrictInt | None = Field(default=None, ge=0)
    temperature: Annotated[
        StrictFloat, Field(ge=0.0, allow_inf_nan=False), AfterValidator(_usable_temperature)
    ] = 1.0
    sampling_seed: StrictInt | None = Field(default=None, ge=-(2**63), le=2**64 - 1)
    n: StrictInt = Field(default=1, ge=1, le=1)


class GenerateRequest(BaseModel):
    """``POST /generate``. Give exactly one of ``input_ids`` and ``text``; one prompt per request.

    The namespace (cache isolation) is ``cache_salt`` and/or ``extra_key`` (equal values count
    once; see :mod:`agentwarm.engines.namespace`). The session (routing key, ignored by a single
    engine) is the :data:`ROUTING_KEY_HEADER` header, else ``routing_key``, else ``session_id``.
    These identifiers and ``rid`` are each at most ``MAX_FIELD_BYTES`` (256) bytes of UTF-8
    (:func:`~agentwarm.engines.namespace.check_field`): engines keep them outside the cache's
    token budget.
    """

    model_config = ConfigDict(extra="ignore")

    text: Text | list[Text] | None = None
    input_ids: list[StrictInt] | list[list[StrictInt]] | None = None
    sampling_params: SamplingParams | None = None
    rid: Text | list[Text] | None = None
    stream: StrictBool = False
    priority: StrictInt | None = None
    cache_salt: NamespacePart | None = None
    extra_key: NamespacePart | None = None
    routing_key: Text | None = None
    session_id: Text | None = None
    log_metrics: StrictBool = True

    @field_validator("rid", "routing_key", "session_id")
    @classmethod
    def _identifier(
        cls, value: str | list[str] | None, info: ValidationInfo
    ) -> str | list[str] | None:
        for item in [value] if isinstance(value, str) else value or []:
            check_field(str(info.field_name), item)
        return value


class AbortRequest(BaseModel):
    """``POST /abort_request``: ``rid`` of a queued or running request, or ``abort_all``."""

    model_config = ConfigDict(extra="ignore")

    rid: Text = ""
    abort_all: StrictBool = False

    @field_validator("rid")
    @classmethod
    def _identifier(cls, value: str) -> str:
        return check_field("rid", value)


class TokenizeRequest(BaseModel):
    """``POST /tokenize`` (SGLang's OpenAI-style tokenizer endpoint)."""

    model_config = ConfigDict(extra="ignore")

    prompt: Text | list[Text]
    add_special_tokens: StrictBool = True


class DetokenizeRequest(BaseModel):
    """``POST /detokenize``."""

    model_config = ConfigDict(extra="ignore")

    tokens: list[TokenId] | list[list[TokenId]]


def generate_body(
    ids: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int | None,
    rid: str,
    stream: bool,
    priority: int | None,
    namespace: str,
    salt_fields: Sequence[str] = SALT_FIELDS,
) -> dict[str, Any]:
    """The JSON body of a client's ``POST /generate``: only the fields it sets (a prefill-only
    request sends no ``temperature``; ``priority=None`` sends none; the namespace goes in each of
    ``salt_fields`` when not empty, a ``cache_salt`` + ``extra_key`` pair's as its two parts
    when both fields are sent). Raises :class:`~agentwarm.errors.InvalidRequest` for an
    empty prompt or a negative ``max_new_tokens``; the server judges the rest."""
    if len(ids) == 0:
        raise InvalidRequest("empty prompt: ids must hold at least one token id")
    if max_new_tokens < 0:
        raise InvalidRequest(f"max_tokens must be >= 0, got {max_new_tokens}")
    sampling = SamplingParams.model_construct(max_new_tokens=int(max_new_tokens))
    if max_new_tokens > 0:
        sampling.temperature = float(temperature)
        if seed is not None:
            sampling.sampling_seed = int(seed)
    request = GenerateRequest.model_construct(
        input_ids=[int(i) for i in ids], sampling_params=sampling, rid=rid, stream=stream
    )
    if priority is not None:
        request.priority = int(priority)
    if namespace:
        salt, key = namespace_parts(namespace)
        pair = key is not None and set(salt_fields) == set(SALT_FIELDS)
        for field in salt_fields:  # a pair goes as its two parts (the server joins them again)
            setattr(request, field, (salt if field == "cache_salt" else key) if pair else namespace)
    return request.model_dump(exclude_unset=True)


# ---------------------------------------------------------------------- replies
# Replies are typed dicts, not models: a stream sends one per token, and both sides handle them
# on that path (a model costs tens of microseconds per event to build or validate).


class FinishReason(TypedDict, total=False):
    """``meta_info.finish_reason``: ``{"type": "length", "length": n}``, ``{"type": "stop",
    "matched": id}`` or ``{"type": "abort", "message": ...}`` (SGLang adds fields of its own)."""

    type: Required[str]
    length: int
    matched: Any
    message: str


class MetaInfo(TypedDict, total=False):
    """``meta_info`` of a ``/generate`` reply or stream event (``finish_reason`` is ``None``
    until the last event). ``computed_tokens`` and ``ttft`` are ``agentwarm serve``'s; SGLang's
    ``request_received_ts``/``prefill_finished_ts`` come with ``--enable-metrics``."""

    id: str
    finish_reason: FinishReason | str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cached_tokens_details: CachedTokensDetails | None
    computed_tokens: int
    e2e_latency: float
    ttft: float
    request_received_ts: float
    prefill_finished_ts: float


class GenerateReply(TypedDict):
    """A ``/generate`` reply, or one event of its stream."""

    text: str
    output_ids: list[int]
    meta_info: MetaInfo


def meta_info(reply: Mapping[str, Any]) -> MetaInfo:
    """The ``meta_info`` of a reply as received (empty when it has none)."""
    meta = reply.get("meta_info")
    return cast(MetaInfo, dict(meta)) if isinstance(meta, Mapping) else MetaInfo()


def finish_type(meta: MetaInfo) -> str | None:
    """``"stop"``, ``"length"``, ``"abort"``, ..., or ``None`` while unfinished."""
    reason = meta.get("finish_reason")
    if isinstance(reason, Mapping):
        kind = reason.get("type")
        return str(kind) if kind is not None else None
    return str(reason) if reason is not None else None


def finish_message(meta: MetaInfo) -> str:
    reason = meta.get("finish_reason")
    if isinstance(reason, Mapping):
        return str(reason.get("message") or reason)
    return str(reason)


def server_ttft(meta: MetaInfo) -> float | None:
    """Time to first token as the server measured it (``--enable-metrics``), if it did."""
    start, first = meta.get("request_received_ts"), meta.get("prefill_finished_ts")
    if isinstance(start, int | float) and isinstance(first, int | float) and first >= start:
        return float(first - start)
    return None


def token_counts(meta: MetaInfo, prompt_ids: int) -> tuple[int, int, int | None]:
    """``(prompt, cached, computed)`` tokens of a reply to a prompt of ``prompt_ids`` ids
    (``computed`` is ``None`` when the server does not say; SGLang does not)."""
    prompt = int(meta.get("prompt_tokens", prompt_ids))
    computed = meta.get("computed_tokens")
    return prompt, int(meta.get("cached_tokens", 0)), None if computed is None else int(computed)


#: Where a Server-Sent Events line ends (the SSE spec: CRLF, LF or CR). Not ``str.splitlines``
#: (nor httpx's ``aiter_lines``), which also splits at U+0085, U+2028, U+2029 and the like: a
#: JSON string carries those unescaped, so a token that decodes to one would cut its event in two.
_SSE_EOL = re.compile(r"\r\n|\r|\n")


async def sse_payloads(chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data:`` payloads of a Server-Sent Events stream read as text chunks (an httpx
    response's ``aiter_text()``), up to ``data: [DONE]``."""
    rest = ""
    async for chunk in chunks:
        # A CR at a chunk's end whose LF opens the next one adds an empty line: ignored below.
        *lines, rest = _SSE_EOL.split(rest + chunk)
        for line in lines:
            if (payload := _data(line)) == "[DONE]":
                return
            if payload is not None:
                yield payload
    if (payload := _data(rest)) is not None and payload != "[DONE]":
        yield payload


def _data(line: str) -> str | None:
    return line[5:].strip() if line.startswith("data:") else None


def output_delta(
    event: Mapping[str, Any], seen_ids: Sequence[int], seen_text: str
) -> tuple[list[int], str]:
    """New ids and text of one stream event, whether the server streams totals or deltas."""
    ids = [int(t) for t in event.get("output_ids") or []]
    total = meta_info(event).get("completion_tokens")
    n = len(seen_ids)
    cumulative = (
        len(ids) == total if isinstance(total, int) else list(ids[:n]) == list(seen_ids)
    ) and len(ids) >= n
    new_ids = ids[n:] if cumulative else ids
    text = str(event.get("text") or "")
    if cumulative and text.startswith(seen_text):
        return new_ids, text[len(seen_text) :]
    return new_ids, text
