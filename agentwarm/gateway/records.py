"""The gateway's records of its live requests (:class:`Step`) and prefetches (:class:`Prefetch`),
in the shapes the runtime's figures read (``StepLike``, ``PrefillLike`` of
:mod:`agentwarm.stats.definitions`); the learner owns and fills them, and :func:`figures` reads
them."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentwarm._spec import PrefetchKind
from agentwarm.stats.definitions import summarize_steps

__all__ = ("Prefetch", "Step", "figures", "hit_cached_fraction")


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
    #: The namespace (tenant) it is sent in: its session's; kept in memory only.
    namespace: str = field(default="", repr=False)
    task: asyncio.Task[None] | None = field(default=None, repr=False)


def hit_cached_fraction(steps: Iterable[Step]) -> float | None:
    """Checked against the upstream: how much of the hits' prefetched prefixes it found cached
    (``None`` without a hit that prefetched tokens)."""
    hits = [s for s in steps if s.prefetched and s.ttft_s is not None]
    prefetched = sum(s.prefetched_tokens for s in hits)
    if not prefetched:
        return None
    return sum(min(s.cached_tokens, s.prefetched_tokens) for s in hits) / prefetched


def figures(
    steps: Collection[Step], prefetches: Collection[Prefetch], *, runs: int
) -> dict[str, Any]:
    """The gateway's figures over these records: the runtime's definitions
    (:func:`~agentwarm.stats.definitions.summarize_steps`) and :func:`hit_cached_fraction`."""
    summary = summarize_steps(list(steps), list(prefetches), workflow="gateway", runs=runs)
    return {**summary.to_dict(), "hit_cached_fraction": hit_cached_fraction(steps)}
