"""``agentwarm stats TRACE.jsonl...``: branch hit rates and prefetch waste from trace files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentwarm._fmt import NA, ms, pct, plural, reasons
from agentwarm.cli._errors import cli_errors
from agentwarm.errors import ConfigError
from agentwarm.stats import Problem, TraceData, TraceStats, compute_stats, read_traces

__all__ = ("hit_rate_style", "print_problems", "register", "stats")

MAX_PROBLEMS_SHOWN = 20


def hit_rate_style(rate: float | None) -> str:
    """Rich style for a hit rate: green from 0.7 (the guardrail's default), red below 0.3."""
    if rate is None:
        return "dim"
    return "green" if rate >= 0.7 else "yellow" if rate >= 0.3 else "red"


def print_problems(problems: list[Problem]) -> None:
    """Report skipped trace lines on stderr, one per line, at most :data:`MAX_PROBLEMS_SHOWN`."""
    for p in problems[:MAX_PROBLEMS_SHOWN]:
        typer.echo(f"warning: skipped {p}", err=True)
    if len(problems) > MAX_PROBLEMS_SHOWN:
        typer.echo(
            f"warning: ... and {len(problems) - MAX_PROBLEMS_SHOWN} more skipped lines", err=True
        )


def _table(st: TraceStats) -> Table:
    several = len(st.workflows) > 1
    table = Table(title="Branches (from → to)", title_justify="left", header_style="bold")
    if several:
        table.add_column("workflow")
    table.add_column("from → to")
    for col in ("taken", "prefetched", "hits", "hit rate", "wasted tok"):
        table.add_column(col, justify="right")
    table.add_column("TTFT hit ms", justify="right")
    table.add_column("TTFT miss ms", justify="right")
    for e in st.edges:
        row: list[str | Text] = [e.workflow] if several else []
        row += [
            f"{e.from_node} → {e.to_node}",
            str(e.taken),
            str(e.prefetched),
            str(e.hits),
            Text(pct(e.hit_rate), style=hit_rate_style(e.hit_rate)),
            str(e.wasted_tokens),
            ms(e.ttft_hit_mean_s),
            ms(e.ttft_miss_mean_s),
        ]
        table.add_row(*row)
    return table


def _summary(st: TraceStats) -> Text:
    out = Text()
    out.append("branch hit rate   ")
    if st.branch_hit_rate is not None:
        out.append(pct(st.branch_hit_rate, 1), style=hit_rate_style(st.branch_hit_rate))
        out.append(f"  ({st.branch_hits}/{plural(st.branch_steps, 'step')} after a run's first)\n")
    elif not st.branch_steps:
        out.append(f"{NA}  (no step after a run's first)\n")
    else:
        out.append(f"{NA}  (nothing prefetched)\n")
    if st.acceptance_ratio is not None:
        out.append(f"acceptance ratio  {pct(st.acceptance_ratio, 1)}")
        out.append(f"  ({st.prefetch_hits}/{st.prefetches_issued} speculative prefills used)\n")
    else:
        out.append(f"acceptance ratio  {NA}  (no speculative prefills)\n")
    if st.branch_steps:
        out.append(f"miss reasons      {reasons(st.miss_reasons)}")
        out.append(f"  ({st.short_hits} of them hits not found whole in the cache)\n", "dim")
    if st.prefetches_dropped:
        out.append(f"dropped           {st.prefetches_dropped}")
        out.append("  (speculative prefills refused by admission: over rate or budget)\n", "dim")
    out.append(f"wasted tokens     {st.wasted_tokens}\n")
    out.append(f"cached tokens     {st.cached_tokens}/{st.prompt_tokens} prompt tokens")
    if st.disk_cached_tokens is not None:
        out.append(f", {st.disk_cached_tokens} of them loaded from the disk tier")
    out.append("\n")
    out.append(f"TTFT p50 / p95    {ms(st.ttft_p50_s)} / {ms(st.ttft_p95_s)} ms\n")
    if st.ttft_saved_s is None:
        out.append("TTFT saved (est.) n/a")
        out.append("  (no hit node also ran without a prefetch: no baseline)", "dim")
    else:
        out.append(f"TTFT saved (est.) {ms(st.ttft_saved_s)} ms")
        out.append("  (Σ over hits: node's mean TTFT when not prefetched − TTFT of the hit)", "dim")
    h = st.hints
    if h.hint_steps:
        right = "" if h.hints_right is None else f", {h.hints_right} right"
        out.append(f"\nmid-decode hints  {plural(h.hint_steps, 'step')}{right}")
        out.append(f", lead mean / p50 {ms(h.hint_lead_mean_s)} / {ms(h.hint_lead_p50_s)} ms")
        out.append("  (hint read from the streamed output → step end)", "dim")
    return out


def _warm_ups(st: TraceStats) -> Table:
    table = Table(
        title="Warm-ups (not speculation: outside the prefetch figures)",
        title_justify="left",
        header_style="bold",
    )
    table.add_column("kind", no_wrap=True)
    for col in ("prefills", "dropped", "failed", "tokens", "written", "already cached", "%"):
        table.add_column(col, justify="right")
    for w in st.warm_ups:
        table.add_row(
            str(w.kind),
            str(w.prefills),
            str(w.dropped),
            str(w.failed),
            str(w.tokens),
            str(w.written_tokens),
            str(w.already_cached_tokens),
            pct(w.already_cached_ratio, 1),
        )
    return table


def _warm_up_note(st: TraceStats) -> Text:
    out = Text(style="dim")
    out.append("written: tokens the engine computed for them (cache writes); already cached: ")
    out.append("tokens of the completed ones that were in the cache when the warm-up ran (%: ")
    out.append("their share of already cached + written; not the live requests' cache reads)\n")
    out.append(f"live requests read {st.cached_tokens}/{st.prompt_tokens} prompt tokens from ")
    out.append("the cache; which warm-up kind each came from is not in the spans")
    return out


def _require_spans(
    st: TraceStats, data: TraceData, traces: list[Path], workflow: str | None
) -> None:
    """Nothing to report is the user's mistake (wrong file, wrong workflow name): exit 2."""
    if st.steps or st.prefetches_issued or st.prefetches_dropped or st.warm_ups:
        return
    where = f"{plural(len(traces), 'file')} ({plural(data.spans, 'span')} read)"
    if workflow is not None and (data.steps or data.prefills):
        known = sorted({s.workflow for s in data.steps} | {p.workflow for p in data.prefills})
        raise ConfigError(
            f"no spans of workflow '{workflow}' in {where}; "
            f"the traces hold {', '.join(repr(k) for k in known)}: fix --workflow"
        )
    raise ConfigError(
        f"no agentwarm step or prefill spans in {where}; "
        "write traces with `agentwarm run --trace FILE`"
    )


def stats(
    traces: Annotated[
        list[Path],
        typer.Argument(
            metavar="TRACE.jsonl", help="Trace files written by `agentwarm run --trace`."
        ),
    ],
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
    workflow: Annotated[
        str | None, typer.Option("--workflow", "-w", help="Only this workflow's spans.")
    ] = None,
) -> None:
    """Per-edge branch hit rates, prefetch acceptance and waste, TTFT on hit vs miss."""
    with cli_errors():
        data = read_traces(traces)
        print_problems(data.problems)
        st = compute_stats(data.steps, data.prefills, workflow=workflow, runs=data.runs)
        _require_spans(st, data, traces, workflow)
    if json_out:
        out = st.to_dict()
        out["files"] = [str(p) for p in traces]
        out["skipped_lines"] = len(data.problems)
        typer.echo(json.dumps(out, indent=2, allow_nan=False))  # never Infinity or NaN
        return
    console = Console(highlight=False)
    head = f"{plural(st.runs, 'run')} · {plural(st.steps, 'step')} · {plural(len(traces), 'file')}"
    if st.workflow is not None:
        head = f"{st.workflow}: {head}"
    console.print(head, style="bold")
    if st.steps or st.prefetches_issued or st.prefetches_dropped:  # not only warm-ups
        console.print(_table(st))
        console.print(_summary(st))
    if st.warm_ups:
        console.print(_warm_ups(st))
        console.print(_warm_up_note(st))


def register(app: typer.Typer) -> None:
    """Add the ``stats`` command to ``app``."""
    app.command("stats")(stats)
