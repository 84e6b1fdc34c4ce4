"""The validated shape of saved predictor state (pydantic models for ``from_dict``).

Every field is checked before a predictor is rebuilt: strict types (no ``true`` for a number,
no ``1.0`` for an integer, no string for a list), finite numbers (JSON ``1e4000`` decodes to
``inf``), integers too large for a float, negative counts, unknown keys, and sizes bounded by
the limits below. :func:`parse` turns any problem into one ``ValueError`` naming the field, so
:class:`~agentwarm.predictors.store.PredictorStore` can set the file aside instead of crashing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

__all__ = (
    "MAX_CONTEXTS",
    "MAX_NAMES",
    "MAX_NAME_CHARS",
    "MAX_ORDER",
    "FirstOrderState",
    "MarkovState",
    "Name",
    "parse",
    "short",
)

#: Longest node name accepted in saved state.
MAX_NAME_CHARS = 1024
#: Most names in one list (node set, known successors, one count table).
MAX_NAMES = 100_000
#: Most contexts in one saved table list (an expert keeps at most ``max_contexts``).
MAX_CONTEXTS = 1_000_000
#: Longest Markov context accepted.
MAX_ORDER = 1024
_MAX_INT = 2**63 - 1

Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_NAME_CHARS)]
Count = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Strict(), Field(ge=0, lt=1, allow_inf_nan=False)]
Weight = Annotated[float, Strict(), Field(ge=0, le=1, allow_inf_nan=False)]
Names = Annotated[list[Name], Field(max_length=MAX_NAMES)]
CountTable = Annotated[dict[Name, Count], Field(max_length=MAX_NAMES)]
#: ``[context names, counts]`` of the Markov and recent experts.
ContextEntry = tuple[Annotated[list[Name], Field(max_length=MAX_ORDER)], CountTable]
#: ``[feature key, counts]``; the key's meaning is checked by ``_features.decode``.
FeatureKeyItem = (
    Annotated[str, Strict(), Field(max_length=MAX_NAME_CHARS)]
    | Annotated[int, Strict(), Field(ge=0, le=_MAX_INT)]
)
FeatureEntry = tuple[Annotated[list[FeatureKeyItem], Field(max_length=MAX_NAMES)], CountTable]


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MarkovState(_State):
    """``MarkovPredictor.to_dict()``. The expert fields may be missing (state written before
    they existed): that is a plain Markov model without a context bound."""

    kind: Literal["markov"]
    max_order: Annotated[int, Strict(), Field(ge=0, le=MAX_ORDER)]
    half_life: Positive | None
    backoff: Positive
    min_count: Fraction
    features: Annotated[list[Name], Field(max_length=16)] = []
    recent_half_life: Positive | None = None
    share: Fraction = 0.01
    max_contexts: Annotated[int, Strict(), Field(ge=1, le=MAX_CONTEXTS)] | None = None
    observations: Annotated[int, Strict(), Field(ge=0, le=_MAX_INT)]
    known: Names
    weights: Annotated[list[Weight], Field(max_length=16)] | None = None
    contexts: Annotated[list[ContextEntry], Field(max_length=MAX_CONTEXTS)]
    recent_contexts: Annotated[list[ContextEntry], Field(max_length=MAX_CONTEXTS)] = []
    feature_contexts: dict[Name, Annotated[list[FeatureEntry], Field(max_length=MAX_CONTEXTS)]] = {}


class FirstOrderState(_State):
    """``FirstOrderPredictor.to_dict()``."""

    kind: Literal["first_order"]
    pseudo_count: Count
    known: Names
    counts: Annotated[dict[Name, CountTable], Field(max_length=MAX_NAMES)]


_M = TypeVar("_M", bound=BaseModel)


def parse(model: type[_M], data: Mapping[str, Any], what: str = "predictor state") -> _M:
    """``data`` validated as ``model``; ``ValueError`` naming the first bad field otherwise."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise ValueError(describe(exc, what)) from None


def describe(exc: ValidationError, what: str) -> str:
    """One line for the first error of ``exc``: field path, problem, offending value."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    value = short(first.get("input"))
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{what} field {field!r}: {first['msg']}, got {value}{more}"


def short(value: Any) -> str:
    """``repr(value)`` cut to 80 characters (huge integers by their size)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
