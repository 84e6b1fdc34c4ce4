"""Explicit warms from code: ``await agentwarm.warm(engine, messages=..., tools=...)`` prefills
a prefix now, for signals only the application sees ("a document was uploaded", "the user is
typing"), so that the request that follows finds it cached.

The prefix is given as chat ``messages`` (+ ``tools``: rendered as the engine serves them, and
only their stable part, the token-exact prefix of any request that starts with those messages),
as ``text`` (encoded by the engine) or as token ``ids``. It is prefilled at speculative
priority (live work goes first) and pinned for ``ttl_s`` seconds on engines that pin
(:class:`~agentwarm.engines.local.LocalEngine`; a warm of a prefix already cached only renews
its pin). Each warm is one ``agentwarm.prefill`` span of workflow :data:`WARMUP_WORKFLOW`,
source ``explicit`` and kind ``explicit`` (:func:`traced_prefill`, which the gateway's
``max_tokens: 0`` requests go through too), ended with outcome ``hit`` (done), ``cancelled``
(aborted) or ``failed``; the static warm-up's prefills use it too (source ``warmup``), and
:func:`record_dropped` records a prefix skipped before sending.

Rendering and tokenizing run in a worker thread (``asyncio.to_thread``): an engine's ``encode``
may be a blocking HTTP call (a remote tokenizer). Messages are rendered by one renderer per
engine (:func:`renderer_for`; its rendered pieces are reused) unless ``renderer`` is given.

:class:`~agentwarm.warmup.debounce.Debouncer` coalesces repeated warms of one session.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode, Tracer

from agentwarm import telemetry as tm
from agentwarm._spec import PrefetchKind, PrefetchOutcome
from agentwarm.chat import FALLBACK, ChatTemplate, Message
from agentwarm.engines.base import Engine, PrefillResult, PrefillStatus, Priority, new_rid
from agentwarm.errors import ConfigError
from agentwarm.warmup.render import ChatRenderer

__all__ = (
    "WARMUP_WORKFLOW",
    "check_form",
    "prefix_ids",
    "record_dropped",
    "renderer_for",
    "traced_prefill",
    "warm",
    "warm_ids",
)

#: The workflow of every warm-up prefill span (warm-ups belong to no workflow run).
WARMUP_WORKFLOW = "warmup"
#: The default pin TTL of an explicit warm, in seconds.
DEFAULT_TTL_S = 30.0

#: One renderer per engine, with the template it was made for (weak: it dies with the engine).
_RENDERERS: weakref.WeakKeyDictionary[Engine, tuple[ChatTemplate | None, ChatRenderer]] = (
    weakref.WeakKeyDictionary()
)


def renderer_for(engine: Engine) -> ChatRenderer:
    """The renderer of ``engine`` (:meth:`ChatRenderer.for_engine`), one per engine (made again
    when the engine's chat template changes: a remote engine learns it with its tokenizer). It
    holds the engine weakly, so the engine can still be collected."""
    template = engine.chat_template
    hit = _RENDERERS.get(engine)
    if hit is not None and hit[0] is template:
        return hit[1]
    ref = weakref.ref(engine)

    def encode(text: str) -> list[int]:
        alive = ref()
        if alive is None:  # pragma: no cover - the renderer outlived its engine
            raise ConfigError("warm: the engine of this renderer is gone")
        return alive.encode(text)

    renderer = ChatRenderer(encode, template or FALLBACK)
    _RENDERERS[engine] = (template, renderer)
    return renderer


def prefix_ids(
    engine: Engine,
    *,
    messages: Sequence[Message] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    text: str | None = None,
    ids: Sequence[int] | None = None,
    renderer: ChatRenderer | None = None,
) -> list[int]:
    """The token ids of the prefix given by exactly one of ``messages`` (with ``tools``; rendered
    by ``renderer``, default :func:`renderer_for`), ``text`` or ``ids``. Blocking (it may
    tokenize over HTTP): call it in a thread from async code.

    Raises :class:`ConfigError` for a bad form (:func:`check_form`) or a prefix without tokens
    (nothing to warm)."""
    form = check_form(messages=messages, tools=tools, text=text, ids=ids)
    if messages is not None:
        out = (renderer or renderer_for(engine)).prefix_ids(messages, tools)
        if not out:
            raise ConfigError(
                "warm: the messages render to no stable prefix (nothing that every request "
                "starting with them shares); give more messages, or text= / ids="
            )
        return out
    out = engine.encode(text) if text is not None else list(ids or ())
    if not out:
        raise ConfigError(f"warm: the {form} prefix is empty; nothing to warm")
    return out


def check_form(
    *,
    messages: Sequence[Message] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    text: str | None = None,
    ids: Sequence[int] | None = None,
) -> str:
    """The name of the one form the prefix is given in (``messages``, ``text`` or ``ids``).
    Raises :class:`ConfigError` when not exactly one is given, or ``tools`` come without
    ``messages``."""
    forms = {"messages": messages, "text": text, "ids": ids}
    given = [name for name, value in forms.items() if value is not None]
    if len(given) != 1:
        which = f"got {' and '.join(given)}" if given else "got none"
        raise ConfigError(
            f"warm needs exactly one of messages=, text= or ids= ({which}): pass the prefix "
            "in one form"
        )
    if tools and messages is None:
        raise ConfigError("warm: tools= go with messages=; render them into the prefix")
    return given[0]


def _start_span(
    tokens: int, kind: PrefetchKind, run_id: str, source: str, target: str, tracer: Tracer | None
) -> Span:
    return (tracer or tm.get_tracer()).start_span(
        tm.SPAN_PREFILL,
        attributes=tm.prefill_attributes(
            workflow=WARMUP_WORKFLOW,
            run_id=run_id,
            source=source,
            target=target,
            kind=kind,
            tokens=tokens,
        ),
    )


def _end_span(span: Span, outcome: PrefetchOutcome, computed: int) -> None:
    span.set_attribute(tm.AW_PREFILL_OUTCOME, str(outcome))
    span.set_attribute(tm.AW_PREFILL_COMPUTED_TOKENS, computed)
    span.end()


def record_dropped(
    tokens: int,
    *,
    kind: PrefetchKind,
    run_id: str = "",
    source: str = "warmup",
    target: str = "prefix",
    tracer: Tracer | None = None,
) -> None:
    """The ``agentwarm.prefill`` span of a warm-up prefix skipped before sending (outcome
    ``dropped``: over the budget, or nothing to send)."""
    span = _start_span(tokens, kind, run_id, source, target, tracer)
    _end_span(span, PrefetchOutcome.DROPPED, 0)


async def traced_prefill(
    tokens: int,
    send: Callable[[], Awaitable[PrefillResult]],
    *,
    abort: Callable[[], Awaitable[None]] | None = None,
    kind: PrefetchKind = PrefetchKind.EXPLICIT,
    session: str | None = None,
    source: str = "explicit",
    target: str = "prefix",
    run_id: str | None = None,
    tracer: Tracer | None = None,
) -> PrefillResult:
    """``await send()`` (a prefill of ``tokens`` tokens) inside its ``agentwarm.prefill`` span
    (module docstring; its run id is ``run_id``, default the ``session``; ``tracer``: default
    :func:`agentwarm.telemetry.get_tracer`'s). A failure ends the
    span as ``failed`` and raises; a cancellation calls ``abort`` (best effort), ends it as
    ``cancelled`` and re-raises."""
    span = _start_span(
        tokens, kind, run_id if run_id is not None else session or "", source, target, tracer
    )
    outcome, computed = PrefetchOutcome.FAILED, 0
    try:
        result = await send()
        computed = result.computed_tokens
        aborted = result.status is PrefillStatus.ABORTED
        outcome = PrefetchOutcome.CANCELLED if aborted else PrefetchOutcome.HIT
        return result
    except asyncio.CancelledError:
        outcome = PrefetchOutcome.CANCELLED
        if abort is not None:
            with contextlib.suppress(Exception):  # best effort: the caller cancelled anyway
                await asyncio.shield(abort())
        raise
    except Exception as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)))
        raise
    finally:
        _end_span(span, outcome, computed)


async def warm_ids(
    engine: Engine,
    ids: Sequence[int],
    *,
    rid: str | None = None,
    namespace: str = "",
    session: str | None = None,
    ttl_s: float | None = DEFAULT_TTL_S,
    kind: PrefetchKind = PrefetchKind.EXPLICIT,
) -> PrefillResult:
    """Prefill ``ids`` as a warm (:func:`warm`, once the prefix is ids); ``rid`` names the
    request for ``engine.abort``."""
    rid = rid or new_rid()

    def send() -> Awaitable[PrefillResult]:
        return engine.prefill(
            ids,
            priority=Priority.SPECULATIVE,
            rid=rid,
            namespace=namespace,
            session=session,
            pin_ttl_s=ttl_s,
        )

    return await traced_prefill(
        len(ids), send, abort=lambda: engine.abort(rid), kind=kind, session=session
    )


async def warm(
    engine: Engine,
    *,
    messages: Sequence[Message] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    text: str | None = None,
    ids: Sequence[int] | None = None,
    namespace: str = "",
    session: str | None = None,
    ttl_s: float | None = DEFAULT_TTL_S,
    renderer: ChatRenderer | None = None,
    kind: PrefetchKind = PrefetchKind.EXPLICIT,
) -> PrefillResult:
    """Prefill a prefix into ``engine``'s cache now, at speculative priority, and pin it for
    ``ttl_s`` seconds (``None``: the engine's default pin; engines without pins ignore it).

    Give exactly one of ``messages`` (+ ``tools``), ``text`` or ``ids`` (module docstring;
    rendered and tokenized in a thread, by ``renderer`` or the engine's own, :func:`renderer_for`);
    ``namespace`` is the cache namespace of the requests that will use it, ``session`` their
    routing key (a multi-worker engine warms the worker the session goes to). Returns the
    engine's :class:`PrefillResult` (``cached_tokens``: what was cached already). Raises
    :class:`ConfigError` for a bad prefix and the engine's error when the prefill fails.
    """
    check_form(messages=messages, tools=tools, text=text, ids=ids)  # a bad form: no thread
    if ids is not None:
        prefix = prefix_ids(engine, ids=ids)
    else:
        if messages is not None and renderer is None:
            renderer = renderer_for(engine)  # on the loop: one per engine
        prefix = await asyncio.to_thread(
            prefix_ids, engine, messages=messages, tools=tools, text=text, renderer=renderer
        )
    return await warm_ids(
        engine, prefix, namespace=namespace, session=session, ttl_s=ttl_s, kind=kind
    )
