"""``agentwarm warmup run PLAN --engine URL[,URL...]``: warm every worker with a plan, once.

A one-shot command, for a deploy hook, cron or a Kubernetes CronJob ("warm at 06:30 before the
morning ramp"); ``--refresh-plan`` re-mines the plan from the last ``--since-hours`` of traces
first, so the plan follows drift. See :mod:`agentwarm.warmup.warmer` for the budget rule.

``--refresh-plan`` (:mod:`agentwarm.warmup.refresh`) replaces PLAN (atomically) only once the
new plan is known to be usable (its messages can be rendered for the workers); a window with no
request in it (a quiet night) keeps PLAN as it is, says so on stderr, and warms it.

A plan line that a chat request like it would be refused for is skipped with a warning and
the rest is warmed (:func:`~agentwarm.warmup.types.load_plan`). ``--timeout S`` (default
:data:`DEFAULT_TIMEOUT_S`) is the longest a worker may stay silent on any one request (opening
it, reading its stats, one prefill): a worker that stops answering (stopped, hung) fails with
an error naming it and the timeout, and the others are still warmed.

Exit codes: 0 every worker warmed; 1 a worker failed (the others were still warmed; the message
names which); 2 a usage error (bad plan, option or URL; a plan path that is not a regular
file); 130 interrupted (Ctrl-C: the prefills in flight are aborted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from agentwarm._spec import PrefetchKind
from agentwarm.engines.base import Engine
from agentwarm.engines.registry import VLLM_PREFIX, server_kind
from agentwarm.engines.sglang import SGLangEngine, check_url
from agentwarm.errors import ConfigError, EngineError, EngineTimeout
from agentwarm.redact import redact_credentials
from agentwarm.warmup.refresh import Refresh, kept_plan, refresh_plan
from agentwarm.warmup.render import ChatRenderer, load_chat_renderer
from agentwarm.warmup.types import Plan, load_plan, save_plan
from agentwarm.warmup.warmer import WarmSummary, check_fraction, warm_workers

__all__ = ("Refresh", "refresh_plan", "render_summaries", "run", "served_renderer", "worker_urls")

#: Set to silence the progress bar (as for ``agentwarm run`` and ``agentwarm bench``).
NO_PROGRESS_ENV = "AGENTWARM_NO_PROGRESS"
#: The default of ``--timeout``: seconds a worker may stay silent on one request (a prefill of
#: a long prefix on a CPU worker can take a minute before its answer).
DEFAULT_TIMEOUT_S = 120.0


def worker_urls(spec: str) -> list[str]:
    """``URL[,URL...]`` as a list of distinct, valid URLs (a ``vllm:`` prefix kept: a vLLM
    server); ConfigError naming the bad one."""
    urls = [u.strip() for u in spec.split(",") if u.strip()]
    if not urls:
        raise ConfigError(
            "--engine: give the URL of every worker, http://HOST:PORT[,URL...] "
            "(vllm:http://HOST:PORT for a vLLM server)"
        )
    checked: list[str] = []
    seen: set[str] = set()
    for url in urls:
        vllm = url.startswith(VLLM_PREFIX)
        try:
            url = check_url(url.removeprefix(VLLM_PREFIX).strip())
        except ValueError as exc:
            raise ConfigError(f"--engine: {exc}") from None
        if url in seen:
            raise ConfigError(f"--engine: {redact_credentials(url)} is given twice")
        seen.add(url)
        checked.append(VLLM_PREFIX + url if vllm else url)
    return checked


async def _open(url: str, model: str | None, api_key: str | None, timeout_s: float) -> Engine:
    """The client of worker ``url``: vLLM's for ``vllm:URL`` or a plain URL whose server
    answers as vLLM (:func:`~agentwarm.engines.registry.server_kind`), else SGLang's."""
    tokenizer = model if model is not None and Path(model).is_dir() else None
    connect = min(10.0, timeout_s)
    base = url.removeprefix(VLLM_PREFIX)
    if url.startswith(VLLM_PREFIX) or await server_kind(base, connect) == "vllm":
        from agentwarm.engines.vllm import VLLMEngine

        return await VLLMEngine.from_url(
            base, tokenizer=tokenizer, api_key=api_key, timeout=timeout_s, connect_timeout=connect
        )
    return await SGLangEngine.from_url(
        url, tokenizer=tokenizer, api_key=api_key, timeout=timeout_s, connect_timeout=connect
    )


def _timed_out(summary: WarmSummary, timeout_s: float) -> WarmSummary:
    """``summary`` with a timeout's error saying which option sets it (a timeout while
    connecting comes as the ``EngineUnavailable`` of a ``/health`` with no answer in time)."""
    error = summary.error
    if error is not None and (
        error.startswith(EngineTimeout.__name__) or "no answer in time" in error
    ):
        summary.error = f"no answer within {timeout_s:g} s (--timeout): {summary.error}"
    return summary


