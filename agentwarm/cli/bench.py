"""``agentwarm bench``: replay agent trajectories in cold / reactive / next_turn / agentwarm /
oracle mode."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from agentwarm.bench import LAYOUTS, MODES, BenchConfig, profile, run_bench
from agentwarm.bench.report import BenchReport, require_matplotlib
from agentwarm.cli._errors import cli_errors
from agentwarm.engines.base import Engine
from agentwarm.engines.registry import EMBEDDED_KINDS, disk_tier_options, open_engine
from agentwarm.errors import ConfigError
from agentwarm.redact import redact_credentials
from agentwarm.server.engine_options import KvDirOption, KvDiskGbOption

__all__ = ("bench", "register")


def _modes(spec: str | None) -> tuple[str, ...] | None:
    if spec is None:
        return None
    modes = tuple(m.strip() for m in spec.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ConfigError(f"--modes {spec!r}: choose among {', '.join(MODES)} (comma-separated)")
    return modes


def _config(base: BenchConfig, **changes: Any) -> BenchConfig:
    update = {k: v for k, v in changes.items() if v is not None}
    policy: dict[str, Any] = {k: update.pop(k) for k in ("top_n", "min_p", "spend") if k in update}
    try:
        if policy:  # validated (model_copy would not check the values)
            update["policy"] = type(base.policy).model_validate(
                {**base.policy.model_dump(), **policy}
            )
        return BenchConfig.model_validate({**base.model_dump(), **update})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"] if x != "policy")
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"--{where.replace('_', '-')}: {msg}") from exc


def bench(
    profile_name: Annotated[
        str,
        typer.Option(
            "--profile",
            help="quick (tiny model, 6 episodes of <= 6 steps: CI smoke test) | full (small "
            "model, 5 episodes of <= 8 steps: <= 30 min on 2 cores) | server (a serving "
            "engine on 2 cores, e.g. vllm:URL: 3 modes, 6 episodes of <= 5 steps, ~20 min).",
        ),
    ] = "quick",
    trajectories: Annotated[
        Path | None,
        typer.Option(
            "--trajectories",
            "-t",
            help='JSONL of episodes ({"steps": [...]}); default: '
            "the packaged tau2-bench retail step sequences.",
        ),
    ] = None,
    conversations: Annotated[
        Path | None,
        typer.Option(
            "--conversations",
            help='JSONL of real conversations in OpenAI chat format (a "messages" list per '
            "line) to replay instead of trajectories; tools.json beside it gives the schemas.",
        ),
    ] = None,
    system: Annotated[
        Path | None, typer.Option("--system", help="Shared policy text file (else generated).")
    ] = None,
    tools: Annotated[
        Path | None,
        typer.Option("--tools", help="JSON list of tool schemas named like the steps."),
    ] = None,
    layout: Annotated[
        str | None, typer.Option("--layout", help=f"Prompt layout: {' | '.join(LAYOUTS)}.")
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine", help="local | fake | http://HOST:PORT (SGLang, serve or vLLM) | vllm:URL."
        ),
    ] = "local",
    model: Annotated[
        str | None,
        typer.Option("--model", help="Preset or checkpoint dir (local); tokenizer (URL)."),
    ] = None,
    chunk_size: Annotated[
        int | None, typer.Option("--chunk-size", min=1, help="Prefill chunk (local engine).")
    ] = None,
    device: Annotated[
        str | None,
        typer.Option("--device", help="Local engine: cpu | cuda | cuda:N (default: cpu)."),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype", help="Local engine: float32 | bfloat16 | float16 (default: float32)."
        ),
    ] = None,
    kv_dir: KvDirOption = None,
    kv_disk_gb: KvDiskGbOption = None,
    episodes: Annotated[
        int | None, typer.Option("--episodes", "-n", min=1, help="Test episodes to replay.")
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option("--max-steps", min=1, help="Replay the first N steps of each episode."),
    ] = None,
    test_fraction: Annotated[
        float | None, typer.Option("--test-fraction", help="Share of episodes held out.")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Split, prompts, think times.")] = None,
    think: Annotated[
        str | None,
        typer.Option(
            "--think",
            help="Think time: const:S | uniform:low=A,high=B | lognormal:mean=M,sigma=S (seconds).",
        ),
    ] = None,
    pretrain: Annotated[
        bool | None,
        typer.Option("--pretrain/--no-pretrain", help="Fit the predictor on the train split."),
    ] = None,
    modes: Annotated[
        str | None, typer.Option("--modes", help="Comma-separated subset of the modes.")
    ] = None,
    fast_baselines: Annotated[
        bool | None,
        typer.Option(
            "--fast-baselines/--sleep-baselines",
            help="cold/reactive: add think time to the makespan instead of sleeping it.",
        ),
    ] = None,
    top_n: Annotated[
        int | None, typer.Option("--top-n", min=1, max=16, help="Policy: successors per step.")
    ] = None,
    min_p: Annotated[
        float | None, typer.Option("--min-p", min=0.0, max=1.0, help="Policy: min probability.")
    ] = None,
    spend: Annotated[
        str | None,
        typer.Option(
            "--spend",
            help="Policy: value (candidates worth their tokens, from p and the engine's idle "
            "time) | top_n (the top-N above min-p).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write the TTFT CDF per mode (PNG).")
    ] = None,
) -> None:
    """Replay agent trajectories in five modes on fresh engines; compare TTFT and prefill work.

    Modes: cold (no prefix reuse), reactive (radix cache only), next_turn (Dynamo's speculative
    next-turn prefill: one max_tokens=1 warm of the same conversation after each reply),
    agentwarm (speculative prefetching, learned predictor), oracle (prefetching exactly the true
    next step).
    """
    with cli_errors(json_failure=as_json):
        _bench(
            profile_name,
            engine=engine,
            model=model,
            chunk_size=chunk_size,
            device=device,
            dtype=dtype,
            kv=(kv_dir, kv_disk_gb),
            as_json=as_json,
            plot=plot,
            changes=dict(
                trajectories=trajectories,
                conversations=conversations,
                system_file=system,
                tools_file=tools,
                layout=layout,
                episodes=episodes,
                max_steps=max_steps,
                test_fraction=test_fraction,
                seed=seed,
                think=think,
                pretrain=pretrain,
                modes=_modes(modes),
                fast_baselines=fast_baselines,
                top_n=top_n,
                min_p=min_p,
                spend=spend,
            ),
        )


def _bench(
    profile_name: str,
    *,
    engine: str,
    model: str | None,
    chunk_size: int | None,
    device: str | None,
    dtype: str | None,
    kv: tuple[Path | None, float | None],
    as_json: bool,
    plot: Path | None,
    changes: dict[str, Any],
) -> None:
    kv_dir, kv_bytes = disk_tier_options(*kv, engine=engine)
    prof = profile(profile_name)
    if plot is not None:
        require_matplotlib()
    config = _config(prof.config, **changes)
    is_url = engine not in EMBEDDED_KINDS
    model_name = model or prof.model

    async def factory() -> Engine:
        return await open_engine(
            engine,
            model_name,
            chunk_size=chunk_size,
            device=device,
            dtype=dtype,
            kv_dir=kv_dir,
            kv_disk_bytes=kv_bytes,
        )

    label = engine if engine == "fake" else f"{engine}:{model_name}"
    if is_url:
        label = f"{redact_credentials(engine)} (tokenizer {model or 'from the server'})"
    err = Console(stderr=True)
    report = _run(config, factory, label, err)
    report.config["profile"] = prof.name
    report.noise_note = prof.note(int(report.workload["test_episodes"]))
    if plot is not None:
        report.plot(plot)
    if as_json:
        typer.echo(json.dumps(report.to_dict()))
        return
    report.render(Console())
    if plot is not None:
        Console().print(f"TTFT CDF written to {plot}")


def _run(config: BenchConfig, factory: Any, label: str, err: Console) -> BenchReport:
    """Run the bench; progress and notes go to stderr (stdout holds only the report), as a
    live bar on a terminal, else one line per episode; ``AGENTWARM_NO_PROGRESS`` silences
    the progress (not the notes)."""

    def on_note(line: str) -> None:
        err.print(f"note: {line}", highlight=False, markup=False, soft_wrap=True)

    if os.environ.get("AGENTWARM_NO_PROGRESS") is not None:
        return asyncio.run(run_bench(config, factory, engine_label=label, on_note=on_note))
    if not err.is_terminal:

        def log_episode(mode: str, done: int, total: int) -> None:
            err.print(f"bench: {mode} {done}/{total} episodes", highlight=False, markup=False)

        return asyncio.run(
            run_bench(config, factory, engine_label=label, on_episode=log_episode, on_note=on_note)
        )
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
    ) as progress:
        tasks: dict[str, Any] = {}

        def on_episode(mode: str, done: int, total: int) -> None:
            if mode not in tasks:
                tasks[mode] = progress.add_task(mode, total=total)
            progress.update(tasks[mode], completed=done)

        return asyncio.run(
            run_bench(config, factory, engine_label=label, on_episode=on_episode, on_note=on_note)
        )


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
