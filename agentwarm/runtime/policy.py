"""Prefetch policy: how much to speculate, and when to back off."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentwarm._spec import END
from agentwarm.runtime.timing import TimingMode

__all__ = ("PrefetchPolicy", "SpendMode", "choose_candidates")

#: How a step picks its candidates: ``value`` (expected value, :mod:`agentwarm.runtime.prefetch.
#: spend`) or ``top_n`` (the first ``top_n`` above ``min_p``: :func:`choose_candidates`).
SpendMode = Literal["value", "top_n"]


class PrefetchPolicy(BaseModel):
    """Knobs of speculative prefetching (DESIGN §5). Immutable; copy with ``model_copy``.

    Candidates for the next step are the predictor's most likely successors, in order: at most
    ``top_n``, each with probability at least ``min_p``, and no more once the chosen ones cover
    ``top_p`` of the probability (as in nucleus sampling), within ``max_prefetch_tokens`` prompt
    tokens per step. Candidates are sent in that order at speculative priority, which engines
    serve first come, first served below live requests: lower-ranked candidates use engine time
    the likelier ones leave idle, and a live request never waits behind them for more than one
    prefill chunk (one layer on the embedded engine). The defaults (6 candidates, ``min_p``
    0.02) come from ``agentwarm bench --profile full``: on tau2 trajectories the top 2 hold the
    true next tool ~71% of the time, the top 6 ~96%, and a candidate that was prefetched in an
    earlier step costs only the transcript's new tokens.

    ``spend`` decides how many of those to send. ``top_n``: all of them. ``value`` (default):
    only those worth their cost (:mod:`agentwarm.runtime.prefetch.spend` gives the arithmetic).
    A candidate of probability ``p`` whose prefill computes ``n`` new tokens saves ``p * n``
    live tokens in expectation and wastes ``(1 - p) * n``; a wasted token costs ``idle_price``
    while the engine would otherwise be idle (before the next live request is expected: only
    other tenants of a shared GPU lose it) and ``busy_price`` beyond that (it delays live
    work). A candidate is sent when ``p >= price / (1 + price)``: with the defaults 0.1 and 1.0,
    ``p >= 0.091`` within the idle window and ``p >= 0.5`` past it. ``top_n`` and ``min_p`` stay
    a cap and a floor in both modes. With ``fill_idle``, on an engine whose live requests preempt
    speculation (the embedded engine), a candidate that starts inside the window is priced idle
    in full (the next live request overtakes its tokens past the window), and what the window
    held back is sent, one candidate at a time at ``idle_price``, once the step's speculation
    has finished before its next live call.

    The guardrail tracks an EWMA of the *branch hit rate* (was the actual next node among the
    candidates?); below ``guardrail_threshold`` it raises ``min_p`` to ``cautious_min_p`` and
    keeps one candidate, below ``pause_below`` it pauses speculation; it restores each level
    once the EWMA is ``hysteresis`` above its bound again. Predictions keep being scored while
    paused, so recovery is observed without speculating. The guardrail of a run and of the
    gateway (:class:`~agentwarm.runtime.guardrail.CalibratedGuardrail`) compares the same
    bounds with the hits over the probability its choice promised, a step scored on what it
    sent and what a tightened guardrail held back.

    Speculative prefills are admitted per engine, shared by every run on it
    (:mod:`agentwarm.runtime.admission`): at most ``max_prefills_per_s`` (0 admits none) and
    ``max_speculative_in_flight`` at a time, within ``capacity_fraction`` of the engine's cache.
    Admission never waits: over the rate or budget, the prefetch of the lowest probability is
    dropped (outcome ``dropped``), so a live step never waits for speculation.

    ``timing`` picks the moment (see :mod:`agentwarm.runtime.timing`): ``auto`` (default)
    speculates right after a step's first LLM call for nodes that call the LLM and at step start
    for nodes that do not; ``step_start`` and ``after_llm`` force one moment.

    With ``warm_confirmed``, once a step has chosen its next node, that node's full known prefix
    is sent at once (a *confirmed* warm-up, live priority, not speculation), unless a speculative
    hit already sent the very same tokens, or the node has been seen to call the LLM within
    ``warm_min_lead_s`` of its step start (the warm-up would reach the engine together with the
    live request and only add a request). Nodes seen not to call the LLM are neither prefetched
    nor warmed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    top_n: int = Field(default=6, ge=1, le=16)
    min_p: float = Field(default=0.02, ge=0.0, le=1.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_prefetch_tokens: int = Field(default=65_536, ge=1)
    capacity_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    max_prefills_per_s: float = Field(default=64.0, ge=0.0)
    max_speculative_in_flight: int = Field(default=64, ge=1)
    prefill_timeout_s: float = Field(default=30.0, gt=0.0)
    timing: TimingMode = "auto"
    spend: SpendMode = "value"
    idle_price: float = Field(default=0.1, ge=0.0, allow_inf_nan=False)
    """Cost of one wasted token prefilled while the engine would be idle (0: free)."""
    busy_price: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    """Cost of one wasted token prefilled when live work is expected (1: a live token's)."""
    fill_idle: bool = True
    """With ``spend="value"``, on an engine whose live requests preempt speculation
    (``Engine.preempts_speculation``: the embedded engine): price a candidate that starts inside
    the idle window at ``idle_price`` in full, and once a step's speculation has all finished
    before its next live call, send the likeliest candidate left that is worth it at
    ``idle_price``, one at a time, however small the expected window was."""
    warm_confirmed: bool = True
    warm_min_lead_s: float = Field(default=0.001, ge=0.0)
    refresh_after_llm: bool = True
    use_output_hints: bool = True
    guardrail_threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    pause_below: float = Field(default=0.3, ge=0.0, le=1.0)
    cautious_min_p: float = Field(default=0.3, ge=0.0, le=1.0)
    ewma_alpha: float = Field(default=0.1, gt=0.0, le=1.0)
    hysteresis: float = Field(default=0.05, ge=0.0, le=0.5)

    @model_validator(mode="after")
    def _check_bounds(self) -> PrefetchPolicy:
        if self.pause_below > self.guardrail_threshold:
            raise ValueError(
                f"pause_below ({self.pause_below}) must not exceed guardrail_threshold "
                f"({self.guardrail_threshold})"
            )
        if self.idle_price > self.busy_price:
            raise ValueError(
                f"idle_price ({self.idle_price}) must not exceed busy_price ({self.busy_price}): "
                "a token of idle engine time costs at most one that delays live work"
            )
        return self

    @classmethod
    def disabled(cls) -> PrefetchPolicy:
        """No speculation at all: the reactive baseline."""
        return cls(enabled=False, warm_confirmed=False)


def choose_candidates(
    predictions: Sequence[tuple[str, float]], *, top_n: int, min_p: float, top_p: float = 1.0
) -> list[tuple[int, str, float]]:
    """The successors to prefetch, as ``(rank, name, probability)`` in predicted order.

    ``END`` is never a candidate (there is no prompt to prefill) but its probability counts
    toward ``top_p``: if the workflow likely ends, fewer candidates are worth their cost.
    """
    chosen: list[tuple[int, str, float]] = []
    covered = 0.0
    for rank, (name, p) in enumerate(predictions):
        if len(chosen) >= top_n or covered >= top_p - 1e-9:
            break
        covered += p
        if name != END and p >= min_p:
            chosen.append((rank, name, p))
    return chosen
