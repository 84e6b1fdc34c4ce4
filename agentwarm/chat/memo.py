"""What :func:`~agentwarm.chat.render_ids` learned about a conversation's prefixes, kept across
calls so that a conversation that grows by a message renders one new prefix, not all of them.

A prefix is named by a digest of the template, the tools, the template variables and its
messages; what is kept is the length and SHA-1 digest of its rendering (or that it does not
render), never the text. A caller checks a kept rendering against the prompt text it has (the
same digest over the same span) and renders afresh when they differ (a template that prints the
date, for one). Each entry is a 20-byte key and a length with a 20-byte digest: the memo's
memory is bounded by its entry count (about 200 bytes each, ~13 MB at the default size).

:class:`PieceCache` keeps the ids of the text pieces :func:`~agentwarm.chat.render_ids` encoded,
bounded by tokens and characters (not entries: one piece may be a 7 MB message).
"""

from __future__ import annotations

import hashlib
import json
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any, Final

from agentwarm.chat.template import ChatTemplate, Message, Tool

__all__ = ("NOT_RENDERED", "PieceCache", "PrefixMemo", "utf8")

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


class PieceCache(MutableMapping[str, list[int]]):
    """Piece text -> its ids, at most ``max_tokens`` ids and ``max_chars`` characters of text in
    all (the least recently used pieces go first). A piece larger than an eighth of either bound
    is not kept (one huge message would flush everything else, for nothing: it is rarely sent
    twice). Ids are kept as 32-bit integers (4 bytes each). Thread-safe."""

    def __init__(self, max_tokens: int = 1 << 20, max_chars: int = 1 << 22) -> None:
        self.max_tokens, self.max_chars = max_tokens, max_chars
        self._ids: OrderedDict[str, array[int]] = OrderedDict()
        self._lock = threading.Lock()
        self.tokens = 0
        """The ids kept, all pieces together."""
        self.chars = 0
        """The characters of the pieces kept."""

    def __getitem__(self, piece: str) -> list[int]:
        with self._lock:
            ids = self._ids[piece]
            self._ids.move_to_end(piece)
            return ids.tolist()

    def __setitem__(self, piece: str, ids: list[int]) -> None:
        if len(ids) > self.max_tokens // 8 or len(piece) > self.max_chars // 8:
            return
        kept = array("I", ids)
        with self._lock:
            self._pop(piece)
            self._ids[piece] = kept
            self.tokens += len(kept)
            self.chars += len(piece)
            while self.tokens > self.max_tokens or self.chars > self.max_chars:
                self._pop(next(iter(self._ids)))

    def __delitem__(self, piece: str) -> None:
        with self._lock:
            if not self._pop(piece):
                raise KeyError(piece)

    def _pop(self, piece: str) -> bool:
        ids = self._ids.pop(piece, None)
        if ids is None:
            return False
        self.tokens -= len(ids)
        self.chars -= len(piece)
        return True

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._ids))

    def __len__(self) -> int:
        return len(self._ids)
