"""Merge-on-save of the gateway's state file: what this gateway learned, added to what other
gateways sharing the state dir saved meanwhile.

:func:`merge_documents` works on decoded documents (plain dicts, as
:func:`~agentwarm.gateway.state.encode_state` writes them): ``latest`` (the file now),
``mine`` (this gateway's state) and ``base`` (this gateway's state when it loaded or last
wrote the file), so it runs in the write thread, never on objects the event loop mutates. As
the runtime's predictor store merges (:mod:`agentwarm.predictors._merge`), the result is
``latest`` plus the change from ``base`` to ``mine``:

* **Predictors** (the pooled one and each tenant's): ``mine.merged(latest, base)`` when the
  predictor is :class:`~agentwarm.predictors.base.Mergeable` (plain counts add exactly,
  decayed ones to first order); one that is not, or whose configuration differs from the
  file's, replaces it (mine).
* **Shapes and tool hints**: per node / tool, each count ``latest + (mine - base)``
  (:func:`~agentwarm.predictors._merge.tables`; integers stay integers; at most
  :data:`~agentwarm.gateway.toolhints.MAX_TOOLS` tools).
* **Heads**: united by key (:meth:`~agentwarm.gateway.heads.HeadRegistry.absorb`): the file's
  heads, then the ones this gateway identified or gave an owner since ``base``, most recent
  last, each head's owners united (at most
  :data:`~agentwarm.gateway.heads.MAX_OWNERS`), at most this gateway's ``max_heads``. A key
  keeps the file's name; a new key whose name the file gives another key gets a free form of
  it. Learning is keyed by names, so two gateways that named *different* heads alike (the
  same hint, or the same first words, seen in another order) pool those names' counts.
* **Tenants**: by tag, each as the pooled learning; a tenant only one side has is kept as it
  is there; at most :data:`~agentwarm.gateway.tenants.MAX_TENANT_MODELS`, the file's other
  tenants first.

Raises ValueError, TypeError or KeyError for documents the loader would refuse.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentwarm.gateway.heads import HeadRegistry
from agentwarm.gateway.tenants import MAX_TENANT_MODELS
from agentwarm.gateway.toolhints import MAX_TOOLS
from agentwarm.predictors import Predictor
from agentwarm.predictors._merge import tables
from agentwarm.predictors.base import Mergeable

__all__ = ("merge_documents",)

Doc = dict[str, Any]


def merge_documents(latest: Doc, mine: Doc, base: Doc, predictor_cls: type[Predictor]) -> Doc:
    """The document to write: ``latest`` + (``mine`` - ``base``) (see the module docstring)."""
    return {
        **mine,
        "heads": _heads(latest["heads"], mine["heads"], base["heads"]),
        **_learned(latest, mine, base, predictor_cls),
        "tenants": _tenants(latest["tenants"], mine["tenants"], base["tenants"], predictor_cls),
    }


def _learned(latest: Doc | None, mine: Doc, base: Doc | None, cls: type[Predictor]) -> Doc:
    """One :class:`~agentwarm.gateway.tenants.Learned`'s fields merged (``latest`` None: the
    file has none, mine is kept as it is)."""
    if latest is None:
        return {field: mine[field] for field in ("predictor", "shapes", "tool_hints")}
    return {
        "predictor": _predictor(latest["predictor"], mine["predictor"], base, cls),
        "shapes": _counts(latest["shapes"], mine["shapes"], base, "shapes", None),
        "tool_hints": _counts(latest["tool_hints"], mine["tool_hints"], base, "tool_hints"),
    }


def _predictor(latest: Doc, mine: Doc, base: Doc | None, cls: type[Predictor]) -> Doc:
    ours = cls.from_dict(mine)
    if not isinstance(ours, Mergeable):
        return mine
    kind = type(ours)
    before = None if base is None else kind.from_dict(base["predictor"])
    try:
        merged = ours.merged(kind.from_dict(latest), before)
    except ValueError:  # another configuration: it cannot be added to, mine replaces it
        return mine
    state: Doc = json.loads(json.dumps(merged.to_dict(), allow_nan=False))
    return state


def _counts(
    latest: Mapping[str, dict[str, int]],
    mine: Mapping[str, dict[str, int]],
    base: Doc | None,
    field: str,
    max_keys: int | None = MAX_TOOLS,
) -> dict[str, dict[str, int]]:
    before = {} if base is None else base[field]
    merged = tables(latest, mine, before, min_count=0.0, max_contexts=max_keys)  # type: ignore[arg-type]
    return {key: {name: int(n) for name, n in table.items()} for key, table in merged.items()}


def _heads(latest: Doc, mine: Doc, base: Doc) -> Doc:
    merged = HeadRegistry.from_dict(latest, max_heads=mine["max_heads"])
    ours, before = _by_key(mine), _by_key(base)
    # What mine identified since ``base``: its heads past the longest prefix it shares with
    # base's order (identify moves a head to the end), and any whose entry changed.
    order = [key for key in before if key in ours]
    common = 0
    for key, was in zip(ours, order, strict=False):
        if key != was:
            break
        common += 1
    touched = {*list(ours)[common:], *(k for k, h in ours.items() if before.get(k) != h)}
    # One registry per head entry: absorb takes a validated Head.
    for key, raw in ours.items():
        if key in touched:
            head = next(iter(HeadRegistry.from_dict({"format": 1, "heads": [raw]})))
            merged.absorb(head, raw.get("owners", []))
    return merged.to_dict()


def _by_key(registry: Doc) -> dict[str, Doc]:
    return {head["key"]: head for head in registry["heads"]}


def _tenants(latest: Doc, mine: Doc, base: Doc, cls: type[Predictor]) -> Doc:
    out: Doc = {tag: learned for tag, learned in latest.items() if tag not in mine}
    for tag, learned in mine.items():
        out[tag] = _learned(latest.get(tag), learned, base.get(tag), cls)
    for tag in list(out)[: max(0, len(out) - MAX_TENANT_MODELS)]:
        del out[tag]
    return out
