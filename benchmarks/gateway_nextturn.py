"""The gateway benchmark's ``next_turn`` mode: Dynamo's speculative next-turn prefill, as a client.

What it mirrors is described in :mod:`agentwarm.bench.nextturn` (read from Dynamo's
``speculative_prefill.rs``): once a reply's stream has ended, the request's messages plus one
assistant message holding the reply's streamed text (tool-call deltas are not text) are rendered
with the model's template, no generation prompt, no tools, and sent to the same upstream as one
``max_tokens=1`` request with no priority (:attr:`~agentwarm.engines.Priority.LIVE` on these
engines), in the background. Dynamo does it in its frontend; here the benchmark's client does,
straight to the upstream (no gateway), with token ids rendered as the upstream renders
(:func:`~benchmarks.gateway_replay.renderer_for`), in the ``cache_salt`` of the mode's requests.
For ``vllm`` the tools travel as text in the system prompt
(:func:`~benchmarks.gateway_replay.without_tools`), so there the warm keeps them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agentwarm.bench.nextturn import WARM_TIMEOUT_S
from agentwarm.chat import Message, render_ids
from agentwarm.engines.base import Engine, GenerateParams
from agentwarm.engines.types import Priority
from agentwarm.errors import AgentwarmError, ConfigError
from agentwarm.warmup.render import ChatRenderer

__all__ = ("NextTurnClient",)

_log = logging.getLogger(__name__)


class NextTurnClient:
    """Sends the next-turn warm of each reply to ``engine`` (a client of the upstream) and
    counts them: ``warms``, ``failed``, ``computed_tokens`` (what the upstream prefilled for
    them) and ``cached_tokens`` (what it found cached already)."""

    def __init__(self, engine: Engine, chat: ChatRenderer, *, salt: str | None = None) -> None:
        self.engine = engine
        self.chat = chat
        self.salt = salt or ""
        self.warms = self.failed = self.computed_tokens = self.cached_tokens = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def after_reply(self, body: dict[str, Any], reply_text: str) -> None:
        """``body``'s reply has ended with ``reply_text``: render and send its next turn."""
        messages: list[Message] = [*body["messages"], {"role": "assistant", "content": reply_text}]
        try:
            ids = render_ids(
                self.chat.template, self.chat.encode, messages, add_generation_prompt=False
            ).ids
        except ConfigError as exc:
            _log.warning("next_turn: cannot render the next turn (%s); no warm", exc)
            return
        self.warms += 1
        task = asyncio.create_task(self._send(ids))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, ids: list[int]) -> None:
        params = GenerateParams(max_tokens=1, priority=Priority.LIVE, namespace=self.salt)
        try:
            out = await asyncio.wait_for(self.engine.generate_with(ids, params), WARM_TIMEOUT_S)
        except (AgentwarmError, TimeoutError) as exc:
            self.failed += 1
            _log.warning("next_turn: a warm failed (%s)", exc)
            return
        self.computed_tokens += out.computed_tokens
        self.cached_tokens += out.cached_tokens

    async def drain(self) -> None:
        """Wait for every warm sent so far to end."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def figures(self) -> dict[str, int]:
        return {
            "next_turn_warms": self.warms,
            "next_turn_failed": self.failed,
            "next_turn_computed_tokens": self.computed_tokens,
            "next_turn_cached_tokens": self.cached_tokens,
        }
