"""``agentwarm serve``: the server's ``serve`` command (:mod:`agentwarm.server.command`)."""

from __future__ import annotations

import typer

from agentwarm.server.command import serve

__all__ = ("register",)


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to the ``agentwarm`` app."""
    app.command("serve")(serve)
