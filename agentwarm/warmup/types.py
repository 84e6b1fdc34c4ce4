"""What a warm-up warms: a plan of prefixes (the contract between the miner, the warmer, the
servers' readiness and keep-warm; warm-up prefills are of the kinds
:data:`~agentwarm._spec.WARM_UP_KINDS`).

A **plan** is a JSONL file, one prefix per line, most valuable first::

    {"messages": [...], "tools": [...], "share": 0.42, "tokens": 3849, "count": 21, "node": "x"}
    {"input_ids": [1, 2, 3], "share": 0.10, "tokens": 3, "count": 5}

* ``messages`` (+ optional ``tools``): an OpenAI chat prefix, rendered for a worker with the
  served model's chat template (:class:`~agentwarm.warmup.render.ChatRenderer`); or
  ``input_ids``: the token ids themselves (for plans mined from token logs). Exactly one of the
  two.
* ``share``: the fraction (0..1] of the mined requests that start with this prefix; ``tokens``:
  its length in tokens when it was mined; ``count``: how many mined requests start with it;
  ``node`` (optional): the node (request head) it belongs to, for people reading the plan;
  ``namespace`` (optional): the cache namespace to warm it in (a tenant's ``cache_salt``),
  else the warmer's.

Plans are reviewable text: :func:`save_plan` writes keys in a fixed order, one line per prefix,
and :func:`load_plan` names the file, line and field of anything wrong.

A plan line is checked as a chat request is (:mod:`agentwarm.chat.request`, the checks of
``POST /v1/chat/completions``): nesting at most :data:`~agentwarm.chat.request.MAX_DEPTH` deep,
roles, content and function tools, so that nothing a real request would be refused for is
warmed. :func:`load_plan` skips a bad line with one warning naming its line and why (at most
:data:`MAX_LINE_WARNINGS`, then one with the count) and keeps the rest; a plan none of whose
lines is usable, or a path that is not a regular file (a FIFO would block the reader forever, a
device never ends), is a :class:`~agentwarm.errors.ConfigError`, raised before anything is read.
"""

from __future__ import annotations

import json
import math
import os
import stat
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentwarm import _jsonfile
from agentwarm.chat import Message
from agentwarm.chat.request import chat_messages, check_depth, check_tools
from agentwarm.errors import ConfigError
from agentwarm.predictors.store import atomic_write

__all__ = (
    "MAX_LINE_WARNINGS",
    "Plan",
    "WarmPrefix",
    "load_plan",
    "plan_lines",
    "save_plan",
    "special_kind",
)

#: Most skipped lines of one plan warned about one by one (then one warning with the count).
MAX_LINE_WARNINGS = 10
_LINE_FORMAT = (
    'each line is {"messages": [...], "tools": [...]} or {"input_ids": [...]} with its '
    '"share", "tokens" and "count" (see agentwarm warmup plan)'
)


