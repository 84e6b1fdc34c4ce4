"""What ``agentwarm run`` prints: the runs table, the last run's steps, the summary line, the
failed runs and the Ctrl-C note."""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from agentwarm._fmt import NA, ms, pct, plural, reasons
from agentwarm.errors import AgentwarmError, EngineError, EngineUnavailable
from agentwarm.runtime import RunResult, StepOutcome, summarize
from agentwarm.runtime.node_call import SYNC_THREAD_PREFIX

__all__ = ("Failure", "interrupted", "render", "report_failures")


@dataclass(frozen=True, slots=True)
class Failure:
    """A run that did not complete: its 1-based index, input and error."""

    run: int
    input: str
    error: AgentwarmError

    def describe(self) -> str:
        """The error, naming the node it happened in (when the message does not already)."""
        exc = self.error
        text = str(exc)
        if isinstance(exc, EngineError):
            text = f"{type(exc).__name__}: {text}"
        if exc.node is not None and f"'{exc.node}'" not in text:
            text = f"Node '{exc.node}': {text}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "input": self.input, "error": self.describe()}


def render(
    console: Console,
    done: list[tuple[int, RunResult]],
    failed: list[Failure],
    summary: dict[str, Any],
    prefetch: bool,
) -> None:
    """Print the runs table, the last completed run's steps and the summary line. Without
    prefetching, the branch-hit, acceptance and prefetch figures (n/a by construction) are
    left out; a rate with nothing behind it reads :data:`NA`."""
    results = [r for _, r in done]
    runs = Table(title="Runs", title_justify="left", header_style="bold")
    cols = ["run", "steps", "branch hits", "hit rate so far", "cached / prompt tok", "mean TTFT ms"]
    if not prefetch:
        cols = [c for c in cols if c not in ("branch hits", "hit rate so far")]
    for col in cols:
        runs.add_column(col, justify="right")
    rows: list[tuple[int, list[str]]] = []
    for n, (i, r) in enumerate(done, 1):
        s = r.summary()
        hits = [pct(s["branch_hit_rate"]), pct(summarize(results[:n])["branch_hit_rate"])]
        rows.append(
            (
                i,
                [
                    str(i),
                    str(s["steps"]),
                    *(hits if prefetch else []),
                    f"{s['cached_tokens']} / {s['prompt_tokens']}",
                    ms(s["ttft_mean_s"]),
                ],
            )
        )
    for f in failed:
        rows.append((f.run, [str(f.run), "[red]failed[/]", *[NA] * (len(cols) - 2)]))
    for _, row in sorted(rows, key=lambda r: r[0]):
        runs.add_row(*row)
    console.print(runs)
    if done:
        index, last = done[-1]
        _render_steps(console, index, last, prefetch)
    total = len(done) + len(failed)
    head = f"[bold]{summary['workflow']}[/]: {plural(len(done), 'run')}"
    if failed:
        head += f" of {total} completed, [red]{len(failed)} failed[/]"
    prompt = summary["prompt_tokens"]
    parts = [f"{head}, {plural(summary['steps'], 'step')}"]
    if prefetch:
        parts.append(
            f"branch hit rate [bold]{pct(summary['branch_hit_rate'])}[/] · acceptance "
            f"{pct(summary['acceptance_ratio'])} ({summary['prefetch_hits']}/"
            f"{summary['prefetches_issued']})"
        )
        if summary["prefetches_dropped"]:
            parts.append(f"{summary['prefetches_dropped']} dropped by admission")
        if summary["branch_steps"]:
            parts.append(f"miss reasons: {reasons(summary['miss_reasons'])}")
    parts.append(
        f"cached {summary['cached_tokens']}/{summary['prompt_tokens']} tok "
        f"({pct(summary['cached_tokens'] / prompt if prompt else None)})"
    )
    if prefetch:
        parts.append(f"wasted {summary['wasted_tokens']} tok")
    parts.append(f"TTFT p50 {ms(summary['ttft_p50_s'])} ms, p95 {ms(summary['ttft_p95_s'])} ms")
    console.print(" · ".join(parts))


def _render_steps(console: Console, index: int, last: RunResult, prefetch: bool) -> None:
    steps = Table(title=f"Steps of run {index}", title_justify="left", header_style="bold")
    cols = ["#", "node", "TTFT ms", "prompt tok", "cached tok", "outcome", "prefetched"]
    if not prefetch:
        cols = cols[:-2]
    for col in cols:
        steps.add_column(col, justify="left" if col in ("node", "prefetched") else "right")
    style = {StepOutcome.HIT: "green", StepOutcome.MISS: "red", StepOutcome.NONE: "dim"}
    for st in last.steps:
        pre = ", ".join(
            f"{p.target} {p.probability:.2f} {p.outcome}" for p in st.prefetches if p.speculative
        )
        row = [
            str(st.index),
            st.node,
            ms(st.ttft_s),
            str(st.prompt_tokens),
            str(st.cached_tokens),
        ]
        if prefetch:
            row += [f"[{style[st.outcome]}]{st.outcome}[/]", pre or NA]
        steps.add_row(*row)
    console.print(steps)
    console.print(f"path of run {index}: " + " → ".join(last.path))


def report_failures(failed: list[Failure], total: int, *, debug: bool) -> None:
    for f in failed:
        shown = f.input if len(f.input) <= 60 else f.input[:57] + "..."
        typer.echo(f"error: run {f.run} (input {shown!r}) failed: {f.describe()}", err=True)
        if debug:
            typer.echo("".join(traceback.format_exception(f.error)).rstrip(), err=True)
    last = failed[-1]
    if isinstance(last.error, EngineUnavailable) and last.run < total:
        typer.echo(
            f"error: the engine is unavailable: stopped after run {last.run}; "
            f"{plural(total - last.run, 'run')} not started",
            err=True,
        )


def interrupted() -> None:
    abandoned = sorted(
        t.name.removeprefix(SYNC_THREAD_PREFIX)
        for t in threading.enumerate()
        if t.name.startswith(SYNC_THREAD_PREFIX) and t.is_alive()
    )
    note = (
        f"; the thread of sync node(s) {', '.join(repr(n) for n in abandoned)} is abandoned "
        "(still running until the process exits)"
        if abandoned
        else ""
    )
    typer.echo(f"interrupted: the run was cancelled{note}", err=True)
