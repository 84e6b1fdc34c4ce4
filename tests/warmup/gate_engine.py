"""A test engine for explicit warms: it records every prefill (ids and params) and, unless
``auto``, holds each one until the test releases it or it is aborted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from opentelemetry.trace import SpanKind

from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    PrefillStatus,
)
from agentwarm.errors import EngineUnavailable


class GateEngine(Engine):
    provider_name = "test"
    span_kind = SpanKind.INTERNAL

    def __init__(self, *, auto: bool = True, fail: bool = False) -> None:
        self.auto = auto
        self.fail = fail
        self.calls: list[tuple[list[int], PrefillParams]] = []
        self.aborts: list[str] = []
        self._gates: dict[str, asyncio.Event] = {}

    def rid(self, i: int) -> str:
        return self.calls[i][1].rid

    def release(self, rid: str) -> None:
        self._gates.setdefault(rid, asyncio.Event()).set()

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        self.calls.append((list(ids), params))
        if self.fail:
            raise EngineUnavailable("the test engine is down")
        if not self.auto:
            await self._gates.setdefault(params.rid, asyncio.Event()).wait()
        aborted = params.rid in self.aborts
        return PrefillResult(
            rid=params.rid,
            prompt_tokens=len(ids),
            cached_tokens=0,
            computed_tokens=0 if aborted else len(ids),
            status=PrefillStatus.ABORTED if aborted else PrefillStatus.DONE,
        )

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        raise NotImplementedError

    async def abort(self, rid: str) -> None:
        self.aborts.append(rid)
        self.release(rid)

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(ids).decode(errors="replace")

    async def stats(self) -> EngineStats:
        return EngineStats(0, None, 0, 0, 0, 0, 0, 0)
