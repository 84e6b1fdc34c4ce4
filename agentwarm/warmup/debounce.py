"""Coalescing repeated explicit warms of one session: "the user is typing" fires on every
keystroke, and only the latest prefix is worth a prefill.

``debouncer.warm(key, messages=...)`` (``key``: the session) returns at once. The first warm of
a key opens a window of ``delay_s`` seconds; warms of that key within the window replace its
prefix (*coalesced*), and when the window ends the latest prefix is sent
(:func:`~agentwarm.warmup.explicit.warm_ids`: speculative priority, pinned for ``ttl_s``, one
``explicit`` span, routed by ``key``). The window is not restarted by later warms, so a key that
keeps changing is warmed at most once per ``delay_s`` and never waits longer than that.

A prefill already sent for the key and still running when a newer prefix is sent is aborted
(``engine.abort``) unless the newer prefix extends it (typing appends: the running prefill's
tokens are the start of the new one, which then finds them cached); a newer prefix equal to a
running one is not sent again (coalesced).

The debouncer never raises into the caller's loop: a prefix that cannot be rendered, or a
prefill that fails, is logged and counted (``failed``). Only a bad form (not exactly one of
``messages``/``text``/``ids``) raises, at the call. Counters: ``sent``, ``coalesced``,
``aborted``, ``failed``, ``dropped`` (pending warms :meth:`Debouncer.aclose` threw away).

Prefixes are rendered and tokenized in a worker thread (an engine's ``encode`` may be a blocking
HTTP call), by one renderer (``renderer``, else the engine's own:
:func:`~agentwarm.warmup.explicit.renderer_for`).

``sleep`` waits out the window (``asyncio.sleep``; tests pass one they release themselves).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentwarm._spec import PrefetchKind
from agentwarm.chat import Message
from agentwarm.engines.base import Engine, new_rid
from agentwarm.engines.radix.node import common_len
from agentwarm.warmup.explicit import (
    DEFAULT_TTL_S,
    check_form,
    prefix_ids,
    renderer_for,
    warm_ids,
)
from agentwarm.warmup.render import ChatRenderer

__all__ = ("DEFAULT_DELAY_S", "Debouncer")

log = logging.getLogger(__name__)

#: How long a key's window lasts, in seconds, by default.
DEFAULT_DELAY_S = 0.3


@dataclass(slots=True)
class _Pending:
    """A key's latest prefix, not sent yet, and the task that sends it when the window ends."""

    form: dict[str, Any]
    task: asyncio.Task[None] | None = None


@dataclass(slots=True)
class _Sent:
    """A prefill sent for a key and still running."""

    rid: str
    ids: tuple[int, ...]
    superseded: bool = field(default=False)


class Debouncer:
    """Coalesces repeated warms of one key (module docstring). Use it on one event loop;
    ``await flush()`` sends what is pending and waits for every prefill, ``await aclose()``
    drops what is pending and aborts what runs."""

    def __init__(
        self,
        engine: Engine,
        *,
        delay_s: float = DEFAULT_DELAY_S,
        renderer: ChatRenderer | None = None,
        namespace: str = "",
        ttl_s: float | None = DEFAULT_TTL_S,
        kind: PrefetchKind = PrefetchKind.EXPLICIT,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        self.engine = engine
        self.delay_s = delay_s
        self.renderer = renderer
        self.namespace = namespace
        self.ttl_s = ttl_s
        self.kind = kind
        self._sleep = sleep
        self.sent = 0
        self.coalesced = 0
        self.aborted = 0
        self.failed = 0
        self.dropped = 0
        self._pending: dict[str, _Pending] = {}
        self._running: dict[str, list[_Sent]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def counts(self) -> dict[str, int]:
        """The counters, by name."""
        return {
            "sent": self.sent,
            "coalesced": self.coalesced,
            "aborted": self.aborted,
            "failed": self.failed,
            "dropped": self.dropped,
        }

    @property
    def pending(self) -> int:
        """Keys whose latest prefix waits for its window to end."""
        return len(self._pending)

    def warm(
        self,
        key: str,
        *,
        messages: Sequence[Message] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        text: str | None = None,
        ids: Sequence[int] | None = None,
    ) -> None:
        """Warm this prefix of session ``key`` once its window ends, unless a newer one comes
        first. Returns at once (call it on the debouncer's event loop). Raises
        :class:`~agentwarm.errors.ConfigError` for a bad form only."""
        check_form(messages=messages, tools=tools, text=text, ids=ids)
        if self._closed:
            log.warning("warm of %r after the debouncer was closed: ignored", key)
            return
        form = {"messages": messages, "tools": tools, "text": text, "ids": ids}
        pending = self._pending.get(key)
        if pending is not None:
            pending.form = form
            self.coalesced += 1
            return
        pending = _Pending(form)
        self._pending[key] = pending
        pending.task = self._spawn(self._after_window(key, pending))

    async def flush(self) -> None:
        """Send every pending prefix now and wait until every prefill has ended."""
        for key, pending in list(self._pending.items()):
            if pending.task is not None:
                pending.task.cancel()
            del self._pending[key]
            self._spawn(self._send(key, pending.form))
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Drop the pending prefixes, abort the running prefills, wait for them. Idempotent;
        later warms are ignored."""
        self._closed = True
        self.dropped += len(self._pending)
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------------------ internals

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _after_window(self, key: str, pending: _Pending) -> None:
        await self._sleep(self.delay_s)
        if self._pending.get(key) is pending:
            del self._pending[key]
            await self._send(key, pending.form)

    async def _send(self, key: str, form: dict[str, Any]) -> None:
        try:
            renderer = self.renderer
            if form["messages"] is not None and renderer is None:
                renderer = renderer_for(self.engine)  # on the loop: one per engine
            ids = tuple(await asyncio.to_thread(prefix_ids, self.engine, renderer=renderer, **form))
        except Exception as exc:
            self.failed += 1
            log.warning("warm of %r not sent: %s", key, exc)
            return
        running = self._running.get(key, [])
        for sent in list(running):  # the awaits below let finished ones leave the list
            extended = common_len(sent.ids, ids, 0) == len(sent.ids)  # typing appends
            if not sent.superseded and not extended:
                sent.superseded = True
                self.aborted += 1
                try:
                    await self.engine.abort(sent.rid)
                except Exception as exc:
                    log.warning("abort of the superseded warm of %r failed: %s", key, exc)
        if any(not s.superseded and s.ids == ids for s in running):
            self.coalesced += 1
            return
        sent = _Sent(new_rid(), ids)
        running = self._running.setdefault(key, running)
        running.append(sent)
        self.sent += 1
        try:
            await warm_ids(
                self.engine,
                ids,
                rid=sent.rid,
                namespace=self.namespace,
                session=key,
                ttl_s=self.ttl_s,
                kind=self.kind,
            )
        except asyncio.CancelledError:
            if not sent.superseded:
                sent.superseded = True
                self.aborted += 1  # aclose: warm_ids aborted it on the engine
            raise
        except Exception as exc:
            self.failed += 1
            log.warning("warm of %r failed: %s", key, exc)
        finally:
            running.remove(sent)
            if not running and self._running.get(key) is running:
                del self._running[key]
