"""What a run records: one :class:`StepRecord` per executed step, with the
:class:`PrefetchRecord` of each prefill issued during it.

Their outcome and kind fields take the shared vocabulary of :mod:`agentwarm._spec`
(:class:`~agentwarm._spec.StepOutcome`, :class:`~agentwarm._spec.PrefetchOutcome`,
:class:`~agentwarm._spec.PrefetchKind`). "Confirmed" warm-ups (the actual next node's prefix,
sent once it is known) are not speculation: they are recorded but excluded from the prefetch
counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentwarm._spec import Miss, MissReason, PrefetchKind, PrefetchOutcome, StepOutcome
from agentwarm.engines.types import Completion
from agentwarm.stats.definitions import step_outcome

__all__ = ("PrefetchRecord", "StepRecord")


@dataclass(slots=True)
class PrefetchRecord:
    """One prefill issued during a step, for one target node."""

    target: str
    probability: float
    rank: int
    kind: PrefetchKind
    tokens: int
    computed_tokens: int = 0
    outcome: PrefetchOutcome | None = None
    """``None`` until the prefill has ended."""
    issued_after_s: float = 0.0
    requests: int = 0
    refused: str | None = None
    """What refused it, when admission or the step's budget did (``rate``, ``in_flight``,
    ``tokens``, ``step_budget``): the cause of its ``dropped`` outcome."""
    filled: bool = False
    """Sent to fill idle time once the step's other speculation had finished (``fill_idle``),
    not by the step's first choice."""

    @property
    def speculative(self) -> bool:
        """Whether this is a prefetch (a guess), not the warming of the known next node."""
        return self.kind == PrefetchKind.SPECULATIVE


@dataclass(slots=True)
class StepRecord:
    """One executed step. TTFT and token counts are of the step's first LLM call.

    A *mid-decode hint* is the successor the step's streamed output named before the step
    ended (:mod:`agentwarm.runtime.prefetch.scanner`): ``hint_node`` (``None``: no hint),
    ``hint_at_s`` when it was read (seconds after the step started) and ``hint_lead_s`` the
    lead it gave its prefetch over the step's end (``duration_s - hint_at_s``). Part of that
    lead (the step's work after its LLM call) a hint read from the finished output had too:
    ``hint_gain_s`` is what reading mid-decode gained, from the hint to the end of the LLM call
    whose output named it.

    ``miss`` says why a step with a previous step missed (or, a hit, did not find its whole
    prefetched prefix cached): :class:`~agentwarm._spec.Miss`, ``None`` for a hit that paid in
    full and for the first step.
    """

    index: int
    node: str
    from_node: str
    path: list[str]
    next: list[str] = field(default_factory=list)
    prefetched: bool = False
    ttft_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    #: Of ``cached_tokens``, those loaded from the engine's disk tier (None: not split).
    disk_cached_tokens: int | None = None
    llm_calls: int = 0
    duration_s: float = 0.0
    hint_node: str | None = None
    hint_at_s: float | None = None
    hint_lead_s: float | None = None
    hint_gain_s: float | None = None
    miss: Miss | None = None
    prefetches: list[PrefetchRecord] = field(default_factory=list)

    def note_hint(self, hint: tuple[str, float, float | None], started: float, end: float) -> None:
        """The step's mid-decode hint ``(node, read at, its LLM call's end)`` (clock times,
        like ``started`` and ``end``, the step's start and end)."""
        self.hint_node, at, call_end = hint
        self.hint_at_s, self.hint_lead_s = at - started, end - at
        self.hint_gain_s = None if call_end is None else call_end - at

    def note_tokens(self, completion: Completion) -> None:
        """The token counts of the step's first LLM call, ``completion`` (its disk-tier share
        from the engine's ``cached_tokens_by_source``, when the engine split them)."""
        self.prompt_tokens, self.cached_tokens = completion.prompt_tokens, completion.cached_tokens
        by_source = completion.cached_tokens_by_source
        self.disk_cached_tokens = int(by_source.get("disk", 0)) if by_source else None

    @property
    def miss_reason(self) -> MissReason | None:
        return self.miss.reason if self.miss is not None else None

    @property
    def outcome(self) -> StepOutcome:
        """``hit``/``miss`` for steps with a previous step, ``none`` for the first."""
        return step_outcome(self)
