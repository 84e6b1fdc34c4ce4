"""Parse JSON text read from a user's file, whatever it holds.

``json.loads`` raises more than :class:`json.JSONDecodeError` on hostile or broken input: a
``ValueError`` for an integer over Python's digit limit (``sys.get_int_max_str_digits()``), a
``RecursionError`` for deep nesting (``'[' * 100000``), and decoding the bytes first raises
``UnicodeDecodeError``; and a ``\\ud800`` escape parses to a lone surrogate that no later
``encode`` or ``print`` accepts. :func:`loads` turns all of them into one :class:`JSONTextError`
whose message says what is wrong, for the caller to prefix with the file name (and line).
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ("JSONTextError", "loads")


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
        _check_surrogates(value)
    return value


def _check_surrogates(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                code = ord(item[exc.start])
                raise JSONTextError(
                    f"not usable JSON (a string holds the lone surrogate \\u{code:04x}, "
                    "which is not text)"
                ) from None
