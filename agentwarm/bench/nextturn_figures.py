"""The ``next_turn`` mode's own figures: which warms the next live request found.

Each step with a previous step (the steps a hit rate counts) that called the model is paired
with the warm sent for its live request (:class:`~agentwarm.bench.nextturn.Warm`: the one the
run's previous reply set off). With ``covered`` the common prefix of the warm's ids and the
live request's, and ``fresh = covered - warm.cached`` what the warm computed of that prompt:

* a **hit** is a step whose warm computed part of its prompt (``fresh > 0``). It paid in full
  when the live request found all of ``covered`` cached; otherwise it is a short hit,
  ``late`` (the live request found fewer than ``covered`` tokens cached) before
  ``prefix_mismatch`` (the warm went on past where the live ids diverged: its tail was not
  the next prompt);
* a **miss** is ``failed`` (the warm failed or timed out) or ``not_predicted``: no warm (no
  reply came before the step: a run's first LLM call after an entry that calls none) or a warm
  that computed nothing of the next prompt (the next step reads another prompt, e.g. another
  agent's head; or the warm diverged before what was cached already).

``wasted_tokens`` are the warms' computed tokens that no live request found: a warm's
``computed - max(0, min(live cached, covered) - warm.cached)``, all of it for a warm no live
request followed (the one after a run's last reply). ``acceptance_ratio`` = hits / warms.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentwarm._spec import MissReason
from agentwarm.bench.nextturn import NextTurnLog, Warm
from agentwarm.runtime import RunResult
from agentwarm.stats.definitions import has_previous

__all__ = ("next_turn_figures",)


def _outcome(warm: Warm | None, live_cached: int) -> tuple[bool, MissReason | None, int]:
    """``(hit, reason, used)``: ``used`` is how many of the warm's computed tokens the live
    request found cached."""
    if warm is None:
        return False, MissReason.NOT_PREDICTED, 0
    if warm.failed:
        return False, MissReason.FAILED, 0
    covered = warm.covered or 0
    if covered - warm.cached <= 0:
        return False, MissReason.NOT_PREDICTED, 0
    used = max(0, min(live_cached, covered) - warm.cached)
    if live_cached < covered:
        return True, MissReason.LATE, used
    if covered < warm.tokens:
        return True, MissReason.PREFIX_MISMATCH, used
    return True, None, used


def next_turn_figures(results: list[RunResult], log: NextTurnLog) -> dict[str, Any]:
    """The keys of :func:`~agentwarm.bench.report.mode_figures` that mean something else for
    ``next_turn`` (see the module docstring), and ``next_turn_computed_tokens`` (the warms'
    computed tokens) and ``next_turn_warms``."""
    reasons: Counter[str] = Counter()
    hits = short = counted = used_total = 0
    for result in results:
        calls = [st for st in result.steps if st.llm_calls]
        for index, st in enumerate(calls):
            if not has_previous(st):
                continue
            counted += 1
            hit, why, used = _outcome(log.for_live(result.run_id, index), st.cached_tokens)
            used_total += used
            hits += hit
            short += hit and why is not None
            if why is not None:
                reasons[str(why)] += 1
    warms = log.warms
    computed = sum(w.computed for w in warms)
    return {
        "branch_hit_rate": hits / counted if counted else None,
        "short_hits": short,
        "miss_reasons": dict(sorted(reasons.items())),
        "prefetches_issued": len(warms),
        "prefetch_hits": hits,
        "prefetch_requests": len(warms),
        "acceptance_ratio": hits / len(warms) if warms else None,
        "wasted_tokens": computed - used_total,
        "next_turn_computed_tokens": computed,
        "next_turn_warms": len(warms),
        "next_turn_warm_tokens": sum(w.tokens for w in warms),
        "next_turn_covered_tokens": sum(w.covered or 0 for w in warms),
        "next_turn_failed": sum(w.failed for w in warms),
    }