async def served_renderer(engines: Mapping[str, Engine]) -> ChatRenderer:
    """The renderer of the model the workers serve, from ``/model_info``'s model path when it
    names a preset or a local directory; ConfigError saying to pass ``--model`` otherwise (or
    when the workers serve different models)."""
    from agentwarm.engines.tokenizers import PRESET_TOKENIZERS

    paths: dict[str, str] = {}
    for label, engine in engines.items():
        info = await engine.model_info() if isinstance(engine, SGLangEngine) else {}
        served = getattr(engine, "model", None)  # a VLLMEngine's ServedModel
        path = info.get("model_path") or getattr(served, "root", None)
        if not isinstance(path, str) or not (path in PRESET_TOKENIZERS or Path(path).is_dir()):
            raise ConfigError(
                f"worker {label} serves model {path!r}, whose tokenizer and chat template are "
                "not known here: pass --model (the preset name or a local directory with the "
                "served model's tokenizer) to render the plan's messages"
            )
        paths[label] = path
    if len(set(paths.values())) > 1:
        served = ", ".join(f"{label}: {path}" for label, path in paths.items())
        raise ConfigError(
            f"the workers serve different models ({served}): warm each model's workers with a "
            "run of their own, or pass --model"
        )
    return load_chat_renderer(next(iter(paths.values())))


def _needs_renderer(plan: Plan) -> bool:
    return any(p.messages is not None for p in plan.prefixes)


def _engines(labels: Sequence[str], opened: Sequence[object]) -> dict[str, Engine]:
    return {label: r for label, r in zip(labels, opened, strict=True) if isinstance(r, Engine)}


@contextlib.contextmanager
def _progress(show: bool) -> Iterator[Progress | None]:
    if not show:
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[tokens]} tokens"),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        yield progress


