"""Validation helpers for ``from_dict``: every problem is a ``ValueError`` naming the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ("check_kind", "count_table", "name_list", "number", "optional_number")


def check_kind(data: Mapping[str, Any], kind: str) -> None:
    if not isinstance(data, Mapping):
        raise ValueError(f"predictor state must be a JSON object, got {type(data).__name__}")
    if data.get("kind") != kind:
        raise ValueError(f"predictor state has kind {data.get('kind')!r}, expected {kind!r}")


def number(data: Mapping[str, Any], key: str, *, integer: bool = False) -> float:
    value: Any = data.get(key)
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or not math.isfinite(value):
        kind = "an integer" if integer else "a finite number"
        raise ValueError(f"predictor state field {key!r} must be {kind}, got {value!r}")
    return float(value) if not integer else int(value)


def optional_number(data: Mapping[str, Any], key: str) -> float | None:
    return None if data.get(key) is None else number(data, key)


def name_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"predictor state field {where!r} must be a list of node names")
    return value


def count_table(value: Any, where: str) -> dict[str, float]:
    """A ``{node: count}`` object with finite, non-negative counts."""
    if not isinstance(value, dict):
        raise ValueError(f"predictor state field {where!r} must be an object of counts")
    table: dict[str, float] = {}
    for name, count in value.items():
        if (
            isinstance(count, bool)
            or not isinstance(count, int | float)
            or not math.isfinite(count)
            or count < 0
        ):
            raise ValueError(f"predictor state {where!r}: bad count {count!r} for {name!r}")
        table[name] = float(count)
    return table
