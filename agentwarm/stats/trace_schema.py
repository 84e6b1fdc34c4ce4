"""The attributes of the agentwarm spans that the statistics read, as pydantic models.

One model per span kind: :class:`StepAttributes` (``invoke_agent {node}``),
:class:`PrefillAttributes` (``agentwarm.prefill``) and :class:`RunAttributes`
(``invoke_workflow {workflow}``). A field's alias is its attribute name from
:mod:`agentwarm.telemetry`; attributes the statistics do not read are ignored. Each model's
:meth:`~SpanAttributes.read` validates one span's attributes (an object, or OTLP key/values
already flattened by the reader) and raises :class:`BadSpan` saying which attribute is wrong and
how:

* a required name (a step's ``from``/``node``, a prefill's ``source``/``target``, a run's id)
  that is missing or not a non-empty string: ``step span without a string '<attribute>'``
  (a warm-up prefill, kind ``static``/``keep_warm``/``explicit``, may omit its source and
  target: it is on no edge); a step's mid-decode hint node, when present, must be one too;
* a count, index or rank that is not an integer in 0..:data:`MAX_COUNT` (integral numbers and
  decimal strings are read as integers);
* a TTFT that is not a finite number >= 0, a probability outside 0..1 (numbers or decimal
  strings);
* a prefill kind or outcome that is not a :class:`~agentwarm._spec.PrefetchKind` /
  :class:`~agentwarm._spec.PrefetchOutcome` value (the outcome may be absent), a step's miss
  reason that is not a :class:`~agentwarm._spec.MissReason` value (it may be absent: a hit that
  paid in full, a first step, or a trace older than the reasons);
* a run's end steps that are not a list of step indices.

Flags (``prefetched``, ``completed``) are true when the attribute is ``true`` or the string
``"true"`` (any case); workflow and run id labels of steps and prefills are read as strings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, NoReturn, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentwarm._spec import WARM_UP_KINDS, MissReason, PrefetchKind, PrefetchOutcome
from agentwarm.telemetry import names as tn

__all__ = (
    "MAX_COUNT",
    "BadSpan",
    "PrefillAttributes",
    "RunAttributes",
    "SpanAttributes",
    "StepAttributes",
    "shown",
)

#: Largest token count, step index or rank a trace may hold (2**53: exact as a JSON/IEEE double,
#: and far beyond any real prompt).
MAX_COUNT = 2**53

#: Slack above 1 allowed in a probability (a predictor's mixture may sum to 1 + rounding).
_PROBABILITY_SLACK = 1e-9

#: Error type of a required name that is present but not a non-empty string.
_NO_NAME = "no_name"


class BadSpan(ValueError):
    """A span record that cannot be read; ``str()`` says what is wrong (without file or line)."""


def shown(v: Any) -> str:
    """``repr(v)``, shortened so that a hostile value cannot flood the warning."""
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


def _bad(problem: str, v: Any) -> NoReturn:
    raise PydanticCustomError(
        "bad_value", "{problem}: {value}", {"problem": problem, "value": shown(v)}
    )


def _name(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise PydanticCustomError(_NO_NAME, "is not a non-empty string")
    return v


def _in_range(x: float, most: float, most_shown: str, v: Any) -> None:
    """Refuses ``x`` (read from ``v``) unless it is in 0..``most``."""
    if x < 0:
        _bad("is negative", v)
    if x > most:
        _bad(f"is larger than {most_shown}", v)


def _count(v: Any) -> int | None:
    """A count or index: an integer (or integral number, or decimal string) in 0..MAX_COUNT;
    ``None`` stays ``None``."""
    if v is None:
        return None
    n: int | None = None
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif isinstance(v, float) and v.is_integer():  # False for inf and nan
        n = int(v)
    elif isinstance(v, str):
        try:
            n = int(v)
        except ValueError:  # not digits, or more digits than Python converts
            n = None
    if n is None:
        _bad("is not an integer", v)
    _in_range(n, MAX_COUNT, str(MAX_COUNT), v)
    return n


def _number(most: float) -> BeforeValidator:
    """A finite number in 0..``most`` (a number or a decimal string); ``None`` stays ``None``."""

    def check(v: Any) -> float | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            _bad("is not a number", v)
        try:
            x = float(v)
        except (ValueError, OverflowError):
            _bad("is not a number", v)
        if not math.isfinite(x):
            _bad("is not a finite number", v)
        _in_range(x, most, f"{most:g}", v)
        return x

    return BeforeValidator(check)


def _flag(v: Any) -> bool:
    return v.lower() == "true" if isinstance(v, str) else bool(v)


def _step_indices(v: Any) -> tuple[int, ...]:
    ends = v or []
    if not isinstance(ends, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ends
    ):
        _bad("is not a list of step indices", ends)
    return tuple(ends)


Name = Annotated[str, BeforeValidator(_name)]
"""A required name: a non-empty string."""
OptionalName = Annotated[str | None, BeforeValidator(lambda v: None if v is None else _name(v))]
"""A name that may be absent (``None``); when present, a non-empty string."""
Label = Annotated[str, BeforeValidator(str)]
"""A label read as a string, whatever it holds."""
Count = Annotated[int, BeforeValidator(lambda v: _count(v) or 0)]
"""A count or index in 0..MAX_COUNT; absent or null is 0."""
Rank = Annotated[int | None, BeforeValidator(_count)]
"""A rank in 0..MAX_COUNT, or ``None``."""
OptionalCount = Rank
"""A count in 0..MAX_COUNT, or ``None`` (absent: not known)."""
Seconds = Annotated[float | None, _number(math.inf)]
"""A duration: a finite number >= 0, or ``None``."""
Probability = Annotated[float | None, _number(1 + _PROBABILITY_SLACK)]
"""A probability in 0..1, or ``None``."""
Flag = Annotated[bool, BeforeValidator(_flag)]
"""A flag: true, or the string ``"true"`` in any case."""


class SpanAttributes(BaseModel):
    """The attributes of one kind of agentwarm span; subclasses name the span in ``span``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    span: ClassVar[str]
    """The span's kind as problems name it (``step``, ``prefill``, ``workflow``)."""

    @classmethod
    def read(cls, attrs: Mapping[str, Any]) -> Self:
        """``attrs`` validated; raises :class:`BadSpan` naming the first attribute that is wrong
        (in field order) and what is wrong with it."""
        try:
            return cls.model_validate(attrs)
        except ValidationError as exc:
            raise BadSpan(cls._problem(exc)) from None

    @classmethod
    def _problem(cls, exc: ValidationError) -> str:
        err = exc.errors(include_url=False)[0]
        key = ".".join(str(part) for part in err["loc"])
        if err["type"] in ("missing", _NO_NAME):
            return f"{cls.span} span without a string '{key}'"
        if err["type"] == "enum":
            return f"'{key}' is not {err['ctx']['expected']}: {shown(err['input'])}"
        return f"'{key}' {err['msg']}"


