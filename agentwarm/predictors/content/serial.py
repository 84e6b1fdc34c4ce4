"""The saved form of a :class:`~agentwarm.predictors.content.ContentPredictor`: validated
(pydantic, strict, bounded) before anything is rebuilt, so an unusable file is refused with a
``ValueError`` naming the field (the store then sets it aside), and merged for concurrent saves.

Weights are saved as the rows that are not all zero: ``rows`` (bucket indices, ascending) and
``data``, the rows' float32 values, little-endian, base64 (``len(rows) x len(classes)``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from agentwarm.predictors import _serial
from agentwarm.predictors.content.memory import ExampleMemory
from agentwarm.predictors.markov import MarkovPredictor

if TYPE_CHECKING:
    from agentwarm.predictors.content.model import ContentPredictor

__all__ = ("ContentState", "dump", "load", "merge")

_C = TypeVar("_C", bound="ContentPredictor")
#: Most buckets accepted (the default is 16,384).
MAX_BUCKETS = 1 << 22
#: Most examples in a saved memory.
MAX_EXAMPLES = 1_000_000

Int = Annotated[int, Strict(), Field(ge=1, le=MAX_BUCKETS)]
Finite = Annotated[float, Strict(), Field(allow_inf_nan=False)]
#: A word mask in hex (at most BITS bits).
Mask = Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{1,1024}$")]
Example = tuple[_serial.Name, Annotated[str, Strict()], Mask, _serial.Name]


class MemoryState(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    per_node: Int
    k: Int
    power: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
    examples: Annotated[list[Example], Field(max_length=MAX_EXAMPLES)]


class ContentState(BaseModel):
    """A saved content predictor; the validator checks the weights' size against the rows and
    classes and that every row is a bucket."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["content"]
    known: _serial.Names
    path: dict[Annotated[str, Strict()], Any]
    buckets: Int
    max_classes: Int
    learning_rate: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
    offset_rate: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
    offsets: tuple[Finite, Finite]
    observations: Annotated[int, Strict(), Field(ge=0)]
    classes: _serial.Names
    rows: list[Annotated[int, Strict(), Field(ge=0, lt=MAX_BUCKETS)]]
    data: Annotated[str, Strict()]
    memory: MemoryState

    @model_validator(mode="after")
    def _fits(self) -> ContentState:
        # The store checks ``known`` against the workflow's nodes: it must be the path
        # experts' and name every class and every remembered next node.
        if self.path.get("known") != self.known:
            raise ValueError("known: not the path experts' known successors")
        known = set(self.known)
        if len(self.classes) > self.max_classes or len(set(self.classes)) != len(self.classes):
            raise ValueError("classes: repeated names or more than max_classes")
        unknown = [n for n in self.classes if n not in known]
        unknown += [e[3] for e in self.memory.examples if e[3] not in known]
        if unknown:
            raise ValueError(
                f"classes or memory: names that are not known successors {unknown[:5]}"
            )
        if self.rows != sorted(set(self.rows)) or any(r >= self.buckets for r in self.rows):
            raise ValueError("rows: not ascending distinct buckets below 'buckets'")
        try:
            raw = base64.b64decode(self.data, validate=True)
        except ValueError as exc:
            raise ValueError(f"data: not base64 ({exc})") from None
        if len(raw) != 4 * len(self.rows) * len(self.classes):
            raise ValueError(
                f"data: {len(raw)} bytes, expected {4 * len(self.rows) * len(self.classes)} "
                f"({len(self.rows)} rows x {len(self.classes)} classes of float32)"
            )
        if not np.isfinite(np.frombuffer(raw, dtype="<f4")).all():
            raise ValueError("data: weights must be finite")
        return self


def dump(model: ContentPredictor) -> dict[str, Any]:
    weights = (
        np.stack([model.weights_of(n) for n in model.classes], axis=1) if model.classes else None
    )
    rows = [] if weights is None else np.flatnonzero(np.any(weights != 0, axis=1)).tolist()
    data = b"" if weights is None else weights[rows].astype("<f4").tobytes()
    path = model.path.to_dict()
    return {
        "kind": model.kind,
        "known": list(path.get("known", [])),
        "path": path,
        "buckets": model.buckets,
        "max_classes": model.max_classes,
        "learning_rate": model.learning_rate,
        "offset_rate": model.offset_rate,
        "offsets": [float(x) for x in model.offsets],
        "observations": model.observations,
        "classes": model.classes,
        "rows": rows,
        "data": base64.b64encode(data).decode("ascii"),
        "memory": {
            "per_node": model.memory.per_node,
            "k": model.memory.k,
            "power": model.memory.power,
            "examples": model.memory.to_list(),
        },
    }


def load(cls: type[_C], data: Mapping[str, Any]) -> _C:
    if isinstance(data, Mapping) and data.get("kind") == MarkovPredictor.kind:
        # Saved by the path-only default before this one: wrap it, nothing learned is lost.
        return cls(path=MarkovPredictor.from_dict(data))
    state = _serial.parse(ContentState, data, "content predictor state")
    memory = ExampleMemory(
        per_node=state.memory.per_node, k=state.memory.k, power=state.memory.power
    )
    memory.load(state.memory.examples)
    model = cls(
        path=MarkovPredictor.from_dict(state.path),
        buckets=state.buckets,
        max_classes=state.max_classes,
        learning_rate=state.learning_rate,
        offset_rate=state.offset_rate,
        memory=memory,
    )
    weights = np.zeros((state.buckets, len(state.classes)), dtype=np.float32)
    if state.rows:
        raw = np.frombuffer(base64.b64decode(state.data), dtype="<f4")
        weights[state.rows] = raw.reshape(len(state.rows), len(state.classes))
    model.set_weights(state.classes, weights)
    model.offsets = np.array(state.offsets, dtype=float)
    model.observations = state.observations
    return model


def _config(model: ContentPredictor) -> tuple[Any, ...]:
    return (model.buckets, model.max_classes, model.memory.per_node)


def merge(mine: _C, latest: _C, base: _C | None) -> _C:
    for other in (latest, base):
        if other is not None and _config(other) != _config(mine):
            raise ValueError(f"cannot merge {mine!r} with {other!r}: another configuration")
    out = type(mine)(
        path=mine.path.merged(latest.path, base.path if base is not None else None),
        buckets=mine.buckets,
        max_classes=mine.max_classes,
        learning_rate=mine.learning_rate,
        offset_rate=mine.offset_rate,
        memory=mine.memory.merged_with(latest.memory),
    )
    classes = list(dict.fromkeys([*latest.classes, *mine.classes]))[: mine.max_classes]
    columns = []
    for name in classes:
        before = base.weights_of(name) if base is not None else 0.0
        columns.append(latest.weights_of(name) + (mine.weights_of(name) - before))
    weights = np.stack(columns, axis=1) if columns else np.zeros((mine.buckets, 0), np.float32)
    out.set_weights(classes, weights.astype(np.float32))
    out.offsets = mine.offsets.copy()
    before_n = base.observations if base is not None else 0
    out.observations = latest.observations + max(0, mine.observations - before_n)
    return out
