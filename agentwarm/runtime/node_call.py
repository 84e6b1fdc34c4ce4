"""Calling one node function under the step's limits (an ``async def`` on the loop, a plain
function in its own daemon thread), and reading what it returned as its next node(s)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentwarm.errors import StepTimeout, WorkflowError

if TYPE_CHECKING:
    from agentwarm._spec import NodeSpec
    from agentwarm.runtime.context import Context

__all__ = ("SYNC_THREAD_PREFIX", "call_node", "next_nodes", "timed_out")

#: Name prefix of the thread a sync node runs in (followed by the node's name).
SYNC_THREAD_PREFIX = "agentwarm-node:"


async def call_node(spec: NodeSpec, ctx: Context) -> object:
    """Call a node function: ``async def`` on the loop, a plain function in its own daemon
    thread (the loop keeps prefetching meanwhile). A cancelled or timed-out sync node's thread
    cannot be stopped: it is abandoned, and being a daemon it never holds up the process's exit
    (the default executor's threads would, after Ctrl-C)."""
    if spec.is_async:
        return await spec.fn(ctx)  # type: ignore[misc]
    loop = asyncio.get_running_loop()
    future: asyncio.Future[object] = loop.create_future()
    context = contextvars.copy_context()  # keeps the step's span current in the thread

    def settle(value: object, error: BaseException | None) -> None:
        if future.done():  # the step was cancelled or timed out meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def target() -> None:
        value: object = None
        error: BaseException | None = None
        try:
            value = context.run(spec.fn, ctx)
        except BaseException as exc:  # handed to the awaiting step, re-raised there
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=target, name=f"{SYNC_THREAD_PREFIX}{spec.name}", daemon=True).start()
    result = await future
    if inspect.isawaitable(result):
        result = await result
    return result


def timed_out(spec: NodeSpec, limit: float) -> StepTimeout:
    where = (
        "its @node(timeout_s=...)"
        if spec.timeout_s is not None
        else "the workflow's step_timeout_s / --step-timeout"
    )
    abandoned = "" if spec.is_async else "; its thread (a sync node) is abandoned, still running"
    return StepTimeout(
        f"Node '{spec.name}' ran past the step time limit of {limit:g} s ({where}); the run "
        f"was stopped and the step's prefetches cancelled{abandoned}",
        node=spec.name,
        limit_s=limit,
    )


def next_nodes(node: str, result: object, declared: list[str]) -> list[str]:
    """The next node(s) named by what ``node`` returned (``result``), checked against its
    ``declared`` successors: ``None`` means the only one; a name or a list of names, each
    declared (duplicates dropped, order kept)."""
    if result is None:
        if len(declared) == 1:
            return declared
        raise WorkflowError(
            f"Node '{node}' returned None but declares several successors {declared}; "
            "return the name of the next node (or END)"
        )
    names: Sequence[object]
    names = [result] if isinstance(result, str) else result  # type: ignore[assignment]
    if not isinstance(names, list | tuple) or not names:
        raise WorkflowError(
            f"Node '{node}' returned {result!r}; return a node name, a non-empty list of "
            "names, or END"
        )
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or name not in declared:
            raise WorkflowError(
                f"Node '{node}' returned {name!r}, which is not one of its declared "
                f"successors {declared}; add it to next=[...] or return one of them"
            )
        if name not in out:
            out.append(name)
    return out
