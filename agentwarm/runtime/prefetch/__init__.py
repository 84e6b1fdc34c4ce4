"""Speculative prefetching of a run's likely next prompts (DESIGN §5).

Lifecycle per step (:class:`Prefetcher`)::

    begin_step   predict successors (from the path, and the conversation for a predictor
                 that reads it) → choose candidates by expected value (p × tokens saved
                 against the idle or busy price of their new tokens; top-N, min_p, budget)
                 → submit speculative prefills (admitted per engine, low priority), or hold
                 them until the step's first LLM call returns (``timing``)
    refresh      after each LLM call of the step: submit held candidates, or re-send the
                 candidates' now longer prefixes
                 (the step's own output is in the transcript) and add a successor the output
                 names, if any; a context predictor re-ranks on the grown conversation
    hint         while the step's live request streams: the first successor its partial
                 output names is prefetched at once (a mid-decode hint)
    resolve      the step returned its next node(s): winners are hits (left running, the real
                 request reuses them), losers are stopped; the predictor and guardrail observe
    warm         the actual next node's full known prefix is sent at once (a "confirmed" warm-up)

``resolve`` never waits for the engine: losers are stopped (a request not yet sent is cancelled
before it reaches the engine, one already sent is aborted) and settled in the background, so a
wrong guess adds nothing to the critical path. Records and spans are final once the run's
``aclose()`` returns.

Nothing a live step awaits depends on speculation's rate or queues: admission
(:mod:`agentwarm.runtime.admission`, one per engine) answers at once, and a prefetch it refuses
is dropped (outcome ``dropped``), never queued; a hit whose request was not sent yet is cancelled
at resolve, and the live request (or the confirmed warm-up) takes over its prefix at once.

Nothing here may break a workflow: every speculative failure is logged and counted as outcome
``failed``; only the live request path raises.

Modules: :mod:`.state` (requests, prefetches, the step's scope: plain data), :mod:`.rules` (the
decisions as pure functions: budget, sharing, hits, warm-ups, outcomes), :mod:`.spend` (the
expected-value rule and what it learns: throughput, idle time, prefixes sent), :mod:`.choice`
(choosing a step's candidates with it), :mod:`.hints` and
:mod:`.scanner` (output hints, whole or streamed), :mod:`.hinting` (reading the conversation
and the output: re-ranking, mid-decode hints), :mod:`.sender` (sending and stopping
requests), :mod:`.settle` (outcomes, counters, spans), :mod:`.warmups` (confirmed warm-ups
awaiting their live request), :mod:`.prefetcher`.
"""

from __future__ import annotations

from agentwarm.runtime.prefetch.prefetcher import Prefetcher
from agentwarm.runtime.prefetch.state import StepScope

__all__ = ("Prefetcher", "StepScope")
