"""Reading an OpenAI chat reply as it passes through the gateway: :class:`SSEReader` splits the
upstream's bytes into ``data:`` events (the bytes themselves go to the client unchanged), and
:class:`ReplyAssembler` builds the :class:`~agentwarm.gateway.types.Reply` from the events or
from a whole (non-streamed) body.

Assembly rules (OpenAI's streaming format, as SGLang, vLLM and ``agentwarm serve`` send it):
the text is the concatenation of ``choices[0].delta.content``; tool calls are merged by their
``index`` (``id``, ``type`` and ``function.name`` from the first delta that has them,
``function.arguments`` concatenated); ``usage`` is the last non-null one (the
``stream_options.include_usage`` chunk); the time to first token is taken at the first chunk
with content or a tool call; an ``{"error": ...}`` event makes the reply's status its ``code``
(500 without one).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from agentwarm.gateway.types import Reply

__all__ = ("DONE", "ReplyAssembler", "SSEReader")

#: The data of the stream's last event.
DONE = "[DONE]"


class SSEReader:
    """Incremental server-sent-events parser: :meth:`feed` bytes as they arrive, get back the
    ``data`` of each event they complete (multi-line data joined by ``\\n``; ``event:``, ``id:``
    and comment lines ignored)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    @property
    def mid_event(self) -> bool:
        """Whether the bytes so far end inside an event (a stream cut here left it partial)."""
        return bool(self._buffer or self._data)

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        done: list[str] = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                return done
            line = self._buffer[:end].rstrip(b"\r").decode("utf-8", "replace")
            self._buffer = self._buffer[end + 1 :]
            if not line:
                if self._data:
                    done.append("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(" ") else value)


class ReplyAssembler:
    """The :class:`Reply` of one call, built from stream events (:meth:`add_event`) or a whole
    body (:meth:`add_body`). ``received`` is when the gateway got the request
    (``time.perf_counter()``); ``on_tool`` is called with a tool's name as soon as a call of it
    appears in a stream (once per call; a whole body's calls are in its message)."""

    def __init__(self, received: float, on_tool: Callable[[str], None] | None = None) -> None:
        self.received = received
        self.on_tool = on_tool
        self.status = 200
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Mapping[str, Any] = {}
        self.ttft_s: float | None = None
        self.role = "assistant"
        self.whole: dict[str, Any] | None = None

    def add_event(self, data: str) -> None:
        """One event's data (``[DONE]`` and what is not a JSON object are skipped)."""
        if data.strip() == DONE:
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            return
        if isinstance(chunk, dict):
            self.add_chunk(chunk)

    def add_chunk(self, chunk: Mapping[str, Any]) -> None:
        error = chunk.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, Mapping) else None
            self.status = code if isinstance(code, int) and code >= 400 else 500
            return
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        if not isinstance(delta, Mapping):
            return
        if isinstance(delta.get("role"), str):
            self.role = delta["role"]
        started = False
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.content.append(content)
            started = True
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, call in enumerate(calls):
                if isinstance(call, Mapping):
                    self._merge_call(call, position)
                    started = True
        if started and self.ttft_s is None:
            self.ttft_s = time.perf_counter() - self.received

    def add_body(self, body: Any) -> None:
        """A non-streamed reply: its message and usage as they are; the time to first token is
        the time to the whole reply."""
        if not isinstance(body, dict):
            return
        self.whole = body
        usage = body.get("usage")
        if isinstance(usage, Mapping):
            self.usage = usage
        if self.status == 200:
            self.ttft_s = time.perf_counter() - self.received

    def reply(self) -> Reply:
        """The reply so far (call it once the stream ended)."""
        duration = time.perf_counter() - self.received
        ok = self.status < 400
        message: dict[str, Any]
        if self.whole is not None:
            choices = self.whole.get("choices")
            first = choices[0] if isinstance(choices, list) and choices else None
            found = first.get("message") if isinstance(first, Mapping) else None
            message = dict(found) if isinstance(found, Mapping) else {}
        else:
            message = {"role": self.role, "content": "".join(self.content) or None}
            if self.calls:
                message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return Reply(
            status=self.status,
            message=message,
            usage=self.usage,
            ttft_s=self.ttft_s if ok else None,
            duration_s=duration,
        )

    def _merge_call(self, delta: Mapping[str, Any], position: int) -> None:
        index = delta.get("index")
        if not isinstance(index, int):
            index = position
        call = self.calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if delta.get("id") and not call["id"]:
            call["id"] = delta["id"]
        if isinstance(delta.get("type"), str):
            call["type"] = delta["type"]
        function = delta.get("function")
        if not isinstance(function, Mapping):
            return
        name = function.get("name")
        if isinstance(name, str) and name and not call["function"]["name"]:
            call["function"]["name"] = name
            if self.on_tool is not None:
                self.on_tool(name)
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["function"]["arguments"] += arguments
