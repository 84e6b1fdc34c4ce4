"""``agentwarm bench``: replay recorded agent trajectories and compare prefix-cache strategies.

The same test episodes run in five modes, each on a fresh engine of the same model: ``cold``
(no prefix reuse), ``reactive`` (radix cache only, SGLang's default), ``next_turn`` (NVIDIA
Dynamo's speculative next-turn prefill: one warm of the same conversation after each reply),
``agentwarm`` (speculative prefetching with the learned predictor) and ``oracle`` (prefetching
exactly the true next step).
The report gives TTFT, episode makespan, prefill work (useful vs wasted), acceptance ratio and
branch hit rate per mode, and ``gap_closed`` = (reactive − agentwarm) / (reactive − oracle).

::

    report = await run_bench(profile("quick").config, lambda: LocalEngine("tiny"))
    report.render(Console())
"""

from __future__ import annotations

from agentwarm.bench.config import PROFILES, BenchConfig, Profile, profile
from agentwarm.bench.inputs import Episode, load_episodes, split_episodes
from agentwarm.bench.metered import MeteredEngine, RequestRecord
from agentwarm.bench.modes import MODES, ModeRun, OraclePredictor, pretrain, run_mode
from agentwarm.bench.report import BenchReport, headline, mode_figures
from agentwarm.bench.run import run_bench
from agentwarm.bench.workload import LAYOUTS, EpisodeScript, PromptSizes, ThinkTime, Workload

__all__ = (
    "LAYOUTS",
    "MODES",
    "PROFILES",
    "BenchConfig",
    "BenchReport",
    "Episode",
    "EpisodeScript",
    "MeteredEngine",
    "ModeRun",
    "OraclePredictor",
    "Profile",
    "PromptSizes",
    "RequestRecord",
    "ThinkTime",
    "Workload",
    "headline",
    "load_episodes",
    "mode_figures",
    "pretrain",
    "profile",
    "run_bench",
    "run_mode",
    "split_episodes",
)
