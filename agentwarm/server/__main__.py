"""``python -m agentwarm.server``: the same command as ``agentwarm serve``."""

from __future__ import annotations

import sys

import typer

from agentwarm.errors import AgentwarmError
from agentwarm.server.command import serve


def main() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(serve)
    try:
        app()
    except AgentwarmError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