class StepAttributes(SpanAttributes):
    """A step span's attributes (the fields of :class:`~agentwarm.stats.traces.StepSpan`)."""

    span: ClassVar[str] = "step"

    workflow: Label = Field("", validation_alias=tn.AW_WORKFLOW)
    run_id: Label = Field("", validation_alias=tn.AW_RUN_ID)
    index: Count = Field(0, validation_alias=tn.AW_STEP_INDEX)
    from_node: Name = Field(validation_alias=tn.AW_STEP_FROM)
    node: Name = Field(validation_alias=tn.AW_STEP_NODE)
    prefetched: Flag = Field(False, validation_alias=tn.AW_STEP_PREFETCHED)
    ttft_s: Seconds = Field(None, validation_alias=tn.AW_STEP_TTFT)
    prompt_tokens: Count = Field(0, validation_alias=tn.AW_STEP_PROMPT_TOKENS)
    cached_tokens: Count = Field(0, validation_alias=tn.AW_STEP_CACHED_TOKENS)
    disk_cached_tokens: OptionalCount = Field(None, validation_alias=tn.AW_STEP_DISK_CACHED_TOKENS)
    hint_node: OptionalName = Field(None, validation_alias=tn.AW_STEP_HINT_NODE)
    hint_lead_s: Seconds = Field(None, validation_alias=tn.AW_STEP_HINT_LEAD)
    hint_gain_s: Seconds = Field(None, validation_alias=tn.AW_STEP_HINT_GAIN)
    miss_reason: MissReason | None = Field(None, validation_alias=tn.AW_STEP_MISS_REASON)
    miss_cause: OptionalName = Field(None, validation_alias=tn.AW_STEP_MISS_CAUSE)
    miss_p: Probability = Field(None, validation_alias=tn.AW_STEP_MISS_P)
    miss_price: Seconds = Field(None, validation_alias=tn.AW_STEP_MISS_PRICE)
    miss_rank: Rank = Field(None, validation_alias=tn.AW_STEP_MISS_RANK)
    miss_token: Rank = Field(None, validation_alias=tn.AW_STEP_MISS_TOKEN)
    miss_message: Rank = Field(None, validation_alias=tn.AW_STEP_MISS_MESSAGE)
    missing_tokens: Rank = Field(None, validation_alias=tn.AW_STEP_MISS_MISSING_TOKENS)


