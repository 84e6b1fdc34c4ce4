"""The features a :class:`~agentwarm.predictors.content.ContentPredictor` reads from a path and
its :class:`~agentwarm.predictors.context.StepContext`: hashed indicator features for the
logistic model and the word set the example memory compares.

Every feature is a string, hashed with CRC-32 (:func:`~.memory.crc`: stable across processes and
Python versions, unlike ``hash``) into one of ``buckets`` rows. The strings, with ``c`` the
current node:

* path: ``c``, the last two nodes, each node visited so far;
* the last tool result's kind per ``c`` (``none``, ``empty``, ``error``, ``ok``);
* words of the last user message (alone, in pairs, and with ``c``), of the last tool result,
  of the last assistant text, of the last tool call's arguments, and of the first user message
  with the path length (where in the task the run is);
* shapes in the last user and assistant texts, with ``c``: an id-like token (six capitals and
  digits, ``word_word_123``), a question, a consent (``yes``, ``sure``, ``ok``), a stop marker
  (``###``).

Texts are read up to their first :data:`~agentwarm.predictors.context.MAX_TEXT` characters
(tool results up to :data:`RESULT_CHARS`), so a prediction's work is bounded.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from agentwarm.predictors.content.memory import crc, mask
from agentwarm.predictors.context import StepContext

__all__ = ("RESULT_CHARS", "hashed", "memory_words", "names", "words")

#: How much of a tool result the features read (its start says what it is).
RESULT_CHARS = 500
_WORD = re.compile(r"[a-z]+|\d+|#+")
_ID_CODE = re.compile(r"\b[A-Z0-9]{6}\b")
_ID_NAME = re.compile(r"\b[a-z]+_[a-z]+_\d+\b")
_CONSENT = ("yes", "sure", "ok")
#: Path lengths above this share one key.
_LENGTH_CAP = 20


def words(text: str, limit: int | None = None) -> list[str]:
    """The lower-case words (letters, digit runs, ``#`` runs) of ``text[:limit]``, in order."""
    return _WORD.findall((text if limit is None else text[:limit]).lower())


def _result_kind(result: str) -> str:
    stripped = result.strip()
    if not stripped:
        return "none"
    if stripped in ("[]", "{}", '""', "null"):
        return "empty"
    return "error" if stripped.lower().startswith("error") else "ok"


def _shapes(name: str, text: str, current: str) -> list[str]:
    out = []
    if _ID_CODE.search(text):
        out.append(f"id_code|{name}|{current}")
    if _ID_NAME.search(text):
        out.append(f"id_name|{name}|{current}")
    if "###" in text:
        out.append(f"stop|{name}")
    if text.lstrip().lower().startswith(_CONSENT):
        out.append(f"consent|{name}|{current}")
    if text.rstrip().endswith("?"):
        out.append(f"question|{name}|{current}")
    return out


def names(path: Sequence[str], context: StepContext) -> list[str]:
    """The feature strings of ``path`` (non-empty) in ``context``, without repeats."""
    current = path[-1]
    previous = path[-2] if len(path) > 1 else "^"
    out = ["bias", f"c={current}", f"p={previous}>{current}"]
    out += [f"v={node}" for node in dict.fromkeys(path)]
    out.append(f"result={_result_kind(context.last_tool_result)}|{current}")
    user = words(context.last_user)
    out += [f"u={w}" for w in user]
    out += [f"u2={a}_{b}" for a, b in itertools.pairwise(user)]
    out += [f"uc={w}|{current}" for w in user]
    out += [f"r={w}" for w in words(context.last_tool_result, RESULT_CHARS)]
    out += [f"a={w}" for w in words(context.last_assistant)]
    out += [f"args={w}" for w in words(context.last_tool_args)]
    length = min(len(path), _LENGTH_CAP)
    out += [f"task={w}|{length}" for w in words(context.first_user)]
    out += _shapes("user", context.last_user, current)
    out += _shapes("assistant", context.last_assistant, current)
    return list(dict.fromkeys(out))


def hashed(features: Sequence[str], buckets: int) -> list[int]:
    """The sorted, distinct rows of ``features`` among ``buckets``."""
    return sorted({crc(f) % buckets for f in features})


def memory_words(context: StepContext) -> int:
    """What the example memory compares: the words of the last user message, the last
    assistant text, the first user message and the start of the last tool result, each
    tagged with where it came from, as the memory's bit mask."""
    return mask(
        [f"u:{w}" for w in words(context.last_user)]
        + [f"a:{w}" for w in words(context.last_assistant)]
        + [f"f:{w}" for w in words(context.first_user)]
        + [f"r:{w}" for w in words(context.last_tool_result, RESULT_CHARS // 2)]
    )
