"""Parse JSON text read from a user's file, whatever it holds; find what makes a parsed JSON value
unusable (too deep, lone surrogates).

``json.loads`` raises more than :class:`json.JSONDecodeError` on hostile or broken input: a
``ValueError`` for an integer over Python's digit limit (``sys.get_int_max_str_digits()``), a
``RecursionError`` for deep nesting (``'[' * 100000``), and decoding the bytes first raises
``UnicodeDecodeError``; and a ``\\ud800`` escape parses to a lone surrogate that no later
``encode`` or ``print`` accepts. :func:`loads` turns all of them into one :class:`JSONTextError`
whose message says what is wrong, for the caller to prefix with the file name (and line).

A value that parsed can still nest deeper than the code that walks it recursively survives
(``copy.deepcopy``, ``json.dumps``, Jinja's ``tojson``: about a thousand levels, less the stack
already in use). :func:`find_flaw` walks a value without recursion and returns where it first
nests deeper than ``max_depth`` (the value itself is level 1; :data:`MAX_DEPTH` is the servers'
limit for request bodies and for the JSON in a tool call's ``arguments``) or holds a lone
surrogate, as a :class:`Flaw` whose :meth:`~Flaw.describe` names the path and the fix.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ("MAX_DEPTH", "Flaw", "JSONTextError", "find_flaw", "loads", "may_hold_surrogates")

#: The deepest nesting a server accepts in a JSON document from a client (a request body, the
#: JSON in a tool call's ``arguments`` string): far beyond any chat request or tool schema,
#: far below the ~1,000 levels where recursive code (``deepcopy``, ``json.dumps``) fails.
MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_PATH_PARTS = 8


class JSONTextError(ValueError):
    """The text is not usable JSON; ``str()`` says why (without a file name)."""


def loads(data: str | bytes) -> Any:
    """The JSON value of ``data`` (bytes are decoded as UTF-8).

    Raises:
        JSONTextError: the bytes are not UTF-8, the text is not JSON, it nests too deeply, or
            a number in it has more digits than Python converts, or a string in it holds a
            lone surrogate escape.
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONTextError(
                f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
            ) from None
    else:
        text = data
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        where = (
            f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno} column {exc.colno}"
        )
        raise JSONTextError(f"not JSON ({exc.msg} at {where})") from None
    except RecursionError:
        raise JSONTextError("not usable JSON (nested too deeply)") from None
    except ValueError as exc:  # the only other one json raises: too many digits in an integer
        limit = sys.get_int_max_str_digits()
        if "digits" in str(exc) and limit:
            reason = f"an integer has more than {limit} digits"
        else:
            reason = str(exc)
        raise JSONTextError(f"not usable JSON ({reason})") from None
    if "\\u" in text:  # only an escape can make a lone surrogate
        flaw = find_flaw(value, max_depth=None)
        if flaw is not None:
            raise JSONTextError(
                f"not usable JSON (a string holds the lone surrogate \\u{ord(flaw.char):04x}, "
                "which is not text)"
            )
    return value


def may_hold_surrogates(raw: bytes) -> bool:
    """Whether JSON text ``raw`` has an escape that can decode to a surrogate (``\\ud800`` to
    ``\\udfff``, paired or lone): without one, no string of it needs checking."""
    return _SURROGATE_ESCAPE.search(raw) is not None


@dataclass(frozen=True, slots=True)
class Flaw:
    """What :func:`find_flaw` found: ``kind`` ``"depth"`` (the container at ``path`` is nested
    deeper than ``limit``) or ``"surrogate"`` (the string at ``path``, or a key of the object
    there when ``in_key``, holds the lone surrogate ``char`` at ``index``)."""

    kind: Literal["depth", "surrogate"]
    path: tuple[str | int, ...]
    limit: int = 0
    char: str = ""
    index: int = 0
    in_key: bool = False

    @property
    def where(self) -> str:
        """The path, dotted as pydantic's errors are (``messages.0.content``; ``body`` for the
        value itself), its first parts only when it is long."""
        if not self.path:
            return "body"
        parts = [str(part) for part in self.path[:_PATH_PARTS]]
        more = len(self.path) - _PATH_PARTS
        return ".".join(parts) + (f"... ({more} levels more)" if more > 0 else "")

    def describe(self) -> str:
        """One line naming the path, the problem and the fix."""
        return f"{self.where}: {self.problem()}"

    def problem(self) -> str:
        """The problem and the fix, without the path (for a caller that names the field)."""
        if self.kind == "depth":
            return (
                f"nested too deeply (more than {self.limit} levels of arrays and objects): "
                f"send data nested at most {self.limit} levels deep"
            )
        what = "a key here contains" if self.in_key else "contains"
        return (
            f"{what} a lone surrogate {self.char!r} at index {self.index}, which is not valid "
            "Unicode: send UTF-8 text (a \\ud83d\\ude00 escape pair must come whole)"
        )


def find_flaw(
    value: Any, *, max_depth: int | None = MAX_DEPTH, surrogates: bool = True
) -> Flaw | None:
    """The first place (depth first) where ``value`` (parsed JSON) nests deeper than
    ``max_depth`` levels (None: no limit) or, with ``surrogates``, where a string or key holds a
    lone surrogate; None when there is none. Iterative: any depth is safe to walk."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            if max_depth is not None and len(path) >= max_depth:
                return Flaw("depth", path, limit=max_depth)
            for key, child in reversed(item.items()):
                flaw = _surrogate(key, path) if surrogates and isinstance(key, str) else None
                if flaw is not None:
                    return Flaw("surrogate", path, char=flaw.char, index=flaw.index, in_key=True)
                stack.append((child, (*path, key)))
        elif isinstance(item, list):
            if max_depth is not None and len(path) >= max_depth:
                return Flaw("depth", path, limit=max_depth)
            kept = (dict, list, str) if surrogates else (dict, list)
            children = [(c, (*path, i)) for i, c in enumerate(item) if isinstance(c, kept)]
            stack.extend(reversed(children))
        elif surrogates and isinstance(item, str):
            flaw = _surrogate(item, path)
            if flaw is not None:
                return flaw
    return None


def _surrogate(text: str, path: tuple[str | int, ...]) -> Flaw | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return Flaw("surrogate", path, char=text[exc.start], index=exc.start)
    return None
