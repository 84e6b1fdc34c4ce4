"""``@node``: declare one step of a workflow."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, overload

from agentwarm._spec import END, START, NodeFn, NodeSpec
from agentwarm.errors import GraphValidationError

__all__ = ("check_timeout", "node")


def _check_next(name: str, next_: object) -> tuple[str, ...]:
    if next_ is None:
        return ()
    if isinstance(next_, str) or not isinstance(next_, Sequence):
        hint = f"; write next=[{next_!r}]" if isinstance(next_, str) else ""
        raise GraphValidationError(
            f"Node '{name}': next={next_!r} must be a list of node names (or END){hint}",
            node=name,
        )
    bad = [n for n in next_ if not isinstance(n, str) or not n]
    if bad:
        raise GraphValidationError(
            f"Node '{name}': next contains {bad!r}; every successor must be a node name "
            "(a non-empty string) or END",
            node=name,
        )
    if len(set(next_)) != len(next_):
        raise GraphValidationError(f"Node '{name}': next lists a successor twice", node=name)
    return tuple(next_)


def _check_tools(name: str, tools: object) -> tuple[dict[str, Any], ...]:
    if tools is None:
        return ()
    if not isinstance(tools, Sequence) or isinstance(tools, str | bytes):
        raise GraphValidationError(
            f"Node '{name}': tools must be a list of OpenAI-style tool schemas (dicts)", node=name
        )
    for tool in tools:
        if not isinstance(tool, dict):
            raise GraphValidationError(
                f"Node '{name}': tool {tool!r} is not a dict; give OpenAI-style JSON schemas "
                '({"type": "function", "function": {"name": ..., "parameters": ...}})',
                node=name,
            )
    return tuple(tools)


def _check_hints(name: str, hints: object, next_: tuple[str, ...]) -> dict[str, str]:
    if hints is None:
        return {}
    if not isinstance(hints, Mapping):
        raise GraphValidationError(
            f"Node '{name}': hints={hints!r} must map a route keyword to a successor, e.g. "
            'hints={"refund": "refunds"}',
            node=name,
        )
    for keyword, target in hints.items():
        if not isinstance(keyword, str) or not keyword.strip():
            raise GraphValidationError(
                f"Node '{name}': hints has the keyword {keyword!r}; a keyword is a non-empty "
                "string",
                node=name,
            )
        if not isinstance(target, str) or target == END or target not in next_:
            raise GraphValidationError(
                f"Node '{name}': hints[{keyword!r}] = {target!r} is not one of its declared "
                f"successors {list(next_)} (END excluded: it has no prompt to prefetch); "
                "add it to next=[...] or name a declared successor",
                node=name,
            )
    return dict(hints)


def check_timeout(what: str, value: object, *, node: str | None = None) -> float | None:
    """``value`` as a step time limit in seconds (a positive finite number, or None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise GraphValidationError(
            f"{what}={value!r} must be a positive number of seconds (or None for no limit)",
            node=node,
        )
    return float(value)


@overload
def node(fn: NodeFn, /) -> NodeSpec: ...


@overload
def node(
    *,
    name: str | None = None,
    system: str = "",
    tools: Sequence[dict[str, Any]] | None = None,
    next: Sequence[str] | None = None,
    entry: bool = False,
    join: bool = False,
    max_tokens: int = 64,
    timeout_s: float | None = None,
    hints: Mapping[str, str] | None = None,
) -> Callable[[NodeFn], NodeSpec]: ...


def node(
    fn: NodeFn | None = None,
    /,
    *,
    name: str | None = None,
    system: str = "",
    tools: Sequence[dict[str, Any]] | None = None,
    next: Sequence[str] | None = None,
    entry: bool = False,
    join: bool = False,
    max_tokens: int = 64,
    timeout_s: float | None = None,
    hints: Mapping[str, str] | None = None,
) -> NodeSpec | Callable[[NodeFn], NodeSpec]:
    """Declare a workflow step.

    The decorated function takes a :class:`~agentwarm.Context` and returns the name of the next
    node, a list of names (run concurrently), ``END``, or ``None`` (allowed only when ``next``
    declares exactly one successor). It may be ``async def`` (preferred) or a plain function.

    ``next`` declares the possible successors: the graph is validated against it and the
    predictor's prior is spread over it. ``join=True`` marks a fan-in node: after a fan-out it
    runs once, when every concurrent branch has reached it. ``timeout_s`` limits how long one
    step of this node may take (its LLM calls included); past it the run fails with
    :class:`~agentwarm.errors.StepTimeout` (default: the workflow's ``step_timeout_s``).
    ``hints`` maps route keywords to declared successors (``{"refund": "refunds"}``): when the
    node's streamed LLM output says the keyword (a whole word, any case), that successor is
    prefetched at once, before the step returns; a successor's own name, a tool call's name
    and ``transfer_to_<successor>`` need no declaration.
    """

    def wrap(f: NodeFn) -> NodeSpec:
        if not callable(f):
            raise GraphValidationError(f"@node must decorate a function, got {f!r}")
        node_name = name or getattr(f, "__name__", None)
        if not node_name or node_name in (END, START):
            raise GraphValidationError(
                f"@node on {f!r}: give it a name=... (reserved or missing name {node_name!r})"
            )
        next_nodes = _check_next(node_name, next)
        return NodeSpec(
            name=node_name,
            fn=f,
            system=system,
            tools=_check_tools(node_name, tools),
            next=next_nodes,
            entry=entry,
            join=join,
            max_tokens=max_tokens,
            timeout_s=check_timeout(f"Node '{node_name}': timeout_s", timeout_s, node=node_name),
            hints=_check_hints(node_name, hints, next_nodes),
            module=getattr(f, "__module__", None),
        )

    if fn is not None:
        return wrap(fn)
    return wrap
