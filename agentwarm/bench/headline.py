"""The figures across modes: ``gap_closed``, the speedups, and where agentwarm trails the oracle.

* ``gap_closed`` = (reactive − agentwarm) / (reactive − oracle) on mean TTFT;
  ``gap_closed_live_tokens`` the same on live-computed tokens (``live_computed_tokens``);
  ``next_turn_gap_closed`` / ``next_turn_gap_closed_live_tokens`` the same for ``next_turn``;
  ``ttft_speedup_vs_next_turn`` = next_turn / agentwarm mean TTFT;
  ``ttft_speedup_vs_reactive`` = reactive / agentwarm mean TTFT; the makespan one likewise.
* ``gap_to_oracle``: where agentwarm's mean TTFT exceeds the oracle's. Both modes replay the
  same steps in the same order, so the steps pair up; each pair's TTFT difference is put under
  agentwarm's outcome for that step (``hit``: its node was prefetched, ``miss``: not, ``none``:
  a run's first step) and summed over the pairs, divided by the number of pairs: the parts add
  up to the difference of the two means (``total_s``). ``steps`` counts the pairs per outcome;
  ``by_reason_s`` / ``reason_steps`` split the same sum by agentwarm's miss reason (``paid``: a
  hit that found its whole prefix cached, ``first``: a run's first step).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentwarm.bench.modes import ModeRun
from agentwarm.stats.definitions import has_previous

__all__ = ("gap_to_oracle", "headline")


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def _gap(base: float | None, mine: float | None, best: float | None) -> float | None:
    if base is None or mine is None or best is None or base == best:
        return None
    return (base - mine) / (base - best)


def headline(modes: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """``gap_closed`` (in time and in live tokens, agentwarm's and next_turn's), the speedups vs
    reactive and next_turn, agentwarm's ITL slowdown vs reactive (``None`` where a mode is
    missing or the denominator is zero)."""
    r, a, o, n = (modes.get(m, {}) for m in ("reactive", "agentwarm", "oracle", "next_turn"))
    rt, at, ot = r.get("ttft_mean_s"), a.get("ttft_mean_s"), o.get("ttft_mean_s")
    nt = n.get("ttft_mean_s")
    gap = _gap(rt, at, ot)
    rl, al, ol = (m.get("live_computed_tokens") for m in (r, a, o))
    return {
        "gap_closed": gap,
        "gap_closed_live_tokens": _gap(rl, al, ol),
        "next_turn_gap_closed": _gap(rt, nt, ot),
        "next_turn_gap_closed_live_tokens": _gap(rl, n.get("live_computed_tokens"), ol),
        "ttft_speedup_vs_next_turn": _ratio(nt, at),
        "ttft_speedup_vs_reactive": _ratio(rt, at),
        "makespan_speedup_vs_reactive": _ratio(r.get("makespan_s"), a.get("makespan_s")),
        "oracle_ttft_speedup_vs_reactive": _ratio(rt, ot),
        "reactive_ttft_speedup_vs_cold": _ratio(modes.get("cold", {}).get("ttft_mean_s"), rt),
        "itl_slowdown_vs_reactive": _ratio(a.get("itl_mean_s"), r.get("itl_mean_s")),
    }


def gap_to_oracle(runs: dict[str, ModeRun]) -> dict[str, Any] | None:
    """agentwarm's mean-TTFT excess over the oracle, split by agentwarm's step outcome (see
    the module docstring); ``None`` without both modes or when their steps do not pair up."""
    if "agentwarm" not in runs or "oracle" not in runs:
        return None
    a = [st for r in runs["agentwarm"].results for st in r.steps if st.ttft_s is not None]
    o = [st for r in runs["oracle"].results for st in r.steps if st.ttft_s is not None]
    if not a or [st.node for st in a] != [st.node for st in o]:
        return None
    seconds: dict[str, float] = {}
    steps: Counter[str] = Counter()
    by_reason: dict[str, float] = {}
    reason_steps: Counter[str] = Counter()
    for mine, best in zip(a, o, strict=True):
        assert mine.ttft_s is not None and best.ttft_s is not None
        outcome = str(mine.outcome)
        seconds[outcome] = seconds.get(outcome, 0.0) + mine.ttft_s - best.ttft_s
        steps[outcome] += 1
        why = str(mine.miss_reason or ("first" if not has_previous(mine) else "paid"))
        by_reason[why] = by_reason.get(why, 0.0) + mine.ttft_s - best.ttft_s
        reason_steps[why] += 1
    return {
        "total_s": sum(seconds.values()) / len(a),
        "by_outcome_s": {k: v / len(a) for k, v in sorted(seconds.items())},
        "steps": dict(sorted(steps.items())),
        "by_reason_s": {k: v / len(a) for k, v in sorted(by_reason.items())},
        "reason_steps": dict(sorted(reason_steps.items())),
    }
