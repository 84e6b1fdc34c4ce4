"""Mid-decode hints: read a step's output as it streams and name the successor it points to as
soon as the partial text makes it unambiguous. Pure: text in, a node name (or ``None``) out.

Evidence, strongest first:

* a **tool call's name** — the first ``"name": "X"`` of a call object (not one in its
  arguments) inside a tool-call block (Hermes/Qwen ``<tool_call>``, Mistral ``[TOOL_CALLS]``,
  Llama 3's ``<|python_tag|>`` or a reply that is a JSON object or list; see
  :mod:`agentwarm.chat.toolcalls`), complete once its closing quote has arrived; X names a
  successor directly or through a route keyword;
* a **handoff** ``transfer_to_X`` (X a successor), complete once a non-word character follows;
* a **successor's name** or a **route keyword** the node declares (``@node(hints={keyword:
  successor})``, matched case-insensitively) as a whole word. A word is complete only once a
  non-word character follows it ("bill" is not yet "billing"; "billing" at the very end of the
  text so far may still grow).

Strong evidence (a call's name, a handoff) names its successor at once. Word evidence names one
only while every word seen so far points to the same successor: two successors named is
ambiguous, and words name nothing after that. Each scanner names at most one successor (the
first hint); feed it the chunks of one output in order.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping

__all__ = ("HintScanner",)

#: Characters that continue a name: a name is whole when neither side touches one.
_WORD = r"[\w-]"
_NAME = re.compile(r'"name"\s*:\s*"([^"\\]{1,200})"')
_NAME_KEY = re.compile(r'"name"\s*:')
_HANDOFF = re.compile(rf"(?<!{_WORD})transfer_to_({_WORD}+)(?=[^\w-])")
_CALL_MARKERS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>")
#: How far before the new text a match may start (a call's name, a long name or keyword).
_LOOKBACK = 256


class HintScanner:
    """Incremental scanner of one LLM output (see the module docstring).

    ``successors`` are the node's successors a hint may name (END and nodes that would not be
    prefetched left out by the caller); ``words`` those that count when named as a bare word
    (default: all of ``successors``; short names occur in text by chance); ``keywords`` maps a
    route keyword to the successor it names.
    """

    def __init__(
        self,
        successors: Iterable[str],
        *,
        words: Iterable[str] | None = None,
        keywords: Mapping[str, str] | None = None,
    ) -> None:
        self.successors = frozenset(successors)
        named = self.successors if words is None else frozenset(words) & self.successors
        self._keywords = {
            k.lower(): v for k, v in (keywords or {}).items() if k and v in self.successors
        }
        terms = sorted({*named, *self._keywords}, key=len, reverse=True)
        self._words: re.Pattern[str] | None = None
        if terms:
            alternation = "|".join(re.escape(t) for t in terms)
            self._words = re.compile(rf"(?<!{_WORD})({alternation})(?=[^\w-])", flags=re.IGNORECASE)
        self._named = named
        self._longest = max((len(t) for t in terms), default=0)
        self.text = ""
        self.hint: str | None = None
        self._in_call = False
        self._first: str | None = None  # the reply's first non-space character
        self._seen: set[str] = set()
        self._ambiguous = False
        # The JSON of the calls, from where it starts: outermost objects' starts (one call
        # each), brace depth and string state up to ``_scanned``.
        self._call_from = 0
        self._scanned = 0
        self._opens: list[int] = []
        self._depth = 0
        self._in_str = self._escaped = False

    def feed(self, chunk: str) -> str | None:
        """Add the next piece of output; the successor it names, the first time one is named
        unambiguously (then ``None`` for every later chunk)."""
        if self.hint is not None or not chunk or not self.successors:
            self.text += chunk
            return None
        start = max(0, len(self.text) - _LOOKBACK - self._longest)
        self.text += chunk
        if not self._in_call:  # a reply that is JSON, or a call marker (in the new text)
            if self._first is None and (head := self.text.lstrip()):
                self._first = head[0]
            recent = self.text[start:]
            self._in_call = self._first in ("{", "[") or any(m in recent for m in _CALL_MARKERS)
            if self._in_call and self._first not in ("{", "["):
                self._call_from = self._scanned = min(
                    i for m in _CALL_MARKERS if (i := self.text.find(m)) >= 0
                )
        hint = self._strong(start) or self._by_words(start)
        if hint is not None:
            self.hint = hint
        return hint

    def _target(self, name: str) -> str | None:
        if name in self.successors:
            return name
        return self._keywords.get(name.lower())

    def _strong(self, start: int) -> str | None:
        if self._in_call:
            for match in _NAME.finditer(self.text, start):
                target = self._target(match.group(1))
                if target is not None and self._first_name_of_call(match.start()):
                    return target
        for match in _HANDOFF.finditer(self.text, start):
            if match.group(1) in self.successors:
                return match.group(1)
        return None

    def _first_name_of_call(self, at: int) -> bool:
        """Whether the ``"name"`` key at ``at`` is its call object's first (an outermost
        object: a ``"name"`` in the call's arguments names no tool)."""
        self._scan_to(at)
        i = bisect.bisect_right(self._opens, at) - 1
        opened = self._opens[i] if i >= 0 else self._call_from
        return _NAME_KEY.search(self.text, opened, at) is None

    def _scan_to(self, end: int) -> None:
        for c in self.text[self._scanned : end]:
            if self._in_str:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_str = False
            elif c == '"':
                self._in_str = True
            elif c == "{":
                if self._depth == 0:
                    self._opens.append(self._scanned)
                self._depth += 1
            elif c == "}":
                self._depth = max(0, self._depth - 1)
            self._scanned += 1

    def _by_words(self, start: int) -> str | None:
        if self._words is None or self._ambiguous:
            return None
        for match in self._words.finditer(self.text, start):
            word = match.group(1)
            if word in self._named:
                self._seen.add(word)
            elif (target := self._keywords.get(word.lower())) is not None:
                self._seen.add(target)
        if len(self._seen) > 1:
            self._ambiguous = True
            return None
        return next(iter(self._seen)) if self._seen else None
