"""Sessions learned from traffic: which requests belong to one agent run.

A request's conversation is its messages after the head (:func:`~agentwarm.gateway.heads.
split_head`). A session belongs to one tenant (the tag of its namespace,
:func:`~agentwarm.engines.namespace.tenant_tag`; ``""``: the default tenant): a request only
ever joins a session of its own tenant. :class:`SessionTracker` assigns each request a session
id by these rules, first match wins:

1. **Hint**: the client named the session (``X-Agentwarm-Session``, else the OpenAI ``user``
   field or ``metadata.session_id``). The hint is sanitized like a head hint (to
   ``[A-Za-z0-9_.-]``); when that changed it or it is longer than 256 bytes, a digest of the
   original is appended to a cut so that distinct hints stay distinct. The same hint of the
   same tenant is the same session; another tenant's id has ``~`` and its tag appended
   (:func:`session_of_hint`; ``~`` is never in a sanitized hint, so no hint can name it).
2. **Continuity**: each session's last request is remembered as up to two *points*: its
   conversation, and that conversation + the assistant's reply. The tenant's session whose
   point is the longest prefix (``k >= 1`` messages) of the new conversation continues,
   including a request by another head (a handoff) — except when the conversation equals that
   session's last request's conversation exactly and comes with the same head: a retry, or a
   new run of the same opening, opens a new session.
3. Else a **new** session (a uuid4 hex).

Messages are compared by :func:`message_digest`, which ignores tool-call ids, the spacing of
tool-call arguments and fields other than role, content, tool calls, ``tool_call_id`` and
``name``: what clients change when they echo a reply back.

Limits: two concurrent conversations with identical prefixes and no hints are
indistinguishable (the later recorded one takes the shared point; hints resolve it). Only each
session's last request is indexed, so a request that branches from an older step opens a new
session. Memory stays bounded: at most two index entries per session, sessions idle longer than
``ttl_s`` are dropped, and past ``max_sessions`` the least recently used is dropped with its
index entries. Pure and I/O-free (the clock is injected); not thread-safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentwarm.chat import Message, parse_arguments
from agentwarm.gateway.heads import canonical_json, content_text, sanitize_name

__all__ = ("SessionTracker", "chain", "extend", "message_digest", "session_of_hint")

#: Longest session id a hint gives, in bytes (sanitized ids are ASCII).
HINT_BYTES = 256
_DIGEST_HEX = 16
_SEED = "0" * _DIGEST_HEX


def message_digest(message: Message) -> str:
    """16 hex chars of the sha256 of the canonical JSON of the message's role, content text
    (parts joined), tool calls as ``[name, arguments]`` (arguments parsed when a JSON string,
    as a template gets them: :func:`~agentwarm.chat.parse_arguments`, so ``'{"a": 1}'`` and
    ``'{"a":1}'`` digest alike; ids ignored), ``tool_call_id`` and
    ``name``. Raises ValueError when ``message`` is not a mapping."""
    if not isinstance(message, Mapping):
        raise ValueError(f"a chat message must be a JSON object, got {type(message).__name__}")
    doc = [
        message.get("role"),
        content_text(message.get("content")),
        [_call_doc(call) for call in message.get("tool_calls") or ()],
        message.get("tool_call_id"),
        message.get("name"),
    ]
    return hashlib.sha256(canonical_json(doc)).hexdigest()[:_DIGEST_HEX]


def _call_doc(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        return call
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # nested too deeply: digested as the string
            arguments = parse_arguments(arguments)
    return [function.get("name"), arguments]


def _roll(previous: str, digest: str) -> str:
    return hashlib.sha256(f"{previous}{digest}".encode("ascii")).hexdigest()[:_DIGEST_HEX]


def chain(messages: Sequence[Message]) -> list[str]:
    """Rolling digests: ``chain(m)[k]`` identifies ``m[:k+1]`` (order matters)."""
    out: list[str] = []
    for message in messages:
        out.append(extend(out, message))
    return out


def extend(points: Sequence[str], message: Message) -> str:
    """The digest that follows ``points`` (a :func:`chain`) when ``message`` comes next:
    ``extend(chain(m), x) == chain([*m, x])[-1]``."""
    return _roll(points[-1] if points else _SEED, message_digest(message))


def session_of_hint(hint: str, tenant: str = "") -> str | None:
    """The session id a client's hint names for ``tenant`` (a tag; see rule 1), None when
    nothing is left of it."""
    clean = sanitize_name(hint, HINT_BYTES)
    if not clean:
        return None
    if clean != hint:
        digest = hashlib.sha256(hint.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_HEX]
        clean = f"{clean[: HINT_BYTES - _DIGEST_HEX - 1].rstrip('-')}-{digest}"
    return f"{clean}~{tenant}" if tenant else clean


@dataclass(slots=True)
class _Session:
    seen: float
    tenant: str = ""
    head: str | None = None
    request: str | None = None  # the point of the last request's conversation
    points: list[str] = field(default_factory=list)  # its index entries (<= 2)


class SessionTracker:
    """Assigns requests to sessions and remembers each session's last request (see the module
    docstring). ``clock`` gives seconds (monotonic); ``ttl_s`` is the idle time after which a
    session is forgotten."""

    def __init__(
        self,
        *,
        max_sessions: int = 10_000,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be a positive integer, got {max_sessions!r}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self._clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()  # least recently used first
        self._index: dict[tuple[str, str], str] = {}  # (tenant, point) -> session

    def assign(
        self,
        conversation: Sequence[Message],
        head_key: str,
        hint: str | None = None,
        *,
        points: Sequence[str] | None = None,
        tenant: str = "",
    ) -> tuple[str, bool]:
        """(session id, whether it is new) of a request of ``tenant`` (a tag), by the rules of
        the module docstring. The session counts as used now (a new one is live from here,
        before :meth:`record`). ``points``: ``chain(conversation)`` when the caller has it
        already."""
        now = self._clock()
        self._expire(now)
        named = session_of_hint(hint, tenant) if hint else None
        if named is not None:
            return self._touch(named, now, tenant)
        points = chain(conversation) if points is None else points
        for k in range(len(points) - 1, -1, -1):
            sid = self._index.get((tenant, points[k]))
            if sid is None:
                continue
            session = self._sessions[sid]
            retry = k == len(points) - 1 and points[k] == session.request
            if retry and session.head == head_key:
                break
            return self._touch(sid, now, tenant)
        return self._touch(uuid.uuid4().hex, now, tenant)

    def record(
        self,
        session: str,
        conversation: Sequence[Message],
        head_key: str,
        reply: Message | None,
        *,
        points: Sequence[str] | None = None,
        tenant: str = "",
    ) -> None:
        """Remember ``session``'s last request (its conversation and head) and ``reply`` (the
        assistant message; None or empty when there was none) for continuity. Replaces what the
        session had recorded; an unknown (or forgotten) session is started, as ``tenant``'s.
        ``points``: ``chain(conversation)`` when the caller has it already."""
        now = self._clock()
        self._expire(now)
        self._touch(session, now, tenant)
        state = self._sessions[session]
        self._unindex(session, state)
        points = chain(conversation) if points is None else points
        state.head = head_key
        state.request = points[-1] if points else None
        if state.request is not None:
            state.points.append(state.request)
            if reply:
                state.points.append(extend(points, reply))
        for point in state.points:
            self._index[state.tenant, point] = session

    def __len__(self) -> int:
        """Live sessions (those idle past ``ttl_s`` count until the next call drops them)."""
        return len(self._sessions)

    def __contains__(self, session: object) -> bool:
        return session in self._sessions

    def check_integrity(self) -> None:
        """Raise RuntimeError, with the counts, if the index and the sessions disagree."""
        listed = sum(len(s.points) for s in self._sessions.values())
        stray = [p for p, sid in self._index.items() if p not in self._points_of(sid)]
        if len(self._index) > listed or stray or len(self._sessions) > self.max_sessions:
            raise RuntimeError(
                f"session index broken: {len(self._index)} entries, {listed} listed points, "
                f"{len(stray)} stray, {len(self._sessions)} sessions (max {self.max_sessions})"
            )

    def _points_of(self, sid: str) -> list[tuple[str, str]]:
        state = self._sessions.get(sid)
        return [(state.tenant, p) for p in state.points] if state is not None else []

    def _touch(self, sid: str, now: float, tenant: str = "") -> tuple[str, bool]:
        state = self._sessions.get(sid)
        if state is not None:
            state.seen = now
            self._sessions.move_to_end(sid)
            return sid, False
        self._sessions[sid] = _Session(seen=now, tenant=tenant)
        while len(self._sessions) > self.max_sessions:
            self._drop_oldest()
        return sid, True

    def _expire(self, now: float) -> None:
        # Sessions are in order of last use, so the idle ones lead.
        while self._sessions and now - next(iter(self._sessions.values())).seen > self.ttl_s:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        sid, state = self._sessions.popitem(last=False)
        self._unindex(sid, state)

    def _unindex(self, sid: str, state: _Session) -> None:
        for point in state.points:
            if self._index.get((state.tenant, point)) == sid:
                del self._index[state.tenant, point]
        state.points.clear()
