"""The figures of a set of runs, from the runtime's records or from trace files.

* :mod:`~agentwarm.stats.definitions`: what every figure means (branch hit rate, acceptance
  ratio, wasted tokens, TTFT percentiles, estimated TTFT saved) and :class:`Summary`, whose
  fields are the keys of ``agentwarm run --json`` and ``agentwarm stats --json``; one home,
  shared by run summaries, trace statistics and the benchmark;
* :mod:`~agentwarm.stats.traces`: reading the JSON-lines trace files (:func:`read_traces`);
* :mod:`~agentwarm.stats.edges`: per-edge statistics of traced runs (:func:`compute_stats`);
* :mod:`~agentwarm.stats.hints`: the mid-decode hint figures (hinted steps, right hints, lead);
* :mod:`~agentwarm.stats.warmups`: what the warm-up prefills did, per kind (cache reads vs
  writes), apart from the runs' figures.

Below the runtime: nothing here imports ``agentwarm.runtime``; the runtime's records qualify
as :class:`StepLike` and :class:`PrefillLike`.
"""

from __future__ import annotations

from agentwarm.stats.definitions import (
    SUMMARY_KEYS,
    PrefillLike,
    StepLike,
    Summary,
    acceptance_ratio,
    branch_hit_rate,
    disk_cached_tokens,
    summarize_steps,
    wasted_tokens,
)
from agentwarm.stats.edges import EdgeStats, TraceStats, compute_stats
from agentwarm.stats.hints import HINT_KEYS, HintFigures, hint_figures
from agentwarm.stats.traces import (
    MAX_COUNT,
    PrefillSpan,
    Problem,
    RunSpan,
    StepSpan,
    TraceData,
    read_traces,
)
from agentwarm.stats.warmups import WarmUpStats, warm_up_stats

__all__ = (
    "HINT_KEYS",
    "MAX_COUNT",
    "SUMMARY_KEYS",
    "EdgeStats",
    "HintFigures",
    "PrefillLike",
    "PrefillSpan",
    "Problem",
    "RunSpan",
    "StepLike",
    "StepSpan",
    "Summary",
    "TraceData",
    "TraceStats",
    "WarmUpStats",
    "acceptance_ratio",
    "branch_hit_rate",
    "compute_stats",
    "disk_cached_tokens",
    "hint_figures",
    "read_traces",
    "summarize_steps",
    "warm_up_stats",
    "wasted_tokens",
)
