"""One streamed ``POST /generate`` of an SGLang client, read as :class:`StreamChunk` objects.

The server answers Server-Sent Events (:func:`~agentwarm.engines.sglang.protocol.sse_payloads`),
each a :class:`~agentwarm.engines.sglang.protocol.GenerateReply` holding either the whole output
so far or only what is new (:func:`~agentwarm.engines.sglang.protocol.output_delta`), or an
error event. ``ttft`` is the client-side time to the first generated token.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, cast

import httpx

from agentwarm.engines.base import Completion, StreamChunk
from agentwarm.engines.sglang.connection import Connection
from agentwarm.engines.sglang.errors import PRIORITY_DISABLED, PriorityDisabled, event_error
from agentwarm.engines.sglang.protocol import (
    GenerateReply,
    finish_message,
    finish_type,
    meta_info,
    output_delta,
    sse_payloads,
)
from agentwarm.errors import EngineError, RequestAborted

__all__ = ("Finish", "stream_generate")

Finish = Callable[[GenerateReply, list[int], str, float, float], Completion]
"""Builds the completion from the last event, all ids, all text, ttft and end-to-end seconds."""


async def stream_generate(
    http: Connection,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    rid: str,
    check: Callable[[EngineError], None],
    finish: Finish,
) -> AsyncGenerator[StreamChunk, None]:
    """Chunks of new tokens as events arrive; the last one carries ``finish``'s completion.

    ``check`` sees every failure of the request before it is raised (the client turns those of an
    aborted rid into :class:`~agentwarm.errors.RequestAborted`). An abort ``finish_reason``
    raises ``RequestAborted`` (or :class:`PriorityDisabled` when the server refused the
    priority).
    """
    start = time.perf_counter()
    ttft: float | None = None
    out_ids: list[int] = []
    text = ""
    try:
        async with http.stream("/generate", body, headers) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                exc = http.status_error(resp, "/generate")
                check(exc)
                raise exc
            async for payload in sse_payloads(resp.aiter_text()):
                event = _event(payload, http.url, check)
                if event is None:
                    continue
                meta = meta_info(event)
                new_ids, new_text = output_delta(event, out_ids, text)
                out_ids.extend(new_ids)
                text += new_text
                if new_ids and ttft is None:
                    ttft = time.perf_counter() - start
                if meta.get("finish_reason") is None:
                    if new_ids or new_text:
                        yield StreamChunk(tuple(new_ids), new_text)
                    continue
                if finish_type(meta) == "abort":
                    message = finish_message(meta)
                    if PRIORITY_DISABLED in message:
                        raise PriorityDisabled(f"{http.url}/generate: {message}")
                    raise RequestAborted(f"{http.url}: request {rid} aborted: {message}")
                e2e = time.perf_counter() - start
                completion = finish(event, out_ids, text, e2e if ttft is None else ttft, e2e)
                yield StreamChunk(tuple(new_ids), new_text, completion)
                return
    except httpx.HTTPError as exc:
        err = http.transport_error(exc, "/generate")
        check(err)
        raise err from exc
    raise EngineError(f"{http.url}/generate: stream of {rid} ended without a finish_reason")


def _event(payload: str, url: str, check: Callable[[EngineError], None]) -> GenerateReply | None:
    """One event; an error event raised; ``None`` for a payload that is not a JSON object."""
    try:
        event = json.loads(payload)
    except ValueError as exc:
        raise EngineError(f"{url}/generate: bad SSE event {payload[:200]!r}") from exc
    if not isinstance(event, dict):
        return None
    if "error" in event:
        err = event_error(event["error"], url)
        check(err)
        raise err
    return cast(GenerateReply, event)
