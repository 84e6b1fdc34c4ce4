"""Shared by the tests of pins and keep-warm on the embedded engine: a fake clock for the radix
cache, the tiny model, prompts that share nothing, and what the cache holds of a prompt."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from functools import cache
from typing import TypeVar

from agentwarm.engines.local import LocalEngine
from agentwarm.engines.local.model import LoadedModel, load_model
from agentwarm.warmup.keepwarm import KeepWarm
from tests.waiting import until

T = TypeVar("T")


class Clock:
    """A clock moved by the test (the radix cache's, or the keep-warm loop's)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Ticks:
    """The keep-warm loop's ``wait`` and ``clock``: a wait returns when the test says so, and
    moves the clock by what it waited."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.clock = Clock()
        self._go: asyncio.Queue[None] = asyncio.Queue()

    async def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self._go.get()
        self.clock.now += seconds

    async def tick(self, keep: KeepWarm) -> None:
        """Let one wait end; return once the loop handled that tick."""
        done = keep.ticks + 1
        self._go.put_nowait(None)
        await until(lambda: keep.ticks == done, what=f"keep-warm tick {done}")


@cache
def tiny() -> LoadedModel:
    return load_model("tiny", seed=0)


def prompt(first: int, n: int) -> list[int]:
    """``n`` tokens starting with ``first``: prompts with different first tokens share nothing."""
    rng = random.Random(first)
    return [first, *(rng.randrange(10, 256) for _ in range(n - 1))]


async def on_worker(engine: LocalEngine, fn: Callable[[], T]) -> T:
    """``fn()`` on the engine's worker thread."""
    return await asyncio.wrap_future(engine.scheduler.call(fn))


async def cached(engine: LocalEngine, ids: list[int]) -> int:
    """How many leading tokens of ``ids`` the cache holds now (the lookup refreshes their LRU
    time: the tests make pressure that evicts every unpinned token, whatever the LRU order)."""
    return await on_worker(engine, lambda: engine.cache.match_prefix("", ids).length)
