"""``run_bench``: replay the test episodes in every mode, each on a fresh engine, one process.

Only one mode's engine lives at a time: each is closed and dropped (and garbage collected)
before the next is made, so the bench's peak memory is about one engine's KV budget; the
process's peak resident set is reported (``peak_rss_mib``).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import inspect
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentwarm.bench.config import BenchConfig
from agentwarm.bench.conversations import (
    RESPOND,
    load_conversations,
    shared_policy,
    tools_beside,
)
from agentwarm.bench.inputs import (
    Episode,
    load_episodes,
    read_system_file,
    read_tools_file,
    split_episodes,
)
from agentwarm.bench.modes import ModeRun, run_mode
from agentwarm.bench.report import BenchReport
from agentwarm.bench.workload import ThinkTime, Workload
from agentwarm.chat import Message
from agentwarm.engines.base import Engine
from agentwarm.errors import ConfigError

__all__ = ("peak_rss_mib", "run_bench")


def peak_rss_mib() -> float | None:
    """The process's peak resident set so far, in MiB (``None`` where the OS does not say)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def _release_memory() -> None:
    """Collect garbage (the last mode's engine and its KV) and, on glibc, hand freed heap
    memory back to the OS, so the next engine does not stack on the last one's pages."""
    gc.collect()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc (e.g. musl)
            ctypes.CDLL("libc.so.6").malloc_trim(0)


@dataclass
class _Inputs:
    episodes: list[Episode]
    system_text: str | None = None
    tools: list[dict[str, Any]] | None = None
    tools_file: Path | None = None
    conversations: dict[str, tuple[Message, ...]] | None = None
    notes: list[str] = field(default_factory=list)


def _inputs(config: BenchConfig) -> _Inputs:
    system_text = read_system_file(config.system_file) if config.system_file else None
    tools_file = config.tools_file
    if config.conversations is None:
        tools = read_tools_file(tools_file) if tools_file else None
        return _Inputs(load_episodes(config.trajectories), system_text, tools, tools_file)
    if config.trajectories is not None:
        raise ConfigError("--conversations and --trajectories: give one of them, not both")
    convs = load_conversations(config.conversations)
    notes: list[str] = []
    if system_text is None:
        system_text, differ = shared_policy(convs)
        if differ:
            notes.append(
                f"--conversations {config.conversations}: {differ} conversation(s) have another "
                "system message; every node uses the most common one"
            )
    if tools_file is None:
        tools_file = tools_beside(config.conversations)
        if tools_file is not None:
            notes.append(f"tool schemas from {tools_file}")
    return _Inputs(
        episodes=[c.episode for c in convs],
        system_text=system_text,
        tools=read_tools_file(tools_file) if tools_file else None,
        tools_file=tools_file,
        conversations={c.episode.id: c.messages for c in convs},
        notes=notes,
    )


def _first_steps(episodes: Sequence[Episode], n: int | None) -> list[Episode]:
    return list(episodes) if n is None else [replace(e, steps=e.steps[:n]) for e in episodes]


async def _run_one(
    mode: str,
    engine_factory: Callable[[], Engine | Awaitable[Engine]],
    prepare: Callable[[Engine], Awaitable[Workload]],
    run: Callable[[str, Workload, Engine], Awaitable[ModeRun]],
) -> ModeRun:
    """One mode on its own engine; the engine is closed here and unreferenced on return."""
    made = engine_factory()
    engine = await made if inspect.isawaitable(made) else made
    try:
        return await run(mode, await prepare(engine), engine)
    finally:
        await engine.aclose()


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
    every call (one per mode); this function closes each engine after its mode and drops it
    before making the next. Modes run one after another on the same test episodes in the same
    order. Requests of each mode use their own namespace (a random per-invocation prefix), so
    modes never share cached prefixes even on one server. ``on_episode(mode, done, total)``
    reports progress; ``on_note(line)`` receives each remark on the inputs as soon as it is
    known (also in ``report.notes``).

    Raises :class:`~agentwarm.errors.ConfigError` for unusable inputs; engine failures
    propagate as :class:`~agentwarm.errors.EngineError`.
    """
    t0 = time.perf_counter()
    inputs = _inputs(config)
    episodes = inputs.episodes
    train, test = split_episodes(episodes, seed=config.seed, test_fraction=config.test_fraction)
    if config.episodes is not None:
        test = test[: config.episodes]
    test = _first_steps(test, config.max_steps)
    think = ThinkTime.parse(config.think)
    nonce = uuid.uuid4().hex[:12]
    built: list[Workload] = []
    described: dict[str, Any] = {}
    notes: list[str] = []

    def note(line: str) -> None:
        notes.append(line)
        if on_note is not None:
            on_note(line)

    async def prepare(engine: Engine) -> Workload:
        if built:
            return built[0]
        workload = Workload.build(
            episodes,
            encode=engine.encode,
            layout=config.layout,
            seed=config.seed,
            sizes=config.sizes,
            think=think,
            system_text=inputs.system_text,
            tool_schemas=inputs.tools,
            conversations=inputs.conversations,
        )
        built.append(workload)
        described.update(workload.describe(engine))
        for line in inputs.notes:
            note(line)
        plain = [s for s in workload.plain_steps if not (inputs.conversations and s == RESPOND)]
        if plain and inputs.tools is not None:
            note(
                f"--tools {inputs.tools_file}: no schema for step(s) {', '.join(plain)}; "
                "replayed as plain steps (no tool segment)"
            )
        return workload

    async def run(mode: str, workload: Workload, engine: Engine) -> ModeRun:
        return await run_mode(
            mode,
            workload,
            [workload.script(e) for e in test],
            engine,
            policy=config.policy,
            train=train if config.pretrain else (),
            namespace=f"bench-{nonce}-{mode}",
            fast_baselines=config.fast_baselines,
            on_episode=on_episode,
        )

    runs: list[ModeRun] = []
    for mode in config.modes:
        runs.append(await _run_one(mode, engine_factory, prepare, run))
        _release_memory()  # the mode's engine and its KV go before the next engine is made
        runs[-1].peak_rss_mib = peak_rss_mib()
    described.update(
        episodes_total=len(episodes),
        train_episodes=len(train),
        test_episodes=len(test),
        test_steps=sum(len(e.steps) for e in test),
        conversations=inputs.conversations is not None,
    )
    summary = config.summary()
    summary["engine"] = engine_label
    report = BenchReport.from_runs(runs, config=summary, workload=described)
    report.elapsed_s = time.perf_counter() - t0
    report.peak_rss_mib = peak_rss_mib()
    report.notes.extend(notes)
    return report
