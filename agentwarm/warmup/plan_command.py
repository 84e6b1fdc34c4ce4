"""``agentwarm warmup plan``: mine a warm-up plan from request logs or traces
(:func:`~agentwarm.warmup.mine.mine_plan`) and print or save it.

Without ``-o`` the plan's JSONL goes to stdout; with ``-o PLAN`` it is written there and one
summary line (prefixes, requests read, tokens) goes to stderr. Bad input raises
:class:`~agentwarm.errors.ConfigError` (the CLI prints it, exit code 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentwarm.errors import ConfigError
from agentwarm.warmup.mine import mine
from agentwarm.warmup.render import load_chat_renderer
from agentwarm.warmup.types import plan_lines, save_plan

__all__ = ("plan",)


def plan(
    sources: Annotated[
        list[Path],
        typer.Option(
            "--from",
            metavar="PATH",
            help="A request log (JSONL of chat request bodies or input_ids) or an agentwarm "
            "trace (run/gateway --trace); repeat for more.",
        ),
    ],
    top_k: Annotated[
        int, typer.Option("--top-k", min=1, help="Keep the K most valuable prefixes.")
    ] = 20,
    min_share: Annotated[
        float,
        typer.Option(
            "--min-share",
            min=0.0,
            max=1.0,
            help="Keep prefixes at least this share of the requests start with (0.01: 1%).",
        ),
    ] = 0.01,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="The served model's preset or checkpoint dir (its tokenizer and chat "
            "template count the prefixes' tokens).",
        ),
    ] = "tiny",
    since_hours: Annotated[
        float | None,
        typer.Option("--since-hours", metavar="H", help="Mine only the last H hours."),
    ] = None,
    state: Annotated[
        Path | None,
        typer.Option(
            "--state", metavar="DIR", help="A gateway's state dir: the heads of traced nodes."
        ),
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            metavar="FILE[:WORKFLOW]",
            help="The workflow that was traced: the heads of its nodes.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="PLAN", help="Write the plan here (JSONL)."),
    ] = None,
) -> None:
    """Mine a warm-up plan: the prefixes most requests start with, one JSON line each.

    Most valuable first (share x tokens); without -o the plan goes to stdout."""
    mined = mine(
        sources,
        renderer=load_chat_renderer(model),
        top_k=top_k,
        min_share=min_share,
        since_s=None if since_hours is None else since_hours * 3600.0,
        state_dir=state,
        workflow=None if workflow is None else Path(workflow),
    )
    if output is None:
        for line in plan_lines(mined.plan.prefixes):
            typer.echo(line)
        return
    try:
        save_plan(mined.plan, output)
    except OSError as exc:
        raise ConfigError(
            f"--output {output}: cannot write the plan ({exc.strerror or exc}); "
            "give a writable path"
        ) from None
    typer.echo(
        f"agentwarm warmup plan: {len(mined.plan)} prefixes from {mined.requests} requests, "
        f"{mined.tokens} tokens -> {output}",
        err=True,
    )
