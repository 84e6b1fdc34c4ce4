"""The ``agentwarm`` command as a click command, and its reference as Markdown.

``docs/cli.md`` is filled in at build time from :func:`markdown` (the mkdocs hook
``docs/_hooks/cli_reference.py``), and ``tests/test_docs.py`` checks the command lines of the
README and the docs against :data:`command`, so neither copies a flag by hand.
"""

from __future__ import annotations

import html
from typing import Any

import typer

from agentwarm.cli import app

__all__ = ("command", "markdown")

#: The typer app's click command: a group with one subcommand per ``agentwarm`` verb.
command = typer.main.get_command(app)


def _text(value: str) -> str:
    """Help text as Markdown that renders literally (no HTML, emphasis or table breaks)."""
    return (
        html.escape(" ".join(value.split()), quote=False).replace("|", "&#124;").replace("*", "\\*")
    )


def _code(value: str) -> str:
    return "`" + value.replace("|", "&#124;") + "`"


def _section(cmd: Any, path: list[str], depth: int, out: list[str]) -> None:
    ctx = cmd.context_class(cmd, info_name=" ".join(path))
    out += [f"{'#' * depth} {' '.join(path)}", ""]
    for paragraph in (cmd.help or "").split("\n\n"):
        text = "\n".join(line for line in paragraph.splitlines() if line.strip() != "\b")
        if text.strip():
            out += [_text(text), ""]
    usage = cmd.get_usage(ctx).removeprefix("Usage:").strip()
    out += ["```text", usage, "```", ""]
    params = [p for p in cmd.params if not getattr(p, "hidden", False)]
    arguments = [p for p in params if p.param_type_name == "argument"]
    options = [p for p in params if p.param_type_name == "option"]
    if arguments:
        out += ["| Argument | Description |", "|---|---|"]
        for p in arguments:
            name = p.metavar or (p.name or "").upper()
            required = " (required)" if p.required else ""
            out.append(f"| {_code(name)} | {_text(p.help or '')}{required} |")
        out.append("")
    if options:
        out += ["| Option | Description |", "|---|---|"]
        for p in options:
            record = p.get_help_record(ctx)
            if record is None:
                continue
            names, help_text = record
            out.append(f"| {_code(names)} | {_text(help_text)} |")
        out.append("")
    for name in sorted(getattr(cmd, "commands", {})):
        _section(cmd.commands[name], [*path, name], depth + 1, out)


def markdown(depth: int = 2) -> str:
    """The reference of every subcommand: its help, usage, arguments and options."""
    out: list[str] = []
    commands: dict[str, Any] = getattr(command, "commands", {})
    for name in sorted(commands):
        _section(commands[name], ["agentwarm", name], depth, out)
    return "\n".join(out)
