"""Request bodies of ``agentwarm serve``: the subset of SGLang's native API it honours.

Field names and defaults follow SGLang 0.5.x (``GenerateReqInput``, ``SamplingParams``,
``AbortReq``). Unknown fields are ignored, as SGLang ignores them, because sglang-router re-sends
every request with its own defaults (``model``, ``log_metrics``, ``return_hidden_states``, ...).
The fields below are type-checked strictly: a string where an int belongs is a 400, not a guess.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from agentwarm.engines.namespace import check_field, check_part

__all__ = (
    "MIN_TEMPERATURE",
    "AbortRequest",
    "DetokenizeRequest",
    "GenerateRequest",
    "SamplingParams",
    "Text",
    "TokenizeRequest",
    "describe_validation_error",
)

#: Smallest non-zero ``temperature`` (SGLang's sampling epsilon); below it logits overflow.
MIN_TEMPERATURE = 1e-6


def _valid_unicode(value: str) -> str:
    """JSON may carry lone surrogates (``"\\ud800"``), which no UTF-8 encoder accepts."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"contains a lone surrogate {value[exc.start]!r} at index {exc.start}, which is not "
            "valid Unicode: send UTF-8 text (a \\ud83d\\ude00 escape pair must come whole)"
        ) from None
    return value


Text = Annotated[str, AfterValidator(_valid_unicode)]
"""A string that encodes as UTF-8 (no lone surrogates)."""

TokenId = Annotated[StrictInt, Field(ge=0)]


def _usable_temperature(value: float) -> float:
    if 0.0 < value < MIN_TEMPERATURE:
        raise ValueError(
            f"{value!r} is too small to sample with: use 0 for greedy decoding, or at least "
            f"{MIN_TEMPERATURE}"
        )
    return value


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
    engine) is the ``X-SMG-Routing-Key`` header, else ``routing_key``, else ``session_id``.
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
    cache_salt: Text | None = None
    extra_key: Text | None = None
    routing_key: Text | None = None
    session_id: Text | None = None
    log_metrics: StrictBool = True

    @field_validator("cache_salt", "extra_key")
    @classmethod
    def _namespace_part(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else check_part(str(info.field_name), value)

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


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``sampling_params.max_new_tokens: Input should be a valid integer``."""
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"] if not _is_union_tag(part))
        lines.append(f"{loc or 'body'}: {error['msg']}")
    unique = list(dict.fromkeys(lines))
    return "; ".join(unique[:8]) + (f" (+{len(unique) - 8} more)" if len(unique) > 8 else "")


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part in _UNION_TAGS)


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
