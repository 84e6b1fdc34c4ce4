"""The saved form of a :class:`~agentwarm.predictors.content.ContentPredictor`: validated
(pydantic, strict, bounded) before anything is rebuilt, so an unusable file is refused with a
``ValueError`` naming the field (the store then sets it aside), and merged for concurrent saves.

Weights are saved as the rows that are not all zero: ``rows`` (bucket indices, ascending) and
``data``, the rows' float32 values, little-endian, base64 (``len(rows) x len(classes)``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from agentwarm.predictors import _serial
from agentwarm.predictors.content.memory import MAX_POWER, ExampleMemory, decode_mask

__all__ = ("ContentState", "decode_weights", "encode_weights", "memory_of", "parse")

#: What the messages of refused state call it.
WHAT = "content predictor state"
#: Most buckets accepted (the default is 16,384).
MAX_BUCKETS = 1 << 22
#: Most examples in a saved memory.
MAX_EXAMPLES = 200_000

Int = Annotated[int, Strict(), Field(ge=1, le=MAX_BUCKETS)]
Finite = Annotated[float, Strict(), Field(allow_inf_nan=False)]
#: A word mask: its set bits as base64 16-bit integers (checked by ``decode_mask``).
Mask = Annotated[str, Strict(), Field(max_length=11_000, pattern=r"^[A-Za-z0-9+/]*={0,2}$")]
Example = tuple[_serial.Name, Annotated[str, Strict()], Mask, _serial.Name]


class MemoryState(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    per_node: Int
    k: Int
    power: Annotated[float, Strict(), Field(gt=0, le=MAX_POWER, allow_inf_nan=False)]
    examples: Annotated[list[Example], Field(max_length=MAX_EXAMPLES)]

    @model_validator(mode="after")
    def _masks(self) -> MemoryState:
        for i, example in enumerate(self.examples):
            try:
                decode_mask(example[2])
            except ValueError as exc:
                raise ValueError(f"memory.examples.{i}: {exc}") from None
        return self


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


def encode_weights(columns: list[np.ndarray]) -> tuple[list[int], str]:
    """``(rows, data)`` of weight columns (one per class, ``buckets`` long): the rows that are
    not all zero, and their values as base64 little-endian float32."""
    if not columns:
        return [], ""
    weights = np.stack(columns, axis=1)
    rows = np.flatnonzero(np.any(weights != 0, axis=1)).tolist()
    return rows, base64.b64encode(weights[rows].astype("<f4").tobytes()).decode("ascii")


def decode_weights(state: ContentState) -> np.ndarray:
    """The ``buckets x len(classes)`` weights of a validated state."""
    weights = np.zeros((state.buckets, len(state.classes)), dtype=np.float32)
    if state.rows:
        raw = np.frombuffer(base64.b64decode(state.data), dtype="<f4")
        weights[state.rows] = raw.reshape(len(state.rows), len(state.classes))
    return weights


def memory_of(state: ContentState) -> ExampleMemory:
    """The example memory of a validated state."""
    saved = state.memory
    memory = ExampleMemory(per_node=saved.per_node, k=saved.k, power=saved.power)
    memory.load(saved.examples)
    return memory


def parse(data: Mapping[str, Any]) -> ContentState:
    """``data`` validated as a saved content predictor; ``ValueError`` naming the field."""
    return _serial.parse(ContentState, data, WHAT)
