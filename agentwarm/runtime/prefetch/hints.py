"""Output hints: a step's LLM output that names one of the node's successors (as a word) makes
that successor a prefetch candidate; the step's own output often names the next tool."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from agentwarm._spec import END

__all__ = ("MIN_HINT_LEN", "named_successor")

#: Shorter node names ("a", "go") occur in text by chance; they are not taken as hints.
MIN_HINT_LEN = 3


def named_successor(
    text: str, successors: Iterable[str], *, reads_prompt: Callable[[str], bool]
) -> str | None:
    """The one successor named in ``text`` (not END, at least :data:`MIN_HINT_LEN` long, and
    reading its prompt); ``None`` when none or several are named."""
    if not text:
        return None
    named = [
        n
        for n in successors
        if n != END
        and len(n) >= MIN_HINT_LEN
        and reads_prompt(n)
        and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)
    ]
    return named[0] if len(named) == 1 else None
