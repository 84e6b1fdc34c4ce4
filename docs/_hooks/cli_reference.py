"""mkdocs hook: fills ``docs/cli.md``'s marker with the reference generated from the typer app."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- agentwarm-cli-reference -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    from agentwarm.cli.reference import markdown as reference

    return markdown.replace(MARKER, reference())
