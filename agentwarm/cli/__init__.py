"""The ``agentwarm`` command line: a thin layer mapping flags onto the public API.

Every user error (bad path, bad option value, unreachable engine) ends with a one-line message
and exit code 2; a failing workflow exits with 1.
"""

from __future__ import annotations

import importlib
import sys

import typer

from agentwarm.cli._errors import plain_warnings
from agentwarm.errors import AgentwarmError

__all__ = ("app", "main")

app = typer.Typer(
    name="agentwarm",
    help="Run LLM agent workflows with speculative prefix-cache prefetching.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in ("run", "stats", "graph", "serve", "gateway", "bench", "warmup", "fit"):
    try:
        _mod = importlib.import_module(f"agentwarm.cli.{_module}")
    except ModuleNotFoundError as _exc:  # a command whose module is not there yet
        if _exc.name != f"agentwarm.cli.{_module}":
            raise
        continue
    _mod.register(app)


def main() -> None:
    """Console-script entry point."""
    try:
        with plain_warnings():
            app()
    except AgentwarmError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
