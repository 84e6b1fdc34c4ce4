"""``agentwarm gateway``: the gateway's command (:mod:`agentwarm.gateway.command`)."""

from __future__ import annotations

import typer

from agentwarm.gateway.command import gateway

__all__ = ("register",)


def register(app: typer.Typer) -> None:
    """Add the ``gateway`` command to the ``agentwarm`` app."""
    app.command("gateway")(gateway)
