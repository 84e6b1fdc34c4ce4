"""Turn errors into one-line messages and exit codes (2: the user's input, 1: the workflow or
the engine failed while running)."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

import typer

from agentwarm.errors import AgentwarmError, EngineError, WorkflowError

__all__ = ("cli_errors",)


@contextlib.contextmanager
def cli_errors(*, debug: bool = False) -> Iterator[None]:
    """Inside a command: a user error exits 2; a failed workflow or engine exits 1; each with
    one line (``debug``: preceded by the traceback)."""
    try:
        yield
    except (WorkflowError, EngineError) as exc:
        _traceback(exc, debug)
        cause = f" (caused by {type(exc.__cause__).__name__})" if exc.__cause__ else ""
        what = "workflow" if isinstance(exc, WorkflowError) else "engine"
        typer.echo(f"error: {what} failed: {exc}{cause}", err=True)
        raise typer.Exit(1) from None
    except AgentwarmError as exc:
        _traceback(exc, debug)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        _traceback(exc, debug)
        where = f"{exc.filename}: " if exc.filename else ""
        typer.echo(f"error: {where}{exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None


def _traceback(exc: BaseException, debug: bool) -> None:
    if debug:
        typer.echo("".join(traceback.format_exception(exc)).rstrip(), err=True)
