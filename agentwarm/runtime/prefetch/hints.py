"""Output hints: a step's LLM output that names one of the node's successors makes that
successor a prefetch candidate; the step's own output often names the next tool. Read once the
output is complete (:func:`output_hint`), or as it streams (:func:`scanner_for`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from agentwarm._spec import END, NodeSpec
from agentwarm.runtime.prefetch.scanner import HintScanner

__all__ = ("MIN_HINT_LEN", "named_successor", "output_hint", "scanner_for")

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


def output_hint(
    text: str, spec: NodeSpec, successors: Sequence[str], reads_prompt: Callable[[str], bool]
) -> str | None:
    """The successor a finished LLM output of ``spec``'s step names: its only successor named
    as a word (:func:`named_successor`), else what a :func:`scanner_for` reads in the whole
    text (a tool call's name, a handoff, a route keyword)."""
    named = named_successor(text, successors, reads_prompt=reads_prompt)
    if named is not None:
        return named
    scanner = scanner_for(spec, successors, reads_prompt)
    # The text is complete: a word at its very end is complete too.
    return scanner.feed(text + "\n") if scanner is not None else None


def scanner_for(
    spec: NodeSpec, successors: Sequence[str], reads_prompt: Callable[[str], bool]
) -> HintScanner | None:
    """A :class:`~agentwarm.runtime.prefetch.scanner.HintScanner` for one LLM output of
    ``spec``'s step (with its route keywords, ``spec.hints``); ``None`` when no successor can
    be hinted: only END, or nodes that read no prompt."""
    targets = [n for n in successors if n != END and reads_prompt(n)]
    if not targets:
        return None
    words = [n for n in targets if len(n) >= MIN_HINT_LEN]
    return HintScanner(targets, words=words, keywords=spec.hints)
