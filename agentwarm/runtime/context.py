"""The per-step context handed to node functions."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from agentwarm import telemetry as tm
from agentwarm.engines.base import Completion, Priority
from agentwarm.errors import ContextLengthExceeded
from agentwarm.runtime.transcript import Transcript

if TYPE_CHECKING:
    from agentwarm.runtime.prefetch import StepScope
    from agentwarm.runtime.runner import Run

__all__ = ("Context",)


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
        step: this step's index in the run.
    """

    input: str
    state: dict[str, Any]
    transcript: Transcript
    node: str
    path: tuple[str, ...]
    run_id: str
    step: int
    _run: Run = field(repr=False)
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
        """Call the model with this node's prompt: ``[system][tools][transcript][text]``.

        The prompt is rendered prefix-stably (DESIGN §3). With ``record`` (default) ``text`` and
        the reply are appended to the shared transcript, so later steps see them.
        ``Completion.ttft_s`` is measured from this call (including any wait for this node's
        confirmed warm-up on engines that cannot reuse it in flight).
        """
        run, scope = self._run, self._scope
        spec = scope.spec
        t0 = time.perf_counter()
        first = scope.step.llm_calls == 0
        scope.step.llm_calls += 1
        if first:
            scope.lead_s = t0 - scope.started
        ids = run.renderer.prompt_ids(spec, text)
        await run.prefetcher.before_live(spec.name)
        tokens = max_tokens if max_tokens is not None else spec.max_tokens
        with run.tracer.start_as_current_span(
            tm.llm_span_name(run.engine.model_name),
            kind=run.llm_span_kind,
            attributes=tm.llm_request_attributes(
                model=run.engine.model_name,
                provider=run.provider,
                max_tokens=tokens,
                temperature=temperature,
                agent=spec.name,
            ),
        ) as span:
            if tm.capture_content():
                span.set_attribute(tm.GEN_AI_INPUT_MESSAGES, text or "")
            t_send = time.perf_counter()
            try:
                completion = await run.engine.generate(
                    ids,
                    max_tokens=tokens,
                    temperature=temperature,
                    priority=Priority.LIVE,
                    namespace=run.namespace,
                    session=run.run_id,
                    seed=seed,
                )
            except ContextLengthExceeded as exc:
                error = ContextLengthExceeded(
                    f"Node '{spec.name}': {exc}",
                    prompt_tokens=exc.prompt_tokens,
                    max_tokens=exc.max_tokens,
                    limit=exc.limit,
                )
                error.node = spec.name
                raise error from exc
            ttft = (t_send - t0) + completion.ttft_s
            span.set_attributes(
                tm.llm_response_attributes(
                    input_tokens=completion.prompt_tokens,
                    output_tokens=len(completion.token_ids),
                    cached_tokens=completion.cached_tokens,
                    finish_reason=completion.finish_reason,
                    ttft_s=ttft,
                )
            )
            if tm.capture_content():
                span.set_attribute(tm.GEN_AI_OUTPUT_MESSAGES, completion.text)
        step = scope.step
        if first:
            step.ttft_s = ttft
            step.prompt_tokens = completion.prompt_tokens
            step.cached_tokens = completion.cached_tokens
            run.instruments.record_ttft(run.workflow.name, ttft, step.outcome)
        if record:
            if text:
                self.transcript.add(text, role="user", node=spec.name)
            self.transcript.add(completion.text, role="assistant", node=spec.name)
        run.prefetcher.refresh(scope, completion.text)
        return completion

    def add(self, content: str, *, role: str = "tool") -> None:
        """Append a message (a tool result, an observation) to the shared transcript.

        The prefetched prefixes of the likely next steps are extended with it at once, so a tool
        result that arrives while the step waits (a user's reply, a slow tool) is cached too.
        """
        self.transcript.add(content, role=role, node=self.node)
        refresh = functools.partial(self._run.prefetcher.refresh, self._scope, after_llm=False)
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:  # a sync node's thread: no running loop there
            on_loop = False
        if on_loop:
            refresh()
        else:  # the prefetcher belongs to the loop; hand it the work instead of racing it
            with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
                self._loop.call_soon_threadsafe(refresh)

    @property
    def span(self) -> trace.Span:
        """The current step's span, for user attributes."""
        return trace.get_current_span()
