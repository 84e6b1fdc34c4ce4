"""What :func:`~agentwarm.chat.render_ids` learned about a conversation's prefixes, kept across
calls so that a conversation that grows by a message renders one new prefix, not all of them.

A prefix is named by a digest of the template, the tools, the template variables and its
messages; what is kept is the length and SHA-1 digest of its rendering (or that it does not
render), never the text. A caller checks a kept rendering against the prompt text it has (the
same digest over the same span) and renders afresh when they differ (a template that prints the
date, for one).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

from agentwarm.chat.template import ChatTemplate, Message, Tool

__all__ = ("NOT_RENDERED", "PrefixMemo", "utf8")

#: Kept for a prefix the template refuses to render on its own.
NOT_RENDERED: Final = "not rendered"

Known = tuple[int, bytes] | str


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, lone surrogates included (template output may hold them)."""
    return text.encode("utf-8", "surrogatepass")


def _json(value: Any) -> bytes:
    return utf8(json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr))


class PrefixMemo:
    """A bounded, thread-safe map from prefix keys to ``(length, digest)`` of their rendering,
    or :data:`NOT_RENDERED`; the least recently used keys go first."""

    def __init__(self, size: int = 1 << 16) -> None:
        self._size = size
        self._known: OrderedDict[bytes, Known] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def keys(
        template: ChatTemplate,
        tools: Sequence[Tool] | None,
        variables: dict[str, Any],
        messages: Sequence[Message],
    ) -> list[bytes]:
        """``keys[k]`` names ``messages[:k]`` rendered with these template, tools and
        variables, for ``k`` = 0..len(messages)."""
        running = hashlib.sha1(usedforsecurity=False)
        running.update(_json([template.source, template.bos_token, template.eos_token]))
        running.update(_json([list(tools) if tools else None, variables]))
        keys = [running.digest()]
        for message in messages:
            running.update(b"\x00" + _json(message))
            keys.append(running.digest())
        return keys

    def get(self, key: bytes) -> Known | None:
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
            return known

    def put(self, key: bytes, text: str | None) -> None:
        known: Known = NOT_RENDERED
        if text is not None:
            known = (len(text), hashlib.sha1(utf8(text), usedforsecurity=False).digest())
        with self._lock:
            self._known[key] = known
            self._known.move_to_end(key)
            while len(self._known) > self._size:
                self._known.popitem(last=False)
