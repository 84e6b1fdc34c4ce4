"""The validated shape of saved predictor state (pydantic models for ``from_dict``).

Every field is checked before a predictor is rebuilt: strict types (no ``true`` for a number,
no ``1.0`` for an integer, no string for a list), finite numbers (JSON ``1e4000`` decodes to
``inf``), no subnormal counts or mixture weights (``1e-320``: dividing by one overflows, and a
prediction made from it was NaN), counts at most :data:`MAX_COUNT`, integers too large for a
float, negative counts, unknown keys, and sizes bounded by the limits below. Then, by each
model's validator, what the fields say together: the features and the weights of the experts,
each expert's tables (the context bound, lengths, repeats, feature keys) and that the counts
name only known nodes, so ``from_dict`` only builds.
:func:`parse` turns any problem into one ``ValueError`` naming the field, so
:class:`~agentwarm.predictors.store.PredictorStore` can set the file aside instead of crashing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)

from agentwarm.predictors import _features

__all__ = (
    "MAX_CONTEXTS",
    "MAX_COUNT",
    "MAX_NAMES",
    "MAX_NAME_CHARS",
    "MAX_ORDER",
    "MIN_NORMAL",
    "FirstOrderState",
    "MarkovState",
    "Name",
    "Normal",
    "is_count",
    "normal",
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
#: Largest count accepted: past ``2**53`` adding one observation no longer changes a float, so
#: no count that learning made is larger (one observation adds 1).
MAX_COUNT = 2.0**53
#: Smallest positive normal float: a nonzero number below it is subnormal and refused (a count
#: decayed that far is dropped instead, see :mod:`agentwarm.predictors.markov.experts`).
MIN_NORMAL = sys.float_info.min
_MAX_INT = 2**63 - 1


def normal(value: float) -> float:
    """``value`` if it is zero or a normal float; ``ValueError`` for a subnormal one."""
    if value != 0.0 and -MIN_NORMAL < value < MIN_NORMAL:
        raise ValueError(
            f"must be 0 or at least {MIN_NORMAL!r} in size (subnormal numbers make "
            "predictions overflow)"
        )
    return value


def is_count(value: Any) -> bool:
    """Whether ``value`` is an integer count in ``[0, MAX_COUNT]`` (not a ``bool``)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _at_most_max_count(value: float) -> float:
    if value > MAX_COUNT:
        raise ValueError(f"must be at most {MAX_COUNT:.0f} (2**53), more than any count learned")
    return value


#: The annotation refusing subnormal numbers (for other state models' float fields).
Normal = AfterValidator(normal)
Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_NAME_CHARS)]
Count = Annotated[
    float, Strict(), Field(ge=0, allow_inf_nan=False), Normal, AfterValidator(_at_most_max_count)
]
Positive = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Strict(), Field(ge=0, lt=1, allow_inf_nan=False)]
Weight = Annotated[float, Strict(), Field(ge=0, le=1, allow_inf_nan=False), Normal]
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

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """What the field types cannot say: the features, the weights of the experts, each
        expert's tables (the context bound, lengths, repeats, feature keys, known names)."""
        feats = self.features
        if any(f not in _features.FEATURES for f in feats) or len(set(feats)) != len(feats):
            raise ValueError(
                f"field 'features' must be distinct names among {list(_features.FEATURES)}, "
                f"got {feats}"
            )
        k = 1 + (self.recent_half_life is not None) + len(feats)
        if self.weights is not None and (
            len(self.weights) != k or abs(sum(self.weights) - 1.0) > 1e-6
        ):
            raise ValueError(
                f"field 'weights' must be {k} numbers in [0, 1] summing to 1, got {self.weights!r}"
            )
        known = set(self.known)
        bound = self.max_contexts
        _check_tables(self.contexts, "contexts", known, bound, self.max_order)
        _check_tables(self.recent_contexts, "recent_contexts", known, bound)
        if self.recent_contexts and self.recent_half_life is None:
            raise ValueError("has recent_contexts but no recent_half_life")
        if set(self.feature_contexts) - set(feats):
            raise ValueError(
                f"field 'feature_contexts' must be an object keyed by features {feats}"
            )
        for feature, items in self.feature_contexts.items():
            where = f"feature_contexts[{feature!r}]"
            _check_tables(items, where, known, bound, feature=feature)
        return self


def _check_tables(
    items: list[Any],
    field: str,
    known: set[str],
    max_contexts: int | None,
    max_len: int | None = None,
    feature: str | None = None,
) -> None:
    """One expert's ``[context, counts]`` entries: at most ``max_contexts``, contexts at most
    ``max_len`` long (or feature keys ``feature`` can make), none twice, counting known nodes."""
    if max_contexts is not None and len(items) > max_contexts:
        raise ValueError(
            f"field {field!r} has {len(items)} contexts, more than max_contexts={max_contexts}"
        )
    seen: set[tuple[Any, ...]] = set()
    for i, (names, table) in enumerate(items):
        where = f"{field}[{i}]"
        if feature is not None:
            _features.decode(feature, names, f"{where}[0]")
        if max_len is not None and len(names) > max_len:
            raise ValueError(f"{where} is longer than max_order={max_len}")
        context = tuple(names)
        if context in seen:
            raise ValueError(f"{where} repeats context {names}")
        seen.add(context)
        unknown = [name for name in table if name not in known]
        if unknown:
            raise ValueError(f"{where} counts unknown nodes {unknown}")


class FirstOrderState(_State):
    """``FirstOrderPredictor.to_dict()``."""

    kind: Literal["first_order"]
    pseudo_count: Count
    known: Names
    counts: Annotated[dict[Name, CountTable], Field(max_length=MAX_NAMES)]

    @model_validator(mode="after")
    def _counts_known_nodes(self) -> Self:
        known = set(self.known)
        for node, table in self.counts.items():
            unknown = [name for name in table if name not in known]
            if unknown:
                raise ValueError(f"counts[{node!r}] counts unknown nodes {unknown}")
        return self


_M = TypeVar("_M", bound=BaseModel)


def parse(
    model: type[_M],
    data: Mapping[str, Any],
    what: str = "predictor state",
    context: Any = None,
    *,
    at: str = "",
) -> _M:
    """``data`` validated as ``model`` (its validators see ``context``); ``ValueError`` naming
    the first bad field otherwise (``at``: the field of an enclosing document ``data`` is,
    the first part of the names)."""
    if not isinstance(data, Mapping):
        where = f" field {at!r}" if at else ""
        raise ValueError(f"{what}{where} must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(dict(data), context=context)
    except ValidationError as exc:
        raise ValueError(describe(exc, what, at)) from None


def describe(exc: ValidationError, what: str, at: str = "") -> str:
    """One line for the first error of ``exc``: field path (under ``at``), problem, offending
    value; or, for a check of the whole document (a model validator's ``ValueError``), its own
    message."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    error = first.get("ctx", {}).get("error")
    if not first["loc"] and isinstance(error, ValueError):
        return f"{what} field {at!r}: {error}{more}" if at else f"{what} {error}{more}"
    field = ".".join(str(part) for part in (at, *first["loc"]) if part != "") or "(top level)"
    value = short(first.get("input"))
    return f"{what} field {field!r}: {first['msg']}, got {value}{more}"


def short(value: Any) -> str:
    """``repr(value)`` cut to 80 characters (huge integers by their size)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
