"""``agentwarm warmup plan`` / ``agentwarm warmup run``: mine a warm-up plan from traffic, warm
it on workers (:mod:`agentwarm.warmup`)."""

from __future__ import annotations

import typer

from agentwarm.warmup.plan_command import plan
from agentwarm.warmup.run_command import run

__all__ = ("register",)

warmup_app = typer.Typer(
    name="warmup",
    help="Warm the prefix cache before traffic: mine a plan from traces or logs, warm workers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
warmup_app.command("plan")(plan)
warmup_app.command("run")(run)


def register(app: typer.Typer) -> None:
    """Add the ``warmup`` command group to the ``agentwarm`` app."""
    app.add_typer(warmup_app)
