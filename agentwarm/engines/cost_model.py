"""The :class:`~agentwarm.engines.fake.FakeEngine`'s step runner: a cost model that computes
nothing.

The embedded engine's :class:`~agentwarm.engines.local.scheduler.Scheduler` drives it as it
drives the torch runner: steps only move token counts (the fake cache stores no payloads), and
each request's output is a pseudo-random run of lowercase words that depends only on its prompt
ids (and ``seed`` when ``temperature > 0``), so a run is reproducible and outputs are identical
with or without prefetching. How long a step takes is the engine's business (its
``seconds_per_token`` and ``seconds_per_output_token``); a step whose wait the engine cut short
is marked on the request's state (``cut``), and the model then interrupts the chunk if the
scheduler asks it to yield.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any

from agentwarm.engines.local.scheduler import ChunkInterrupted, Request, StepRunner

__all__ = ("CostModel",)

_LETTERS = "abcdefghijklmnopqrstuvwxyz     "


class _State:
    """A request's processed tokens, as far as a cost model knows them."""

    __slots__ = ("cut", "length", "output")

    def __init__(self, length: int) -> None:
        self.length = length
        self.cut = False  # the worker's wait for this step was cut short (priority, close)
        self.output: list[int] | None = None

    def kv(self, start: int, stop: int) -> None:
        return None  # the fake cache stores no payloads


class CostModel(StepRunner):
    """The fake's StepRunner: steps only move token counts; outputs come from the prompt ids."""

    def __init__(self, max_context: int, decode: Callable[[Sequence[int]], str]) -> None:
        self.max_context = max_context
        self._decode = decode

    def new_state(self, req: Request, values: tuple[Any, ...], length: int) -> _State:
        return _State(length)

    def extend(
        self,
        state: _State,
        ids: Sequence[int],
        *,
        want_logits: bool,
        interrupt: Any,
    ) -> None:
        if state.cut:
            state.cut = False
            if interrupt is not None and interrupt():
                raise ChunkInterrupted
        state.length += len(ids)

    def decode_step(self, state: _State, token: int) -> None:
        state.length += 1

    def text(self, ids: Sequence[int]) -> str:
        return self._decode(ids)

    def sample(self, req: Request, logits: None) -> int:
        state: _State = req.state
        if state.output is None:
            state.output = _output(req.ids, req.max_tokens, req.temperature, req.seed)
        return state.output[len(req.output)]


def _output(ids: tuple[int, ...], n: int, temperature: float, seed: int | None) -> list[int]:
    tail = ids[-4096:]
    try:
        key = bytes(tail)
    except ValueError:  # an id outside 0..255
        key = bytes(i & 0xFF for i in tail)
    digest = hashlib.blake2b(key, digest_size=8).digest()
    rng = random.Random(int.from_bytes(digest, "big") ^ (seed or 0 if temperature > 0 else 0))
    return [ord(rng.choice(_LETTERS)) for _ in range(n)]
