"""One streamed ``POST /v1/completions`` of a vLLM client, read in a task of its own.

The request is read by a task (:func:`start_stream`) that puts each piece on a queue, so that an
abort can cancel that task — closing the connection, which makes vLLM abort the request —
without cancelling the caller. Pieces: ``(ids, text)`` as tokens arrive, then one
:class:`Final` (or the error that ended the request). ``ttft_s`` is client-side: from the start
of the request to the first event carrying a token.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from agentwarm.engines.sglang.connection import Connection
from agentwarm.engines.sglang.protocol import sse_payloads
from agentwarm.engines.vllm.errors import event_error, status_error
from agentwarm.engines.vllm.protocol import COMPLETIONS, Usage, choice_delta
from agentwarm.errors import EngineError, RequestAborted

__all__ = ("Final", "Piece", "start_stream")


@dataclass(frozen=True, slots=True)
class Final:
    """The end of a request: all ids and text, why it finished, its usage, and timings."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: str
    usage: Usage
    ttft_s: float
    e2e_s: float


Piece = tuple[list[int], str] | Final | BaseException


async def _read(
    http: Connection,
    body: dict[str, Any],
    prompt_len: int,
    put: Callable[[Piece], None],
    on_first_token: Callable[[], None],
) -> None:
    start = time.perf_counter()
    ttft: float | None = None
    out_ids: list[int] = []
    text = ""
    reason: str | None = None
    usage: Usage | None = None
    try:
        async with http.stream(COMPLETIONS, body, {}) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise status_error(resp, http.url, COMPLETIONS)
            async for payload in sse_payloads(resp.aiter_text()):
                event = _event(payload, http.url)
                if isinstance(event.get("usage"), dict):
                    usage = Usage(event["usage"], prompt_len)
                ids, new_text, finish = choice_delta(event)
                reason = finish or reason
                if ids and ttft is None:
                    ttft = time.perf_counter() - start
                    on_first_token()
                if ids or new_text:
                    out_ids.extend(ids)
                    text += new_text
                    put((ids, new_text))
    except httpx.HTTPError as exc:
        err = http.transport_error(exc, COMPLETIONS)
        err.__cause__ = exc
        put(err)
        return
    except EngineError as exc:
        put(exc)
        return
    if reason is None:
        put(EngineError(f"{http.url}{COMPLETIONS}: stream ended without a finish_reason"))
        return
    e2e = time.perf_counter() - start
    final_usage = usage or Usage({}, prompt_len)
    put(Final(tuple(out_ids), text, reason, final_usage, e2e if ttft is None else ttft, e2e))


def _event(payload: str, url: str) -> dict[str, Any]:
    try:
        event = json.loads(payload)
    except ValueError as exc:
        raise EngineError(f"{url}{COMPLETIONS}: bad SSE event {payload[:200]!r}") from exc
    if not isinstance(event, dict):
        raise EngineError(f"{url}{COMPLETIONS}: SSE event is not an object: {payload[:200]!r}")
    if "error" in event:
        raise event_error(event["error"], url, COMPLETIONS)
    return event


def start_stream(
    http: Connection,
    body: dict[str, Any],
    prompt_len: int,
    *,
    rid: str,
    on_first_token: Callable[[], None],
) -> tuple[asyncio.Task[None], AsyncIterator[tuple[list[int], str] | Final]]:
    """The task reading the request, and the pieces it reads. Cancelling the task aborts the
    request: the pieces then end with :class:`~agentwarm.errors.RequestAborted`."""
    queue: asyncio.Queue[Piece] = asyncio.Queue()
    http.check_open()

    def ended(task: asyncio.Task[None]) -> None:
        # Also when the task was cancelled before it started: the pieces must end.
        if task.cancelled():
            queue.put_nowait(RequestAborted(f"{http.url}: request {rid} aborted"))

    task = asyncio.create_task(_read(http, body, prompt_len, queue.put_nowait, on_first_token))
    task.add_done_callback(ended)

    async def pieces() -> AsyncIterator[tuple[list[int], str] | Final]:
        try:
            while True:
                piece = await queue.get()
                if isinstance(piece, BaseException):
                    raise piece
                yield piece
                if isinstance(piece, Final):
                    return
        finally:
            task.cancel()  # closing early closes the connection: vLLM aborts the request

    return task, pieces()


def new_text(text: str, shown: str) -> str:
    """The new part of ``text`` (the decoding of a stream's ids so far) after ``shown``, the
    text already yielded: none while ``text`` ends in a partial character (U+FFFD) or would
    rewrite what was shown, so that the chunks' texts add up to the completion's text."""
    if text.endswith("\ufffd") or not text.startswith(shown):
        return ""
    return text[len(shown) :]