class PrefillAttributes(SpanAttributes):
    """A prefill span's attributes (the fields of :class:`~agentwarm.stats.traces.PrefillSpan`)."""

    span: ClassVar[str] = "prefill"

    @model_validator(mode="before")
    @classmethod
    def _warm_up_names(cls, data: Any) -> Any:
        """A warm-up prefill is on no edge: its source, when absent, reads as ``warmup`` and its
        target as its kind."""
        kind = data.get(tn.AW_PREFILL_KIND) if isinstance(data, Mapping) else None
        if not isinstance(kind, str) or kind not in WARM_UP_KINDS:
            return data
        data = dict(data)
        if not data.get(tn.AW_PREFILL_SOURCE):
            data[tn.AW_PREFILL_SOURCE] = "warmup"
        if not data.get(tn.AW_PREFILL_TARGET):
            data[tn.AW_PREFILL_TARGET] = kind
        return data

    workflow: Label = Field("", validation_alias=tn.AW_WORKFLOW)
    run_id: Label = Field("", validation_alias=tn.AW_RUN_ID)
    source: Name = Field(validation_alias=tn.AW_PREFILL_SOURCE)
    target: Name = Field(validation_alias=tn.AW_PREFILL_TARGET)
    kind: PrefetchKind = Field(validation_alias=tn.AW_PREFILL_KIND)
    outcome: PrefetchOutcome | None = Field(None, validation_alias=tn.AW_PREFILL_OUTCOME)
    tokens: Count = Field(0, validation_alias=tn.AW_PREFILL_TOKENS)
    computed_tokens: Count = Field(0, validation_alias=tn.AW_PREFILL_COMPUTED_TOKENS)
    probability: Probability = Field(None, validation_alias=tn.AW_PREFILL_PROBABILITY)
    rank: Rank = Field(None, validation_alias=tn.AW_PREFILL_RANK)


class RunAttributes(SpanAttributes):
    """A workflow span's attributes (the fields of :class:`~agentwarm.stats.traces.RunSpan`)."""

    span: ClassVar[str] = "workflow"

    workflow: Label = Field("", validation_alias=tn.AW_WORKFLOW)
    run_id: Name = Field(validation_alias=tn.AW_RUN_ID)
    completed: Flag = Field(False, validation_alias=tn.AW_RUN_COMPLETED)
    end_steps: Annotated[tuple[int, ...], BeforeValidator(_step_indices)] = Field(
        (), validation_alias=tn.AW_RUN_END_STEPS
    )
