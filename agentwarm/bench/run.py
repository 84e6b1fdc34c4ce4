"""``run_bench``: replay the test episodes in every mode, each on a fresh engine, one process."""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from agentwarm.bench.config import BenchConfig
from agentwarm.bench.inputs import load_episodes, read_system_file, read_tools_file, split_episodes
from agentwarm.bench.modes import ModeRun, run_mode
from agentwarm.bench.report import BenchReport
from agentwarm.bench.workload import ThinkTime, Workload
from agentwarm.engines.base import Engine

__all__ = ("run_bench",)


async def run_bench(
    config: BenchConfig,
    engine_factory: Callable[[], Engine | Awaitable[Engine]],
    *,
    engine_label: str = "",
    on_episode: Callable[[str, int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> BenchReport:
    """Run the benchmark described by ``config``.

    ``engine_factory`` must return a new engine (or an awaitable of one) of the same model on
    every call (one per mode); this function closes each engine after its mode. Modes run one
    after another on the same test episodes in the same order. Requests of each mode use their
    own namespace (a random per-invocation prefix), so modes never share cached prefixes even
    on one server. ``on_episode(mode, done, total)`` reports progress; ``on_note(line)``
    receives each remark on the inputs as soon as it is known (also in ``report.notes``).

    Raises :class:`~agentwarm.errors.ConfigError` for unusable inputs; engine failures
    propagate as :class:`~agentwarm.errors.EngineError`.
    """
    t0 = time.perf_counter()
    episodes = load_episodes(config.trajectories)
    train, test = split_episodes(episodes, seed=config.seed, test_fraction=config.test_fraction)
    if config.episodes is not None:
        test = test[: config.episodes]
    system_text = read_system_file(config.system_file) if config.system_file else None
    tools = read_tools_file(config.tools_file) if config.tools_file else None
    think = ThinkTime.parse(config.think)
    nonce = uuid.uuid4().hex[:12]
    workload: Workload | None = None
    described: dict[str, Any] = {}
    runs: list[ModeRun] = []
    notes: list[str] = []
    for mode in config.modes:
        made = engine_factory()
        engine = await made if inspect.isawaitable(made) else made
        try:
            if workload is None:
                workload = Workload.build(
                    episodes,
                    encode=engine.encode,
                    layout=config.layout,
                    seed=config.seed,
                    sizes=config.sizes,
                    think=think,
                    system_text=system_text,
                    tool_schemas=tools,
                )
                described = workload.describe(engine.encode)
                if workload.plain_steps:
                    notes.append(
                        f"--tools {config.tools_file}: no schema for step(s) "
                        f"{', '.join(workload.plain_steps)}; replayed as plain steps "
                        "(no tool segment)"
                    )
                    if on_note is not None:
                        on_note(notes[-1])
                scripts = [workload.script(e) for e in test]
            runs.append(
                await run_mode(
                    mode,
                    workload,
                    scripts,
                    engine,
                    policy=config.policy,
                    train=train if config.pretrain else (),
                    namespace=f"bench-{nonce}-{mode}",
                    fast_baselines=config.fast_baselines,
                    on_episode=on_episode,
                )
            )
        finally:
            await engine.aclose()
    described.update(
        episodes_total=len(episodes),
        train_episodes=len(train),
        test_episodes=len(test),
        test_steps=sum(len(e.steps) for e in test),
    )
    summary = config.summary()
    summary["engine"] = engine_label
    report = BenchReport.from_runs(runs, config=summary, workload=described)
    report.elapsed_s = time.perf_counter() - t0
    report.notes.extend(notes)
    return report
