"""Turn errors into one-line messages and exit codes (2: the user's input, 1: the workflow or
the engine failed while running)."""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import typer

import agentwarm
from agentwarm.errors import AgentwarmError, EngineError, WorkflowError

__all__ = ("cli_errors", "plain_warnings")

_PACKAGE_DIR = Path(agentwarm.__file__).resolve().parent


@contextlib.contextmanager
def cli_errors(*, debug: bool = False, json_failure: bool = False) -> Iterator[None]:
    """Inside a command: a user error exits 2; a failed workflow or engine exits 1; each with
    one line (``debug``: preceded by the traceback). ``json_failure`` (a ``--json`` command):
    a failure also prints ``{"error": "..."}`` on stdout, so stdout is still one JSON object."""
    try:
        yield
    except (WorkflowError, EngineError) as exc:
        _traceback(exc, debug)
        cause = f" (caused by {type(exc.__cause__).__name__})" if exc.__cause__ else ""
        what = "workflow" if isinstance(exc, WorkflowError) else "engine"
        message = f"{what} failed: {exc}{cause}"
        if json_failure:
            typer.echo(json.dumps({"error": message}))
        typer.echo(f"error: {message}", err=True)
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


def _is_agentwarms(category: type[Warning], filename: str) -> bool:
    """A warning of an agentwarm category, or one raised from agentwarm's own code."""
    if category.__module__.partition(".")[0] == "agentwarm":
        return True
    return Path(filename).resolve().is_relative_to(_PACKAGE_DIR)


@contextlib.contextmanager
def plain_warnings() -> Iterator[None]:
    """While the CLI runs: agentwarm's warnings are one ``warning: ...`` line on stderr (no
    source location); other warnings, and library users, keep Python's usual format."""
    original = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not _is_agentwarms(category, filename):
            original(message, category, filename, lineno, file, line)
            return
        out = file if file is not None else sys.stderr
        with contextlib.suppress(OSError):  # stderr gone: lost, as Python's own would be
            out.write(f"warning: {message}\n")

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = original
