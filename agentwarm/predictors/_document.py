"""The predictor state file's document: its format, and a pydantic model that validates a
whole document against the workflow loading it.

::

    {"format": "agentwarm.predictor", "version": 2, "workflow": "...",
     "nodes": [...sorted node names...], "fingerprint": "<sha256 of the node set>",
     "predictor": {...predictor.to_dict()...}}

:func:`document` builds one; :func:`predictor_state` validates one (strict field types, then
the format and version this agentwarm reads, the workflow, its node set, the predictor kind and
that the predictor knows only nodes of the workflow) and returns its ``predictor`` state, which
the predictor's ``from_dict`` validates further (:mod:`agentwarm.predictors._serial`). Any
problem is one ``ValueError`` saying what is wrong; :mod:`agentwarm.predictors.store` then sets
the file aside and learning restarts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationInfo, model_validator

from agentwarm.predictors import _serial

__all__ = ("FORMAT", "FORMAT_VERSION", "document", "node_fingerprint", "predictor_state")

FORMAT = "agentwarm.predictor"
#: Version 2: the Markov predictor's mixture experts (weights, recent and feature contexts).
#: Files of other versions are set aside and learning restarts.
FORMAT_VERSION = 2


def node_fingerprint(nodes: Iterable[str]) -> str:
    """SHA-256 of the sorted, deduplicated node names (order of ``nodes`` does not matter)."""
    joined = "\n".join(sorted(set(nodes)))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


#: ``(reading kind, saved kind)`` pairs a predictor reads besides its own kind: the content
#: predictor wraps state saved by the path-only default before it (nothing learned is lost).
UPGRADES = frozenset({("content", "markov")})


@dataclass(frozen=True, slots=True)
class Expected:
    """What a state file must have been saved for: the validation context of
    :class:`StateDocument`."""

    workflow: str
    #: Sorted, without repeats.
    nodes: list[str]
    #: The ``kind`` of the predictor that will read the state.
    kind: str


class StateDocument(BaseModel):
    """A state file, checked whole against the workflow loading it (an :class:`Expected` as
    validation context). ``predictor`` is validated further by the predictor's ``from_dict``;
    here only its ``kind`` and that its known successors are nodes of the workflow.

    Every check raises ``ValueError`` with a message that completes "predictor state file ..."
    and says what is wrong with it; the store then sets the file aside and learns afresh."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Annotated[str, Strict()]
    version: Annotated[int, Strict()]
    workflow: Annotated[str, Strict()]
    nodes: Annotated[list[_serial.Name], Field(max_length=_serial.MAX_NAMES)]
    fingerprint: Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{64}$")]
    predictor: dict[Annotated[str, Strict()], Any]

    @model_validator(mode="before")
    @classmethod
    def _this_format(cls, data: Any) -> Any:
        """Format and version first: a file of another version is refused for that, whatever
        else its fields hold."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"is not an agentwarm predictor file (format must be {FORMAT!r})")
        version = data.get("version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"has format version {_serial.short(version)}, this agentwarm reads "
                f"{FORMAT_VERSION}"
            )
        return data

    @model_validator(mode="after")
    def _saved_for(self, info: ValidationInfo) -> Self:
        """Saved for this workflow, its node set and this kind of predictor."""
        expected = info.context
        if not isinstance(expected, Expected):
            return self
        if self.workflow != expected.workflow:
            raise ValueError(f"was saved for workflow {_serial.short(self.workflow)}")
        nodes = expected.nodes
        if self.nodes != nodes or self.fingerprint != node_fingerprint(nodes):
            saved = set(self.nodes)
            if saved == set(nodes) and self.nodes != nodes:
                raise ValueError("lists its nodes unsorted or more than once")
            raise ValueError(
                f"was saved for another node set (added {sorted(set(nodes) - saved)}, "
                f"removed {sorted(saved - set(nodes))})"
            )
        kind = self.predictor.get("kind")
        if kind != expected.kind and (expected.kind, kind) not in UPGRADES:
            raise ValueError(
                f"holds a predictor of kind {_serial.short(kind)}, expected {expected.kind!r}"
            )
        known = self.predictor.get("known")
        names = set(nodes)
        unknown = [n for n in known if n not in names] if isinstance(known, list) else []
        if unknown:
            raise ValueError(
                f"has a predictor that knows successors that are not nodes: {unknown[:5]}"
            )
        return self


def document(workflow: str, nodes: list[str], state: dict[str, Any]) -> dict[str, Any]:
    """The document saving ``state`` (a ``to_dict``) for ``workflow`` and its sorted ``nodes``."""
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "workflow": workflow,
        "nodes": nodes,
        "fingerprint": node_fingerprint(nodes),
        "predictor": state,
    }


def predictor_state(data: Any, workflow: str, nodes: list[str], kind: str) -> dict[str, Any]:
    """The ``predictor`` state of ``data`` (a decoded state file) saved for ``workflow``, its
    sorted ``nodes`` and a predictor of ``kind``; ``ValueError`` saying why not."""
    context = Expected(workflow, nodes, kind)
    return _serial.parse(StateDocument, data, "predictor state file", context).predictor
