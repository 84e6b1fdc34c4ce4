"""The per-step context handed to node functions, and the narrow port it uses to reach its run.

``Context`` never touches the run's internals: its LLM calls and transcript notifications go
through :class:`RunPort`, which :class:`agentwarm.runtime.run.Run` satisfies (this module does
not import it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import trace

from agentwarm.runtime.transcript import Transcript, check_tool_calls

if TYPE_CHECKING:
    from agentwarm.engines.base import Completion
    from agentwarm.runtime.prefetch import StepScope

__all__ = ("Context", "RunPort")


class RunPort(Protocol):
    """What a step's :class:`Context` may ask of its run."""

    async def llm(
        self,
        scope: StepScope,
        text: str | None,
        *,
        max_tokens: int | None,
        temperature: float,
        seed: int | None,
        record: bool,
    ) -> Completion:
        """Run one live LLM call of the step ``scope`` (see :meth:`Context.llm`)."""
        ...

    def transcript_grew(self, scope: StepScope) -> None:
        """The step ``scope`` added to the transcript (on the run's loop)."""
        ...


@dataclass(eq=False)
class Context:
    """What a node function sees. One per step; ``state`` and ``transcript`` are shared by the
    whole run.

    Attributes:
        input: the run's input text.
        state: a dict shared by every step of the run (and returned in ``RunResult.state``).
        transcript: the shared append-only transcript; ``ctx.llm`` appends its exchange, tool
            results go in with :meth:`add`.
        node: the name of the running node.
        path: the nodes of this branch so far, ending with ``node``.
        run_id: the run's id (also the engine session / routing key).
        step_index: this step's index in the run (its ``StepRecord.index``).
    """

    input: str
    state: dict[str, Any]
    transcript: Transcript
    node: str
    path: tuple[str, ...]
    run_id: str
    step_index: int
    _run: RunPort = field(repr=False)
    _scope: StepScope = field(repr=False)
    _loop: asyncio.AbstractEventLoop = field(repr=False, default_factory=asyncio.get_running_loop)

    async def llm(
        self,
        text: str | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        seed: int | None = None,
        record: bool = True,
    ) -> Completion:
        """Call the model with this node's prompt: the messages ``[system][transcript][text]``
        and the node's tools, rendered with the engine's chat template.

        The prompt is rendered prefix-stably (DESIGN §3). With ``record`` (default) ``text`` and
        the reply are appended to the shared transcript, so later steps see them (the reply as an
        OpenAI endpoint returns it: the tool calls it made, ``Completion.tool_calls``, apart from
        its text).
        ``Completion.ttft_s`` is measured from this call (including any wait for this node's
        confirmed warm-up on engines that cannot reuse it in flight).
        """
        return await self._run.llm(
            self._scope,
            text,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
            record=record,
        )

    def add(
        self,
        content: str,
        *,
        role: str = "tool",
        tool_call_id: str | None = None,
        name: str | None = None,
        tool_calls: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Append a message (a tool result, an observation) to the shared transcript.

        By default it is a ``tool`` message; ``tool_call_id`` names the call it answers (the
        ``id`` of one of ``Completion.tool_calls``) and ``name`` the tool, for chat templates
        that render them. ``tool_calls`` (``role="assistant"`` only) are the calls an assistant
        message made, in OpenAI's form ``{"id", "type": "function", "function": {"name",
        "arguments"}}`` — e.g. to replay a recorded conversation or add another model's turn.
        The prefetched prefixes of the likely next steps are extended with it at once, so a tool
        result that arrives while the step waits (a user's reply, a slow tool) is cached too.

        Raises :class:`~agentwarm.errors.ConfigError` for ``tool_calls`` on another role or
        a call without a ``function.name``.
        """
        if tool_calls:
            check_tool_calls(role, tool_calls)
        self.transcript.add(
            content,
            role=role,
            node=self.node,
            tool_call_id=tool_call_id,
            name=name,
            tool_calls=tool_calls,
        )
        grew = functools.partial(self._run.transcript_grew, self._scope)
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:  # a sync node's thread: no running loop there
            on_loop = False
        if on_loop:
            grew()
        else:  # the run belongs to the loop; hand it the work instead of racing it
            with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
                self._loop.call_soon_threadsafe(grew)

    @property
    def prefetches_running(self) -> int:
        """How many prefill requests this step's prefetching has sent (or is about to send)
        that are still running; read-only, for diagnostics and tests (e.g. a node that waits
        until its step's prefetches have ended)."""
        return self._scope.requests_running

    @property
    def span(self) -> trace.Span:
        """The current step's span, for user attributes."""
        return trace.get_current_span()
