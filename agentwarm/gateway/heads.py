"""Nodes learned from traffic: a request's *head* is its node.

A chat request is ``messages`` (+ ``tools``). Its head is the leading run of system/developer
messages and the tool set: what stays the same every time one agent role is called, while the
rest of the messages (the conversation) grows. :func:`split_head` cuts a request there.

Rules:

* **Key** (:func:`head_key`): 16 hex chars of the sha256 of the canonical JSON
  (``sort_keys=True``, no spaces, ``ensure_ascii=False``) of the system messages' roles and
  content texts (:func:`content_text`: a list of text parts is joined) and of the tools in the
  order given (tool order is part of the prompt). Other fields of a system message are ignored;
  the conversation never enters the key.
* **Name**: the ``hint`` (the client's ``X-Agentwarm-Node`` header) sanitized by
  :func:`sanitize_name` to ``[A-Za-z0-9_.-]``, at most 64 chars, when that leaves something; else
  a slug of the first 4 words of the first system message's text (lowercase ``[a-z0-9]`` words
  joined by ``-``, at most 40 chars); else ``"no-system"``. A name held by another key, or equal
  to :data:`~agentwarm._spec.END` / :data:`~agentwarm._spec.START`, becomes
  ``f"{name}-{key[:6]}"``. A key keeps its name while it is registered (a later hint for it does
  not rename it), in every registry that sees the same traffic, and across
  :meth:`HeadRegistry.to_dict` / :meth:`HeadRegistry.from_dict`.
* **Bound**: past ``max_heads``, the least recently identified head is forgotten (if it comes
  back it is registered again, and may then get another name).
* **Owners**: each head remembers which tenants sent it (their
  :func:`~agentwarm.engines.namespace.tenant_tag`: ``""`` is the default tenant; at most
  :data:`MAX_OWNERS` per head, the most recent kept). A tenant is only ever prefetched heads it
  owns (:meth:`HeadRegistry.owns`, :meth:`HeadRegistry.own_predictions`): another tenant's
  system prompt or tools never reach its namespace. Owners are saved with the heads (tags, not
  salts); a head loaded without owners (an older file) is nobody's until it is sent again.

Pure and I/O-free; not thread-safe (the gateway calls it from its event loop).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentwarm._spec import END, START
from agentwarm.chat import Message, split_head
from agentwarm.engines.namespace import TAG_CHARS

__all__ = (
    "Head",
    "HeadRegistry",
    "canonical_json",
    "content_text",
    "head_key",
    "sanitize_name",
    "split_head",
)

#: Name of a head with no system message (and no hint).
NO_SYSTEM = "no-system"
HINT_CHARS = 64
SLUG_WORDS = 4
SLUG_CHARS = 40
_RESERVED = frozenset({END, START})
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_WORD = re.compile(r"[a-z0-9]+")
_KEY = re.compile(r"[0-9a-f]{16}")
_TAG = re.compile(f"(?:[0-9a-f]{{{TAG_CHARS}}})?")
#: Tenants remembered per head (the least recent is forgotten: it owns the head again when it
#: sends it again).
MAX_OWNERS = 256
_FORMAT = 1


@dataclass(frozen=True, slots=True)
class Head:
    """One node: ``key`` (16 hex chars, see :func:`head_key`), ``name`` (readable, unique among
    its registry's heads), the request's leading ``system``/developer messages and its
    ``tools`` (copies: later changes to the request do not reach them)."""

    key: str
    name: str
    system: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON bytes: sorted keys, no spaces, UTF-8 (lone surrogates, which
    JSON escapes can carry, pass through rather than fail)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def content_text(content: Any) -> str:
    """A message ``content`` as text: a string as is, ``None`` as ``""``, a list of parts joined
    (a ``{"type": "text"}`` part gives its text, any other part its canonical JSON, so an image
    still tells two messages apart); anything else its canonical JSON."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            if isinstance(part, Mapping) and part.get("type") == "text"
            else canonical_json(part).decode("utf-8", "surrogatepass")
            for part in content
        )
    return canonical_json(content).decode("utf-8", "surrogatepass")


