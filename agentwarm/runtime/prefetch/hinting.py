"""What the prefetcher reads besides the path, and the prefetches it adds because of it
(:class:`Reading`, a part of :class:`~agentwarm.runtime.prefetch.prefetcher.Prefetcher`):

* the **conversation**: a :class:`~agentwarm.predictors.ContextPredictor` predicts from the
  run's transcript (:class:`~agentwarm.predictors.StepContext`) at step start and again each
  time it grows; likely successors not prefetched yet are started, running ones that fell
  below ``min_p`` are stopped;
* the step's **output**: the successor a finished LLM output names
  (:func:`~agentwarm.runtime.prefetch.hints.output_hint`), and, while a live request streams,
  the first successor its partial output names (a *mid-decode hint*,
  :class:`~agentwarm.runtime.prefetch.scanner.HintScanner`), prefetched at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from agentwarm.engines.base import Completion, Engine, StreamChunk
from agentwarm.errors import EngineError
from agentwarm.predictors import ContextPredictor, StepContext, predict_with
from agentwarm.runtime.prefetch.hints import output_hint, scanner_for
from agentwarm.runtime.prefetch.rules import fallen_targets
from agentwarm.runtime.prefetch.scanner import HintScanner
from agentwarm.runtime.prefetch.state import Prefetch, Request, StepScope

if TYPE_CHECKING:
    from agentwarm.graphs import CompiledGraph
    from agentwarm.predictors import Predictor
    from agentwarm.runtime.guardrail import Guardrail
    from agentwarm.runtime.policy import PrefetchPolicy
    from agentwarm.runtime.prefetch.choice import Choice
    from agentwarm.runtime.prefetch.sender import Sender
    from agentwarm.runtime.timing import StepTiming
    from agentwarm.runtime.transcript import Transcript

__all__ = ("Reading", "read_stream")


async def read_stream(
    stream: AsyncIterator[StreamChunk], read: Callable[[str], None]
) -> Completion:
    """Consume a generation ``stream``, handing each piece of text to ``read`` as it arrives;
    return the completion its last chunk carries (the one ``generate`` returns). The stream is
    closed however this ends (closing it early aborts the request)."""
    completion: Completion | None = None
    async with contextlib.aclosing(stream) as chunks:  # type: ignore[type-var]
        async for chunk in chunks:
            if chunk.text:
                read(chunk.text)
            if chunk.completion is not None:
                completion = chunk.completion
    if completion is None:
        raise EngineError("the engine's stream ended without its completion (its last chunk)")
    return completion


class Reading:
    """The prefetcher's reading of the conversation and of the step's output (see the module
    docstring); mixed into the Prefetcher, whose sending machinery it uses."""

    workflow: CompiledGraph
    engine: Engine
    predictor: Predictor
    transcript: Transcript | None
    policy: PrefetchPolicy
    guardrail: Guardrail
    timing: StepTiming
    _sender: Sender
    _choice: Choice
    _instruments: Any

    if TYPE_CHECKING:  # the Prefetcher's

        def _speculate(self, scope: StepScope, hinted: str | None = None) -> None: ...

        def _swallow(self, exc: Exception, what: str, *args: object) -> None: ...

        def _start(
            self, scope: StepScope, target: str, p: float, rank: int, ids: list[int] | None
        ) -> Prefetch: ...

        def _send(
            self, scope: StepScope, pf: Prefetch, ids: list[int], replace: Request | None = None
        ) -> bool: ...

    def _extend(self, scope: StepScope, targets: list[str], *, revive: bool = False) -> None:
        """Bring each target's prefetch up to its prefix now: start the ones not prefetched,
        send the dropped ones (and, with ``revive``, stopped ones) again, supersede shorter."""
        for target, ids in self._choice.within_budget(targets):
            assert ids is not None  # only an `admissible` refusal yields None
            pf = scope.prefetches.get(target)
            if pf is None:
                p = dict(scope.predictions).get(target, 0.0)
                self._start(scope, target, p, -1, ids)
            elif pf.latest is None or (revive and not pf.latest.shareable):
                # Dropped so far (admission may take it now), or stopped and hinted now.
                if self._send(scope, pf, ids):
                    self._instruments.record_issued(self.workflow.name)
            elif len(ids) > pf.latest.ids_len:
                old = pf.latest if pf.latest is not None and pf.latest.running else None
                # The longer prefix supersedes the running request (and takes its slot);
                # refused, the running one goes on.
                if self._send(scope, pf, ids, replace=old) and old is not None:
                    self._sender.stop(old)

    def _predict(self, scope: StepScope) -> None:
        """Predict ``scope``'s successors, reading the conversation now (a predictor that
        does not read context predicts from the path alone, as it always did)."""
        if self.transcript is not None:
            scope.context = StepContext.from_messages(self.transcript.messages())
        scope.predictions = list(
            predict_with(
                self.predictor,
                scope.path,
                scope.state,
                candidates=self.workflow.successors(scope.spec.name),
                context=scope.context,
            )
        )
        if not scope.first_predictions:
            scope.first_predictions = scope.predictions

    def _repredict(self, scope: StepScope) -> bool:
        """Predict again on the grown conversation (a ContextPredictor only: for others the
        path, hence the prediction, is unchanged). True when the predictions were renewed."""
        if self.transcript is None or not isinstance(self.predictor, ContextPredictor):
            return False
        try:
            self._predict(scope)
            return True
        except Exception as exc:
            self._swallow(exc, "re-predicting the successors of step %r", scope.spec.name)
            return False

    def _stop_fallen(self, scope: StepScope) -> list[str]:
        """After a re-prediction: mark the candidates that fell below ``min_p`` fallen (not a
        hinted one; not extended while they stay there) and stop their running requests.
        Returns the ones fallen earlier that rose above it again: to be sent again."""
        limits = self.guardrail.limits(self.policy)
        p = dict(scope.predictions)
        risen = [t for t in scope.fallen if p.get(t, 0.0) >= limits.min_p]
        scope.fallen.difference_update(risen)
        keep = [scope.hinted] if scope.hinted is not None else []
        for target in fallen_targets(scope.prefetches, scope.predictions, limits.min_p, keep):
            scope.fallen.add(target)
            for req in scope.prefetches[target].requests:
                self._sender.stop(req)
        return risen

    async def generate(
        self,
        scope: StepScope,
        ids: list[int],
        params: dict[str, Any],
    ) -> Completion:
        """The live LLM call of ``scope``'s step (``params``: ``Engine.generate``'s keywords).
        Streamed when hints are on and the step has none yet: the first successor its partial
        output names is prefetched at once (:meth:`hint`) and kept, with when it was read and
        when the call returned, as ``scope.mid_hint``."""
        scanner = self.scanner(scope) if scope.hinted is None else None
        if scanner is None:
            return await self.engine.generate(ids, **params)

        def read(piece: str) -> None:
            if scanner.hint is None and (name := self.read_stream(scope, scanner, piece)):
                scope.mid_hint = (name, time.perf_counter(), None)

        completion = await read_stream(self.engine.generate_stream(ids, **params), read)
        if scope.mid_hint is not None and scanner.hint is not None:  # hinted by this call
            scope.mid_hint = (*scope.mid_hint[:2], time.perf_counter())
        return completion

    def scanner(self, scope: StepScope) -> HintScanner | None:
        """A scanner of one streamed LLM output of ``scope``'s step (:meth:`read_stream`);
        ``None`` when hints are off or no successor could be hinted."""
        if not (self.policy.enabled and self.policy.use_output_hints):
            return None
        try:
            successors = self.workflow.successors(scope.spec.name)
            return scanner_for(scope.spec, successors, self.timing.reads_prompt)
        except Exception as exc:
            self._swallow(exc, "reading hints of step %r", scope.spec.name)
            return None

    def read_stream(self, scope: StepScope, scanner: HintScanner, text: str) -> str | None:
        """Feed the next piece of a streamed output to ``scanner``; on the first successor it
        names, prefetch it at once (:meth:`hint`) and return its name."""
        try:
            name = scanner.feed(text)
        except Exception as exc:
            self._swallow(exc, "reading hints of step %r", scope.spec.name)
            return None
        if name is not None:
            self.hint(scope, name)
        return name

    def hint(self, scope: StepScope, name: str) -> None:
        """The step's output named ``name`` before the step ended: prefetch it now, within the
        budget (already prefetched: nothing new; stopped after falling: sent again)."""
        try:
            scope.hinted = name
            revive = name in scope.fallen
            scope.fallen.discard(name)
            if name in scope.prefetches and not revive:
                return
            if self.guardrail.limits(self.policy).paused:
                return
            self._extend(scope, [name], revive=revive)
        except Exception as exc:
            self._swallow(exc, "prefetching the hinted %r in step %r", name, scope.spec.name)

    def _hinted(self, scope: StepScope, text: str) -> str | None:
        """The successor the finished output ``text`` names, now ``scope.hinted``: it replaces
        a mid-decode hint the whole output does not confirm (``None``: no exemption left)."""
        if not self.policy.use_output_hints or not text:
            return None
        successors = self.workflow.successors(scope.spec.name)
        hinted = output_hint(text, scope.spec, successors, self.timing.reads_prompt)
        scope.hinted = hinted
        if hinted is not None:
            scope.fallen.discard(hinted)
        return hinted
