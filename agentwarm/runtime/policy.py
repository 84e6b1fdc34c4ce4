"""Prefetch policy: how much to speculate, and when to back off."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentwarm.runtime.timing import TimingMode

__all__ = ("PrefetchPolicy",)


class PrefetchPolicy(BaseModel):
    """Knobs of speculative prefetching (DESIGN §5). Immutable; copy with ``model_copy``.

    Candidates for the next step are the predictor's top ``top_n`` successors with probability
    at least ``min_p``, within ``max_prefetch_tokens`` prompt tokens per step. The guardrail
    tracks an EWMA of the *branch hit rate* (was the actual next node among the candidates?);
    below ``guardrail_threshold`` it raises ``min_p`` to ``cautious_min_p`` and keeps one
    candidate, below ``pause_below`` it pauses speculation; it restores each level once the EWMA
    is ``hysteresis`` above its bound again. Predictions keep being scored while paused, so
    recovery is observed without speculating.

    ``timing`` picks the moment (see :mod:`agentwarm.runtime.timing`): ``auto`` (default)
    speculates right after a step's first LLM call for nodes that call the LLM and at step start
    for nodes that do not; ``step_start`` and ``after_llm`` force one moment.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    top_n: int = Field(default=2, ge=1, le=16)
    min_p: float = Field(default=0.05, ge=0.0, le=1.0)
    max_prefetch_tokens: int = Field(default=65_536, ge=1)
    capacity_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    max_prefills_per_s: float = Field(default=64.0, gt=0.0)
    prefill_timeout_s: float = Field(default=30.0, gt=0.0)
    timing: TimingMode = "auto"
    warm_confirmed: bool = True
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
        return self

    @classmethod
    def disabled(cls) -> PrefetchPolicy:
        """No speculation at all: the reactive baseline."""
        return cls(enabled=False, warm_confirmed=False)