def head_key(system: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> str:
    """16 hex chars of the sha256 of the canonical JSON of the system messages' roles and
    content texts and of the tools in the order given (see the module docstring)."""
    doc = {
        "system": [[m.get("role"), content_text(m.get("content"))] for m in system],
        "tools": list(tools),
    }
    return hashlib.sha256(canonical_json(doc)).hexdigest()[:16]


def sanitize_name(hint: str, limit: int = HINT_CHARS) -> str:
    """``hint`` with each run of characters outside ``[A-Za-z0-9_.-]`` made one ``-``, ``-``
    trimmed from both ends, cut to ``limit`` chars (``""`` when nothing is left)."""
    return _UNSAFE.sub("-", hint).strip("-")[:limit].rstrip("-")


def _slug(system: Sequence[Message]) -> str:
    if not system:
        return NO_SYSTEM
    words = _WORD.findall(content_text(system[0].get("content")).lower())[:SLUG_WORDS]
    return "-".join(words)[:SLUG_CHARS].rstrip("-") or NO_SYSTEM


class HeadRegistry:
    """The heads seen so far, least recently identified first (see the module docstring)."""

    def __init__(self, *, max_heads: int = 1024) -> None:
        if isinstance(max_heads, bool) or not isinstance(max_heads, int) or max_heads < 1:
            raise ValueError(f"max_heads must be a positive integer, got {max_heads!r}")
        self.max_heads = max_heads
        self._heads: OrderedDict[str, Head] = OrderedDict()  # key -> head, LRU first
        self._keys: dict[str, str] = {}  # name -> key
        self._owners: dict[str, OrderedDict[str, None]] = {}  # key -> tenant tags, LRU first

    def identify(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        hint: str | None = None,
        tenant: str = "",
    ) -> tuple[Head, list[Message]]:
        """The head of a request (registered on first sight) and its conversation; ``tenant``
        (a tag) sent it, so owns it from now on. Raises ValueError when a tool is not a
        mapping."""
        system, conversation = split_head(messages)
        tools = tools or ()
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                raise ValueError(f"tools[{i}] must be a JSON object, got {type(tool).__name__}")
        key = head_key(system, tools)
        head = self._heads.get(key)
        if head is not None:
            self._heads.move_to_end(key)
            self._own(key, tenant)
            return head, conversation
        name = self._free_name((sanitize_name(hint) if hint else "") or _slug(system), key)
        head = Head(
            key=key,
            name=name,
            system=tuple(copy.deepcopy(dict(m)) for m in system),
            tools=tuple(copy.deepcopy(dict(t)) for t in tools),
        )
        self._add(head)
        self._own(key, tenant)
        return head, conversation

    def owns(self, tenant: str, name: str) -> bool:
        """Whether ``tenant`` (a tag) sent the head named ``name`` (an unknown name: no)."""
        key = self._keys.get(name)
        return key is not None and tenant in self._owners.get(key, ())

    def own_predictions(
        self, predictions: Sequence[tuple[str, float]], tenant: str
    ) -> list[tuple[str, float]]:
        """``predictions`` (node, probability) without the nodes ``tenant`` does not own
        (``END`` stays), scaled so that they keep the total they had: the distribution over
        what this tenant can reach."""
        kept = [(n, p) for n, p in predictions if n == END or self.owns(tenant, n)]
        if len(kept) == len(predictions):
            return list(predictions)
        left = sum(p for _, p in kept)
        scale = sum(p for _, p in predictions) / left if left > 0 else 1.0
        return [(n, p * scale) for n, p in kept]

    def _own(self, key: str, tenant: str) -> None:
        owners = self._owners.setdefault(key, OrderedDict())
        owners[tenant] = None
        owners.move_to_end(tenant)
        while len(owners) > MAX_OWNERS:
            owners.popitem(last=False)

    def get(self, name: str) -> Head | None:
        """The head named ``name`` (does not count as a use)."""
        key = self._keys.get(name)
        return None if key is None else self._heads[key]

    def by_key(self, key: str) -> Head | None:
        """The head with key ``key`` (does not count as a use)."""
        return self._heads.get(key)

    def __len__(self) -> int:
        return len(self._heads)

    def __iter__(self) -> Iterator[Head]:
        """The heads, least recently identified first."""
        return iter(list(self._heads.values()))

    def to_dict(self) -> dict[str, Any]:
        """The registry as JSON-serializable data (for the state dir), LRU order kept."""
        return {
            "format": _FORMAT,
            "max_heads": self.max_heads,
            "heads": [
                {
                    "key": h.key,
                    "name": h.name,
                    "system": [dict(m) for m in h.system],
                    "tools": [dict(t) for t in h.tools],
                    "owners": list(self._owners.get(h.key, ())),
                }
                for h in self._heads.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, max_heads: int | None = None) -> HeadRegistry:
        """The registry :meth:`to_dict` gave (``max_heads`` overrides the saved bound; the most
        recent heads are kept when they exceed it). Raises ValueError naming what is wrong."""
        where = "head registry data"
        if not isinstance(data, Mapping) or data.get("format") != _FORMAT:
            raise ValueError(f"{where}: expected a mapping with format {_FORMAT} (from to_dict)")
        heads = data.get("heads")
        if not isinstance(heads, list):
            raise ValueError(f"{where}: 'heads' must be a list")
        registry = cls(max_heads=data.get("max_heads", 1024) if max_heads is None else max_heads)
        for i, raw in enumerate(heads):
            head = _head_from(raw, f"{where}: heads[{i}]")
            registry._add(head, restoring=True)
            for tag in _owners_from(raw.get("owners", []), f"{where}: heads[{i}].owners"):
                registry._own(head.key, tag)
        return registry

    def absorb(self, head: Head, owners: Sequence[str]) -> Head:
        """Take ``head`` and its ``owners`` (tags) from another registry, as if identified here
        (a merge of two gateways' saves): a known key keeps its name here, a new one is
        registered under its name or, when another key holds that name, a free form of it
        (as :meth:`identify` names); either becomes the most recent, the bound applies."""
        known = self._heads.get(head.key)
        if known is None:
            known = replace(head, name=self._free_name(head.name, head.key))
            self._add(known)
        else:
            self._heads.move_to_end(head.key)
        for tag in owners:
            self._own(head.key, tag)
        return known

    def _add(self, head: Head, *, restoring: bool = False) -> None:
        if restoring:
            if head.key in self._heads:
                raise ValueError(f"head registry data: key {head.key} appears twice")
            if head.name in self._keys or head.name in _RESERVED:
                raise ValueError(f"head registry data: name {head.name!r} is taken or reserved")
        self._heads[head.key] = head
        self._keys[head.name] = head.key
        while len(self._heads) > self.max_heads:
            _, old = self._heads.popitem(last=False)
            del self._keys[old.name]
            self._owners.pop(old.key, None)

    def _free_name(self, name: str, key: str) -> str:
        """``name``, else ``name-<key[:6]>``, else longer forms, whichever no other key holds."""
        candidates = [name, f"{name}-{key[:6]}", f"{name}-{key}"]
        candidates += (f"{name}-{key}-{n}" for n in range(2, len(self._keys) + 3))
        for candidate in candidates:
            if candidate not in _RESERVED and candidate not in self._keys:
                return candidate
        raise AssertionError("unreachable: more candidates than names")


def _head_from(raw: Any, where: str) -> Head:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping with key, name, system, tools")
    key, name, system, tools = (raw.get(f) for f in ("key", "name", "system", "tools"))
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"{where}: 'key' must be 16 lowercase hex chars, got {key!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: 'name' must be a non-empty string")
    for field, items in (("system", system), ("tools", tools)):
        if not isinstance(items, list) or not all(isinstance(x, Mapping) for x in items):
            raise ValueError(f"{where}: {field!r} must be a list of mappings")
    assert isinstance(system, list) and isinstance(tools, list)
    if head_key(system, tools) != key:
        raise ValueError(f"{where}: 'key' {key} does not match its system and tools")
    return Head(key, name, tuple(dict(m) for m in system), tuple(dict(t) for t in tools))


def _owners_from(raw: Any, where: str) -> list[str]:
    if not isinstance(raw, list) or len(raw) > MAX_OWNERS:
        raise ValueError(f"{where}: expected a list of at most {MAX_OWNERS} tenant tags")
    for tag in raw:
        if not isinstance(tag, str) or not _TAG.fullmatch(tag):
            raise ValueError(
                f"{where}: {tag!r} is not a tenant tag ('' or {TAG_CHARS} lowercase hex chars)"
            )
    if len(set(raw)) != len(raw):
        raise ValueError(f"{where}: a tenant tag appears twice")
    return raw
