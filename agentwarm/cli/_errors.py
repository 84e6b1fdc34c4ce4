"""Turn errors into one-line messages and exit codes (2: the user's input, 1: the workflow)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer

from agentwarm.errors import AgentwarmError, WorkflowError

__all__ = ("cli_errors",)


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Inside a command: a user error exits 2, a failed workflow exits 1, each with one line."""
    try:
        yield
    except WorkflowError as exc:
        cause = f" (caused by {type(exc.__cause__).__name__})" if exc.__cause__ else ""
        typer.echo(f"error: workflow failed: {exc}{cause}", err=True)
        raise typer.Exit(1) from None
    except AgentwarmError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        typer.echo(f"error: {where}{exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
