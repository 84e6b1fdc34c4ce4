"""``agentwarm run FILE[:WORKFLOW]``: run a workflow, learning and prefetching as it goes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from agentwarm import _jsonfile
from agentwarm import telemetry as tm
from agentwarm.cli._errors import cli_errors
from agentwarm.cli._run_report import Failure, interrupted, render, report_failures
from agentwarm.engines.registry import disk_tier_options, open_engine
from agentwarm.errors import (
    ConfigError,
    EngineError,
    EngineUnavailable,
    GraphValidationError,
    WorkflowError,
)
from agentwarm.graphs import check_timeout
from agentwarm.runtime import PrefetchPolicy, RunResult, Workflow, load_workflow, summarize
from agentwarm.server.engine_options import KvDirOption, KvDiskGbOption
from agentwarm.stats import disk_cached_tokens, hint_figures

__all__ = ("register", "run")


def _default_state_dir() -> Path:
    from agentwarm.predictors import default_state_dir

    return Path(default_state_dir())


def _read_inputs(path: Path) -> list[str]:
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"--inputs {path}: cannot read it ({exc.strerror})") from exc
    out: list[str] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = _jsonfile.loads(line)
        except _jsonfile.JSONTextError as exc:
            raise ConfigError(
                f"--inputs {path}:{no}: {exc}; each line must be a JSON string "
                'or an object with an "input" field'
            ) from exc
        if isinstance(value, dict) and isinstance(value.get("input"), str):
            out.append(value["input"])
        elif isinstance(value, str):
            out.append(value)
        else:
            raise ConfigError(f'--inputs {path}:{no}: expected a JSON string or {{"input": "..."}}')
    if not out:
        raise ConfigError(f"--inputs {path}: holds no inputs")
    return out


def _step_timeout(value: float) -> float | None:
    """``--step-timeout S``: a positive number of seconds, or ``inf`` for no limit."""
    if value == math.inf:
        return None
    try:
        return check_timeout("--step-timeout", value)
    except GraphValidationError:
        raise ConfigError(
            f"--step-timeout={value!r} must be a positive number of seconds "
            "(inf for no limit, even where the workflow sets one)"
        ) from None


def _inputs(workflow: Workflow, text: str | None, path: Path | None, runs: int | None) -> list[str]:
    """The input of each run: ``--input``, else the lines of ``--inputs`` (each once unless
    ``--runs`` is given, then cycled), else the workflow file's ``INPUTS`` (cycled over
    ``--runs``, default 1), else one empty input (with a warning)."""
    if text is not None and path is not None:
        raise ConfigError("give either --input or --inputs, not both")
    pool = [text] if text is not None else _read_inputs(path) if path else []
    if path is not None and runs is None:
        return pool
    if not pool and not workflow.sample_inputs:
        typer.echo(
            f"warning: workflow '{workflow.name}' defines no INPUTS and no --input was given: "
            "running with an empty input (pass --input TEXT or --inputs FILE)",
            err=True,
        )
    pool = pool or list(workflow.sample_inputs) or [""]
    return [pool[i % len(pool)] for i in range(runs or 1)]


async def _run_all(
    workflow: Workflow,
    inputs: list[str],
    *,
    engine_spec: str,
    model: str,
    device: str | None,
    dtype: str | None,
    tier: tuple[Path | None, int | None],
    policy: PrefetchPolicy,
    state_dir: Path,
    progress: Progress | None,
    done: list[tuple[int, RunResult]],
    failed: list[Failure],
) -> None:
    """Run every input, appending to ``done`` and ``failed`` as each run ends (so an
    interrupted batch still has the runs that ended). A failing run (a node raising, a step
    timing out, the engine refusing a prompt) is recorded and the batch goes on; an engine that
    is gone stops it."""
    try:
        engine = await open_engine(
            engine_spec, model, device=device, dtype=dtype, kv_dir=tier[0], kv_disk_bytes=tier[1]
        )
    except EngineError as exc:  # the engine named by --engine cannot be used: the user's fix
        raise ConfigError(str(exc)) from exc
    async with engine:
        task = progress.add_task("runs", total=len(inputs)) if progress else None
        for i, text in enumerate(inputs, 1):
            try:
                result = await workflow.run(text, engine=engine, policy=policy, state_dir=state_dir)
            except (WorkflowError, EngineError) as exc:
                failed.append(Failure(i, text, exc))
                if isinstance(exc, EngineUnavailable):
                    break
            else:
                done.append((i, result))
            if progress is not None and task is not None:
                progress.advance(task)


def run(
    target: Annotated[str, typer.Argument(metavar="FILE[:WORKFLOW]", help="Workflow file.")],
    input: Annotated[str | None, typer.Option("--input", "-i", help="Input text.")] = None,
    inputs: Annotated[
        Path | None,
        typer.Option("--inputs", help="JSONL file, one input per line; each runs once."),
    ] = None,
    runs: Annotated[
        int | None,
        typer.Option(
            "--runs",
            "-n",
            min=1,
            help="Number of runs, cycling over the inputs (default: 1, or one per --inputs line).",
        ),
    ] = None,
    engine: Annotated[
        str, typer.Option("--engine", help="local | fake | http://HOST:PORT[,URL...]")
    ] = "local",
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help=(
                "Model preset (tiny, small, 1b; tiny-bytes, small-bytes: byte tokenizer) "
                "or checkpoint dir."
            ),
        ),
    ] = "tiny",
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            help="Local engine: cpu | cuda | cuda:N (default: $AGENTWARM_DEVICE or cpu).",
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="Local engine: float32 | bfloat16 | float16 (default: $AGENTWARM_DTYPE or "
            "float32).",
        ),
    ] = None,
    kv_dir: KvDirOption = None,
    kv_disk_gb: KvDiskGbOption = None,
    no_prefetch: Annotated[
        bool, typer.Option("--no-prefetch", help="Reactive baseline: no speculation.")
    ] = False,
    top_n: Annotated[
        int | None,
        typer.Option(
            "--top-n", min=1, max=16, help="Successors to prefetch per step (default: policy's)."
        ),
    ] = None,
    step_timeout: Annotated[
        float | None,
        typer.Option(
            "--step-timeout",
            metavar="S",
            help="Fail a run whose step takes longer than S seconds (a node's own "
            "@node(timeout_s=...) wins); inf: no limit, not even the workflow's own.",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="Learned predictor state directory.")
    ] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="Write spans as JSONL.")] = None,
    otlp: Annotated[str | None, typer.Option("--otlp", help="OTLP/HTTP endpoint.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    debug: Annotated[
        bool, typer.Option("--debug", "-v", help="Print the traceback of every error.")
    ] = False,
) -> None:
    """Run a workflow; print per-step TTFT, cached tokens and prefetch outcomes.

    Exit codes: 0 every run completed; 1 a run failed (the others still ran and are reported);
    2 a usage error; 130 interrupted (Ctrl-C)."""
    with cli_errors(debug=debug):
        try:
            _run(
                target,
                input,
                inputs,
                runs,
                engine,
                model,
                device,
                dtype,
                (kv_dir, kv_disk_gb),
                no_prefetch,
                top_n,
                step_timeout,
                state_dir,
                trace,
                otlp,
                as_json,
                debug,
            )
        except KeyboardInterrupt:
            interrupted()
            raise typer.Exit(130) from None


def _run(
    target: str,
    input: str | None,
    inputs: Path | None,
    runs: int | None,
    engine: str,
    model: str,
    device: str | None,
    dtype: str | None,
    kv: tuple[Path | None, float | None],
    no_prefetch: bool,
    top_n: int | None,
    step_timeout: float | None,
    state_dir: Path | None,
    trace: Path | None,
    otlp: str | None,
    as_json: bool,
    debug: bool,
) -> None:
    tier = disk_tier_options(*kv, engine=engine)
    workflow = load_workflow(target)
    if step_timeout is not None:
        workflow.step_timeout_s = _step_timeout(step_timeout)
    texts = _inputs(workflow, input, inputs, runs)
    if no_prefetch:
        policy = PrefetchPolicy.disabled()
    else:
        policy = PrefetchPolicy() if top_n is None else PrefetchPolicy(top_n=top_n)
    sdir = state_dir or _default_state_dir()
    telemetry = tm.configure(trace_file=trace, otlp_endpoint=otlp) if (trace or otlp) else None
    err = Console(stderr=True)
    show = not as_json and err.is_terminal and os.environ.get("AGENTWARM_NO_PROGRESS") is None
    done: list[tuple[int, RunResult]] = []
    failed: list[Failure] = []
    stopped = False  # Ctrl-C: the runs that ended are still reported, then exit 130
    try:
        with (
            Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=err,
                transient=True,
            )
            if show
            else contextlib.nullcontext()
        ) as progress:
            asyncio.run(
                _run_all(
                    workflow,
                    texts,
                    engine_spec=engine,
                    model=model,
                    device=device,
                    dtype=dtype,
                    tier=tier,
                    policy=policy,
                    state_dir=sdir,
                    progress=progress,
                    done=done,
                    failed=failed,
                )
            )
    except KeyboardInterrupt:
        stopped = True
    finally:
        if telemetry is not None:
            telemetry.shutdown()
    results = [r for _, r in done]
    summary = summarize(results, workflow=workflow.name)
    if as_json:
        # The mid-decode hint figures, as `agentwarm stats --json` reads them from the traces.
        steps = [st for r in results for st in r.steps]
        summary.update(hint_figures(steps, next_of=lambda st: st.next).to_dict())
        if (disk := disk_cached_tokens(steps)) is not None:  # as agentwarm stats gives it
            summary["disk_cached_tokens"] = disk
        summary["paths"] = [r.path for r in results]
        summary["per_run_branch_hit_rate"] = [r.summary()["branch_hit_rate"] for r in results]
        summary["failed_runs"] = [f.to_dict() for f in failed]
        if stopped:
            summary["interrupted"] = True
        typer.echo(json.dumps(summary))
    elif done or failed or not stopped:
        render(Console(), done, failed, summary, prefetch=not no_prefetch)
    if failed:
        report_failures(failed, len(texts), debug=debug)
    if stopped:
        raise KeyboardInterrupt
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
