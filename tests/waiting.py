"""Waiting in tests: on a condition, with a deadline; never for a fixed time.

CI runs on shared cores, where "sleep a little, then it will have happened" flakes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentwarm import Context

#: Generous: a condition that holds within milliseconds on an idle machine.
DEFAULT_TIMEOUT_S = 20.0
_INTERVAL_S = 0.002


async def until(
    condition: Callable[[], Any | Awaitable[Any]],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "the condition",
) -> None:
    """Poll ``condition`` (sync or async) until it is truthy; ``TimeoutError`` past the
    deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        await asyncio.sleep(_INTERVAL_S)


def wait_until(
    condition: Callable[[], Any],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "the condition",
) -> None:
    """The blocking twin of :func:`until`, for tests that wait on another process or thread
    (a marker file, a server's state); ``TimeoutError`` past the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        time.sleep(_INTERVAL_S)


async def step_prefetches_done(ctx: Context, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Inside a node: until every prefetch request the current step has sent so far ended.

    Stands for a tool call that lasts as long as the prefetch, whatever the scheduling.
    """

    def done() -> bool:
        return ctx.prefetches_running == 0

    await until(done, timeout_s=timeout_s, what="the step's prefetches to finish")
