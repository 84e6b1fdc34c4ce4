"""What the warm-ups in a trace did: per warm-up kind (:data:`~agentwarm._spec.WARM_UP_KINDS`:
``static``, ``keep_warm``, ``explicit``), the prefills sent, the tokens they wrote into the
cache and those that were already cached when the warm-up ran (not a hosted API's cache-read
ratio: these are the warm-up's own prefills, not the live requests).

Read from ``agentwarm.prefill`` spans whose kind is a warm-up kind (workflow ``warmup``,
usually without a run span). Warm-ups are not speculation: they never count as prefetches, in
the acceptance ratio or in the wasted tokens (:mod:`~agentwarm.stats.definitions` counts only
kind ``speculative``).

Per kind:

* *prefills*: warm-up prefills sent to an engine (outcome not ``dropped``); *dropped*: skipped
  before sending (over the warm-up's token budget); *failed*: the engine failed them.
* *tokens*: tokens of the prefixes sent; *written*: tokens the engine computed for them
  (``agentwarm.prefill.computed_tokens``: KV written into the cache); *already cached*: tokens
  of the completed ones (outcome ``hit``) that were cached already when the warm-up ran
  (``tokens - computed_tokens``: a keep-warm pass over a cache that held everything writes
  nothing, all of it already cached).

What spans cannot say: which live request later read which warmed token. A step span holds its
``cached_tokens`` but not the prompt, so the share of live cached tokens that came from each
warm-up kind cannot be attributed exactly; :attr:`WarmUpStats.to_dict` reports what was
measured, and ``agentwarm stats`` shows it next to the live cached tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from agentwarm._spec import WARM_UP_KINDS, PrefetchKind, PrefetchOutcome
from agentwarm.stats.definitions import PrefillLike

__all__ = ("SizedPrefill", "WarmUpStats", "is_warm_up", "warm_up_stats")

#: The order kinds are reported in.
_ORDER = (PrefetchKind.STATIC, PrefetchKind.KEEP_WARM, PrefetchKind.EXPLICIT)


#: The counters of :class:`WarmUpStats`.
_COUNTS = ("prefills", "dropped", "failed", "tokens", "written_tokens", "already_cached_tokens")


class SizedPrefill(PrefillLike, Protocol):
    """A prefill with its length (``stats.traces.PrefillSpan`` qualifies)."""

    @property
    def tokens(self) -> int: ...


def is_warm_up(prefill: PrefillLike) -> bool:
    """Whether ``prefill`` is a warm-up (not tied to a step of a run)."""
    return prefill.kind in WARM_UP_KINDS


@dataclass(frozen=True, slots=True)
class WarmUpStats:
    """The warm-ups of one kind (module docstring)."""

    kind: PrefetchKind
    prefills: int = 0
    dropped: int = 0
    failed: int = 0
    tokens: int = 0
    written_tokens: int = 0
    already_cached_tokens: int = 0

    @property
    def already_cached_ratio(self) -> float | None:
        """already cached / (already cached + written): the share of the warmed tokens that
        were cached already when the warm-up ran; ``None`` when there were none."""
        total = self.already_cached_tokens + self.written_tokens
        return self.already_cached_tokens / total if total else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "prefills": self.prefills,
            "dropped": self.dropped,
            "failed": self.failed,
            "tokens": self.tokens,
            "written_tokens": self.written_tokens,
            "already_cached_tokens": self.already_cached_tokens,
            "already_cached_ratio": self.already_cached_ratio,
        }


def warm_up_stats(prefills: Iterable[SizedPrefill]) -> list[WarmUpStats]:
    """One :class:`WarmUpStats` per warm-up kind present in ``prefills`` (static, keep_warm,
    explicit order); other prefills are ignored."""
    counts: dict[str, dict[str, int]] = {}
    for p in prefills:
        if not is_warm_up(p):
            continue
        c = counts.setdefault(str(p.kind), dict.fromkeys(_COUNTS, 0))
        if p.outcome == PrefetchOutcome.DROPPED:
            c["dropped"] += 1
            continue
        c["prefills"] += 1
        c["failed"] += p.outcome == PrefetchOutcome.FAILED
        c["tokens"] += p.tokens
        c["written_tokens"] += p.computed_tokens
        if p.outcome == PrefetchOutcome.HIT:
            c["already_cached_tokens"] += max(0, p.tokens - p.computed_tokens)
    return [WarmUpStats(kind, **counts[kind]) for kind in _ORDER if kind in counts]
