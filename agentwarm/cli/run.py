"""``agentwarm run FILE[:WORKFLOW]``: run a workflow, learning and prefetching as it goes."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from agentwarm import telemetry as tm
from agentwarm.cli._engines import open_engine
from agentwarm.cli._errors import cli_errors
from agentwarm.errors import ConfigError
from agentwarm.graphs import Workflow, load_workflow
from agentwarm.runtime import PrefetchPolicy, RunResult, summarize

__all__ = ("register", "run")


def _default_state_dir() -> Path:
    from agentwarm.predictors import default_state_dir

    return Path(default_state_dir())


def _read_inputs(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"--inputs {path}: cannot read it ({exc.strerror})") from exc
    out: list[str] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--inputs {path}:{no}: not JSON ({exc.msg}); each line must be a JSON string "
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


def _inputs(workflow: Workflow, text: str | None, path: Path | None, runs: int) -> list[str]:
    if text is not None and path is not None:
        raise ConfigError("give either --input or --inputs, not both")
    pool = [text] if text is not None else _read_inputs(path) if path else []
    pool = pool or list(workflow.sample_inputs) or [""]
    return [pool[i % len(pool)] for i in range(runs)]


def _fmt_ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1000:.1f}"


def _render(console: Console, results: list[RunResult], summary: dict[str, Any]) -> None:
    runs = Table(title="Runs", title_justify="left", header_style="bold")
    for col in (
        "run",
        "steps",
        "branch hits",
        "hit rate so far",
        "cached / prompt tok",
        "mean TTFT ms",
    ):
        runs.add_column(col, justify="right")
    for i, r in enumerate(results, 1):
        s = r.summary()
        runs.add_row(
            str(i),
            str(s["steps"]),
            f"{s['branch_hit_rate']:.0%}",
            f"{summarize(results[:i])['branch_hit_rate']:.0%}",
            f"{s['cached_tokens']} / {s['prompt_tokens']}",
            _fmt_ms(s["ttft_mean_s"]),
        )
    console.print(runs)
    last = results[-1]
    steps = Table(title=f"Steps of run {len(results)}", title_justify="left", header_style="bold")
    for col in ("#", "node", "TTFT ms", "prompt tok", "cached tok", "outcome", "prefetched"):
        steps.add_column(col, justify="left" if col in ("node", "prefetched") else "right")
    style = {"hit": "green", "miss": "red", "none": "dim"}
    for st in last.steps:
        pre = ", ".join(
            f"{p.target} {p.probability:.2f} {p.outcome}" for p in st.prefetches if p.speculative
        )
        steps.add_row(
            str(st.index),
            st.node,
            _fmt_ms(st.ttft_s),
            str(st.prompt_tokens),
            str(st.cached_tokens),
            f"[{style[st.outcome]}]{st.outcome}[/]",
            pre or "—",
        )
    console.print(steps)
    console.print(f"path of run {len(results)}: " + " → ".join(last.path))
    prompt = summary["prompt_tokens"] or 1
    console.print(
        f"[bold]{summary['workflow']}[/]: {summary['runs']} runs, {summary['steps']} steps · "
        f"branch hit rate [bold]{summary['branch_hit_rate']:.0%}[/] · acceptance "
        f"{summary['acceptance_ratio']:.0%} ({summary['prefetch_hits']}/"
        f"{summary['prefetches_issued']}) · cached {summary['cached_tokens']}/"
        f"{summary['prompt_tokens']} tok ({summary['cached_tokens'] / prompt:.0%}) · wasted "
        f"{summary['wasted_tokens']} tok · TTFT p50 {_fmt_ms(summary['ttft_p50_s'])} ms, "
        f"p95 {_fmt_ms(summary['ttft_p95_s'])} ms"
    )


async def _run_all(
    workflow: Workflow,
    inputs: list[str],
    *,
    engine_spec: str,
    model: str,
    policy: PrefetchPolicy,
    state_dir: Path,
    progress: Progress | None,
) -> list[RunResult]:
    engine = await open_engine(engine_spec, model)
    results: list[RunResult] = []
    async with engine:
        task = progress.add_task("runs", total=len(inputs)) if progress else None
        for text in inputs:
            results.append(
                await workflow.run(text, engine=engine, policy=policy, state_dir=state_dir)
            )
            if progress is not None and task is not None:
                progress.advance(task)
    return results


def run(
    target: Annotated[str, typer.Argument(metavar="FILE[:WORKFLOW]", help="Workflow file.")],
    input: Annotated[str | None, typer.Option("--input", "-i", help="Input text.")] = None,
    inputs: Annotated[
        Path | None, typer.Option("--inputs", help="JSONL file, one input per line.")
    ] = None,
    runs: Annotated[int, typer.Option("--runs", "-n", min=1, help="Number of runs.")] = 1,
    engine: Annotated[
        str, typer.Option("--engine", help="local | fake | http://HOST:PORT[,URL...]")
    ] = "local",
    model: Annotated[
        str, typer.Option("--model", help="Model preset (tiny, small) or checkpoint dir.")
    ] = "tiny",
    no_prefetch: Annotated[
        bool, typer.Option("--no-prefetch", help="Reactive baseline: no speculation.")
    ] = False,
    top_n: Annotated[
        int | None,
        typer.Option(
            "--top-n", min=1, max=16, help="Successors to prefetch per step (default: policy's)."
        ),
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="Learned predictor state directory.")
    ] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="Write spans as JSONL.")] = None,
    otlp: Annotated[str | None, typer.Option("--otlp", help="OTLP/HTTP endpoint.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run a workflow; print per-step TTFT, cached tokens and prefetch outcomes."""
    with cli_errors():
        _run(
            target,
            input,
            inputs,
            runs,
            engine,
            model,
            no_prefetch,
            top_n,
            state_dir,
            trace,
            otlp,
            as_json,
        )


def _run(
    target: str,
    input: str | None,
    inputs: Path | None,
    runs: int,
    engine: str,
    model: str,
    no_prefetch: bool,
    top_n: int | None,
    state_dir: Path | None,
    trace: Path | None,
    otlp: str | None,
    as_json: bool,
) -> None:
    workflow = load_workflow(target)
    texts = _inputs(workflow, input, inputs, runs)
    if no_prefetch:
        policy = PrefetchPolicy.disabled()
    else:
        policy = PrefetchPolicy() if top_n is None else PrefetchPolicy(top_n=top_n)
    sdir = state_dir or _default_state_dir()
    telemetry = tm.configure(trace_file=trace, otlp_endpoint=otlp) if (trace or otlp) else None
    err = Console(stderr=True)
    show = not as_json and err.is_terminal and os.environ.get("AGENTWARM_NO_PROGRESS") is None
    try:
        if show:
            with Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=err,
                transient=True,
            ) as progress:
                results = asyncio.run(
                    _run_all(
                        workflow,
                        texts,
                        engine_spec=engine,
                        model=model,
                        policy=policy,
                        state_dir=sdir,
                        progress=progress,
                    )
                )
        else:
            results = asyncio.run(
                _run_all(
                    workflow,
                    texts,
                    engine_spec=engine,
                    model=model,
                    policy=policy,
                    state_dir=sdir,
                    progress=None,
                )
            )
    finally:
        if telemetry is not None:
            telemetry.shutdown()
    summary = {"workflow": workflow.name, **summarize(results)}
    if as_json:
        summary["paths"] = [r.path for r in results]
        summary["per_run_branch_hit_rate"] = [r.summary()["branch_hit_rate"] for r in results]
        typer.echo(json.dumps(summary))
        return
    _render(Console(), results, summary)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