async def _warm(
    urls: list[str],
    plan_path: Path,
    plan: Plan | None,
    *,
    model: str | None,
    api_key: str | None,
    budget_fraction: float,
    show_progress: bool,
    refresh: Refresh | None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[Plan, list[WarmSummary]]:
    labels = [redact_credentials(u.removeprefix(VLLM_PREFIX)) for u in urls]
    opened = await asyncio.gather(
        *(_open(u, model, api_key, timeout_s) for u in urls), return_exceptions=True
    )
    engines = _engines(labels, opened)  # every one opened, closed below whatever happens
    failed: dict[str, WarmSummary] = {}
    try:
        for label, result in zip(labels, opened, strict=True):
            if isinstance(result, EngineError):
                failed[label] = WarmSummary(
                    worker=label,
                    kind=PrefetchKind.STATIC,
                    error=f"{type(result).__name__}: {result}",
                )
            elif isinstance(result, BaseException):
                raise result
        renderer: ChatRenderer | None = None
        problem: ConfigError | None = None
        if model is not None:
            renderer = load_chat_renderer(model)
        elif engines and (refresh is not None or (plan is not None and _needs_renderer(plan))):
            try:
                renderer = await served_renderer(engines)
            except ConfigError as exc:  # a problem only if the plan has messages to render
                problem = exc
        mined: Plan | None = None
        if refresh is not None:
            mined = refresh_plan(refresh, renderer)
            plan = mined if mined is not None else kept_plan(plan_path, refresh)
        assert plan is not None
        if renderer is None and problem is not None and _needs_renderer(plan):
            raise problem
        if mined is not None:  # usable: only now does it replace PLAN
            save_plan(mined, plan_path)
        with _progress(show_progress) as progress:
            tasks = {
                label: progress.add_task(label, total=len(plan), tokens=0)
                for label in engines
                if progress is not None
            }

            def on_prefix(summary: WarmSummary) -> None:
                if progress is not None:
                    done = summary.prefixes + summary.skipped
                    progress.update(tasks[summary.worker], completed=done, tokens=summary.tokens)

            warmed = await warm_workers(
                plan,
                engines,
                renderer=renderer,
                budget_fraction=budget_fraction,
                on_prefix=on_prefix,
            )
    finally:
        closed = await asyncio.gather(
            *(e.aclose() for e in engines.values()), return_exceptions=True
        )
        for label, error in zip(engines, closed, strict=True):
            if isinstance(error, Exception):
                typer.echo(f"warning: closing {label} failed: {error}", err=True)
    by_label = {s.worker: s for s in warmed} | failed
    return plan, [_timed_out(by_label[label], timeout_s) for label in labels]


def render_summaries(console: Console, plan: Plan, summaries: list[WarmSummary]) -> None:
    """The per-worker table (a failed worker's error by its type; the exit message has it
    all)."""
    count = f"{len(plan)} prefix" + ("" if len(plan) == 1 else "es")
    table = Table(title=f"warm-up of {count}", box=box.SIMPLE_HEAD)
    table.add_column("worker", no_wrap=True)
    for name in ("prefixes", "skipped", "tokens", "computed", "seconds", "budget"):
        table.add_column(name, justify="right")
    table.add_column("error")
    for s in summaries:
        table.add_row(
            s.worker,
            str(s.prefixes),
            str(s.skipped),
            f"{s.tokens:,}",
            f"{s.computed_tokens:,}",
            f"{s.seconds:.2f}",
            "-" if s.budget_tokens is None else f"{s.budget_tokens:,}",
            s.error.partition(":")[0] if s.error else "",  # the whole message: on stderr
        )
    console.print(table)


def _positive(value: float) -> float:
    """A Typer callback: ``value`` when it is > 0 (a usage error otherwise)."""
    if not value > 0:
        raise typer.BadParameter(f"{value:g} must be > 0")
    return value


def run(
    plan_path: Annotated[
        Path, typer.Argument(metavar="PLAN", help="Warm-up plan (JSONL: agentwarm warmup plan).")
    ],
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="Every worker to warm: http://HOST:PORT[,URL...]; vllm:URL for a vLLM server "
            "(a plain URL that answers as vLLM is taken for one).",
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Preset or local directory of the served model (renders the plan's messages; "
            "default: the workers' /model_info when it names one).",
        ),
    ] = None,
    budget_fraction: Annotated[
        float,
        typer.Option(
            "--budget-fraction",
            help="Fill at most this share (0, 1] of each worker's cache (tokens shared by "
            "prefixes count once).",
        ),
    ] = 0.5,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="AGENTWARM_API_KEY", help="Bearer key of the workers."),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            callback=_positive,
            help="Seconds a worker may stay silent on one request (then it fails, named).",
        ),
    ] = DEFAULT_TIMEOUT_S,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summaries as JSON.")] = False,
    refresh_plan_: Annotated[
        bool,
        typer.Option(
            "--refresh-plan", help="Re-mine PLAN from --from (last --since-hours) before warming."
        ),
    ] = False,
    sources: Annotated[
        list[Path] | None,
        typer.Option("--from", help="Traces or logs to mine (with --refresh-plan; repeatable)."),
    ] = None,
    since_hours: Annotated[
        float,
        typer.Option(
            "--since-hours", callback=_positive, help="Mine the last N hours only (N > 0)."
        ),
    ] = 24.0,
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Most prefixes to keep.")] = 20,
    min_share: Annotated[
        float,
        typer.Option(
            "--min-share",
            max=1.0,
            callback=_positive,
            help="Least share (0, 1] of requests per prefix.",
        ),
    ] = 0.01,
    state: Annotated[
        Path | None,
        typer.Option("--state", help="A gateway's state directory (heads of traced nodes)."),
    ] = None,
    workflow: Annotated[
        Path | None,
        typer.Option("--workflow", help="The workflow file that ran (heads of traced nodes)."),
    ] = None,
) -> None:
    """Warm every worker with PLAN at speculative priority, within a budget per worker.

    Exit codes: 0 all warmed; 1 a worker failed (the others were warmed); 2 usage error;
    130 interrupted (Ctrl-C)."""
    urls = worker_urls(engine)
    check_fraction(budget_fraction)
    refresh: Refresh | None = None
    plan: Plan | None = None
    if refresh_plan_:
        refresh = Refresh(tuple(sources or ()), since_hours, top_k, min_share, state, workflow)
    else:
        if sources:
            raise ConfigError("--from goes with --refresh-plan (re-mine PLAN before warming)")
        plan = load_plan(plan_path)
    err = Console(stderr=True)
    show = not as_json and err.is_terminal and os.environ.get(NO_PROGRESS_ENV) is None
    try:
        plan, summaries = asyncio.run(
            _warm(
                urls,
                plan_path,
                plan,
                model=model,
                api_key=api_key,
                budget_fraction=budget_fraction,
                show_progress=show,
                refresh=refresh,
                timeout_s=timeout,
            )
        )
    except KeyboardInterrupt:  # the prefills in flight were aborted, the connections closed
        typer.echo("interrupted: the warm-up stopped part-way", err=True)
        raise typer.Exit(130) from None
    if as_json:
        payload = {
            "plan": str(plan_path),
            "prefixes": len(plan),
            "workers": [s.to_dict() for s in summaries],
        }
        typer.echo(json.dumps(payload))
    else:
        out = Console()
        if not out.is_terminal:  # a log or a pipe: no terminal width to fit, keep rows whole
            out.width = max(out.width, 132)
        render_summaries(out, plan, summaries)
    failures = [s for s in summaries if s.error is not None]
    if failures:
        named = "; ".join(f"{s.worker} ({s.error})" for s in failures)
        typer.echo(
            f"error: warm-up failed on {len(failures)} of {len(summaries)} workers: {named}",
            err=True,
        )
        raise typer.Exit(1)
