"""The gateway's records of its live requests (:class:`Step`) and prefetches (:class:`Prefetch`),
in the shapes the runtime's figures read (``StepLike``, ``PrefillLike`` of
:mod:`agentwarm.stats.definitions`); the learner owns and fills them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agentwarm._spec import PrefetchKind

__all__ = ("Prefetch", "Step")


@dataclass(slots=True)
class Step:
    """One live request, as the figures see it (a ``StepLike``)."""

    node: str
    from_node: str
    prefetched: bool = False
    ttft_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefetched_tokens: int = 0


@dataclass(slots=True)
class Prefetch:
    """One speculative prefill (a ``PrefillLike``)."""

    node: str
    rid: str
    worker: str
    tokens: int
    session: str = ""
    source: str | None = None
    kind: str = PrefetchKind.SPECULATIVE
    outcome: str | None = None
    computed_tokens: int = 0
    ended: bool = False  # its request ended (or it was never sent): computed_tokens is final
    task: asyncio.Task[None] | None = field(default=None, repr=False)
