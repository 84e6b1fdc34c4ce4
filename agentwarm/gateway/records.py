"""The gateway's records of its live requests (:class:`Step`) and prefetches (:class:`Prefetch`),
in the shapes the runtime's figures read (``StepLike``, ``PrefillLike`` of
:mod:`agentwarm.stats.definitions`); the learner owns and fills them, and :func:`figures` reads
them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentwarm._spec import Miss, MissReason, PrefetchKind
from agentwarm.stats.definitions import summarize_steps

__all__ = ("Prefetch", "Step", "figures", "hit_cached_fraction")


@dataclass(slots=True)
class Step:
    """One live request, as the figures see it (a ``StepLike``); ``miss`` says why it missed
    (or, a hit, did not find its whole prefetched prefix cached: :meth:`hit`)."""

    node: str
    from_node: str
    prefetched: bool = False
    ttft_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefetched_tokens: int = 0
    miss: Miss | None = None

    @property
    def miss_reason(self) -> MissReason | None:
        return self.miss.reason if self.miss is not None else None

    def hit(self, pf: Prefetch, points: Sequence[str]) -> None:
        """``pf`` made this request a branch hit; ``points`` is the request's conversation
        (:func:`~agentwarm.gateway.sessions.chain`). A prefetch whose conversation is not a
        prefix of it is a ``prefix_mismatch`` (``message``: the first message that differs);
        one still running is ``late``. The tokens it missed are known once it is answered."""
        self.prefetched, self.prefetched_tokens = True, pf.tokens
        pairs = enumerate(zip(pf.points, points, strict=False))
        k = next((i for i, (a, b) in pairs if a != b), None)
        if k is None and len(pf.points) > len(points):
            k = len(points)
        if k is not None:
            self.miss = Miss(MissReason.PREFIX_MISMATCH, cause="message", message=k)
        elif pf.task is not None and not pf.task.done():
            self.miss = Miss(MissReason.LATE, cause="running")

    def answered(self, ttft_s: float | None, prompt_tokens: int, cached_tokens: int) -> None:
        """The upstream answered: the request's figures (and a short hit's missing tokens)."""
        self.ttft_s, self.prompt_tokens, self.cached_tokens = ttft_s, prompt_tokens, cached_tokens
        if self.miss is not None and self.prefetched:
            missing = max(0, self.prefetched_tokens - cached_tokens)
            self.miss = dataclasses.replace(self.miss, missing_tokens=missing)


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
    #: The rolling digests of the conversation it prefetched (the prompt after its head).
    points: Sequence[str] = field(default=(), repr=False)
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