@dataclass(frozen=True, slots=True)
class WarmPrefix:
    """One prefix of a plan (see the module docstring for the fields)."""

    messages: tuple[Message, ...] | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    input_ids: tuple[int, ...] | None = None
    share: float = 1.0
    tokens: int = 0
    count: int = 1
    node: str | None = None
    #: The cache namespace to warm it in (SGLang's ``cache_salt``; a tenant's): ``None`` is the
    #: warmer's own (the live requests' namespace, ``""`` by default).
    namespace: str | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.input_ids is None):
            raise ValueError("a prefix has exactly one of 'messages' and 'input_ids'")
        if self.tools is not None and self.messages is None:
            raise ValueError("'tools' goes with 'messages', not with 'input_ids'")
        if not (0.0 < self.share <= 1.0) or not math.isfinite(self.share):
            raise ValueError(f"'share' must be in (0, 1], got {self.share!r}")
        if self.tokens < 0 or self.count < 1:
            raise ValueError("'tokens' must be >= 0 and 'count' >= 1")

    @property
    def value(self) -> float:
        """How much warming it is worth: share x length (the plan's order, highest first)."""
        return self.share * self.tokens

    def to_json(self) -> dict[str, Any]:
        """The plan line of this prefix (keys in a fixed order)."""
        out: dict[str, Any] = {}
        if self.messages is not None:
            out["messages"] = list(self.messages)
            if self.tools:
                out["tools"] = list(self.tools)
        else:
            out["input_ids"] = list(self.input_ids or ())
        out["share"] = round(self.share, 6)
        out["tokens"] = self.tokens
        out["count"] = self.count
        if self.node is not None:
            out["node"] = self.node
        if self.namespace is not None:
            out["namespace"] = self.namespace
        return out

    @classmethod
    def from_json(cls, data: Any) -> WarmPrefix:
        """Read one plan line's value; ``ValueError`` saying which field is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError("a plan line must be a JSON object")
        check_depth(data, "the line")
        messages = data.get("messages")
        if messages is not None and (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in messages)
        ):
            raise ValueError("'messages' must be a non-empty list of objects with a 'role'")
        tools = data.get("tools")
        if tools is not None and (
            not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools)
        ):
            raise ValueError("'tools' must be a list of objects")
        check_tools(tools)  # as a chat request's: what the server would refuse is not warmed
        if messages is not None:
            chat_messages(messages)
        ids = data.get("input_ids")
        if ids is not None and (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
        ):
            raise ValueError("'input_ids' must be a non-empty list of token ids (integers >= 0)")
        share, tokens, count = data.get("share", 1.0), data.get("tokens", 0), data.get("count", 1)
        if not isinstance(share, int | float) or isinstance(share, bool):
            raise ValueError("'share' must be a number")
        for name, number in (("tokens", tokens), ("count", count)):
            if not isinstance(number, int) or isinstance(number, bool):
                raise ValueError(f"{name!r} must be an integer")
        node = data.get("node")
        namespace = data.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise ValueError("'namespace' must be a string (the cache namespace to warm it in)")
        if node is not None and not isinstance(node, str):
            raise ValueError("'node' must be a string")
        return cls(
            messages=tuple(dict(m) for m in messages) if messages is not None else None,
            tools=tuple(dict(t) for t in tools) if tools else None,
            input_ids=tuple(ids) if ids is not None else None,
            share=float(share),
            tokens=tokens,
            count=count,
            node=node,
            namespace=namespace,
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """The prefixes to warm, most valuable first."""

    prefixes: tuple[WarmPrefix, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.prefixes)

    def __iter__(self) -> Any:
        return iter(self.prefixes)


def plan_lines(prefixes: Iterable[WarmPrefix]) -> list[str]:
    """The plan's JSONL lines (no newline), deterministic: fixed key order, sorted object keys
    inside messages and tools, UTF-8 kept."""
    return [
        json.dumps(p.to_json(), ensure_ascii=False, separators=(",", ":"), sort_keys=False)
        for p in prefixes
    ]


def save_plan(plan: Plan | Sequence[WarmPrefix], path: Path) -> None:
    """Write ``plan`` to ``path`` (JSONL, one prefix per line), atomically: a reader (a server
    loading it, a cron job's next run) sees the old plan or the new one, never part of one."""
    prefixes = plan.prefixes if isinstance(plan, Plan) else tuple(plan)
    lines = plan_lines(prefixes)
    atomic_write(path, "".join(line + "\n" for line in lines).encode("utf-8"))


def load_plan(path: Path) -> Plan:
    """Read a plan: a bad line is skipped with a warning naming the line and why (see the
    module docstring). :class:`~agentwarm.errors.ConfigError` naming the file (and the line)
    when the path is not a readable regular file or no line of it is usable."""
    make = "make one with 'agentwarm warmup plan --from TRACES_OR_LOGS... -o PLAN'"
    try:
        kind = special_kind(path)
        if kind is not None:
            raise ConfigError(
                f"warm-up plan {path}: is not a regular file ({kind}); give the plan's JSONL "
                f"file ({make})"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"warm-up plan {path}: cannot read it ({exc.strerror or exc}); {make}"
        ) from None
    prefixes: list[WarmPrefix] = []
    problems: list[str] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            prefixes.append(WarmPrefix.from_json(_jsonfile.loads(line)))
        except ValueError as exc:  # JSONTextError is a ValueError
            problems.append(f"line {number}: {exc}")
    if problems and not prefixes:
        raise ConfigError(
            f"warm-up plan {path}: no usable line ({problems[0]}"
            f"{f', and {len(problems) - 1} more' if len(problems) > 1 else ''}); {_LINE_FORMAT}"
        )
    for problem in problems[:MAX_LINE_WARNINGS]:
        where, _, reason = problem.partition(": ")
        warnings.warn(f"warm-up plan {path}, {where} skipped: {reason}", UserWarning, stacklevel=2)
    if len(problems) > MAX_LINE_WARNINGS:
        warnings.warn(
            f"warm-up plan {path}: {len(problems)} lines skipped in all "
            f"(the first {MAX_LINE_WARNINGS} named above)",
            UserWarning,
            stacklevel=2,
        )
    return Plan(tuple(prefixes))


def special_kind(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file (``"a directory"``, ``"a FIFO"``, ...),
    in words; ``None`` for a regular file. Reads only its ``stat`` (never blocks, unlike
    opening a FIFO); ``OSError`` when there is none."""
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a plain file")
