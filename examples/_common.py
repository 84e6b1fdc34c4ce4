"""Helpers shared by the examples (not part of the agentwarm API)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence

#: Simulated latency of a tool call or a user's reply, in seconds. While it runs the engine is
#: idle, which is when agentwarm prefetches the next step.
TOOL_LATENCY_S = float(os.environ.get("AGENTWARM_EXAMPLE_TOOL_LATENCY", "0.05"))


async def tool_call(seconds: float | None = None) -> None:
    await asyncio.sleep(TOOL_LATENCY_S if seconds is None else seconds)


def route(reply: str, choices: Sequence[str], fallback: str) -> str:
    """The choice the model's reply names (as a word), if exactly one; else ``fallback``.

    With a real checkpoint the model's own routing decision wins; with random weights the reply
    names nothing and the example's keyword rule (``fallback``) decides.
    """
    named = [c for c in choices if re.search(rf"\b{re.escape(c)}\b", reply.lower())]
    return named[0] if len(named) == 1 else fallback


def keyword(text: str, rules: Sequence[tuple[Sequence[str], str]], default: str) -> str:
    """First rule whose keywords occur in ``text`` (case-insensitive)."""
    low = text.lower()
    for words, target in rules:
        if any(w in low for w in words):
            return target
    return default


def tool(name: str, description: str, **params: tuple[str, str]) -> dict[str, object]:
    """An OpenAI-style function schema; ``params`` map name -> (json type, description)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": t, "description": d} for k, (t, d) in params.items()},
                "required": list(params),
            },
        },
    }
