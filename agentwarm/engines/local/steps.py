"""The seam between the scheduler and the model: the scheduler decides, a :class:`StepRunner`
computes.

``Scheduler(model_runner, cache)`` (:class:`~agentwarm.engines.local.engine.LocalEngine`) wraps
a torch ``ModelRunner`` in :class:`TorchSteps`; ``FakeEngine`` gives a cost model instead (see
``agentwarm/engines/fake.py``). Torch is imported only by TorchSteps, so the fake runs the
scheduler without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentwarm.engines.local.request import Request, RequestKind

if TYPE_CHECKING:
    import torch

    from agentwarm.engines.local.kv import KV, SequenceState
    from agentwarm.engines.local.runner import ModelRunner

__all__ = ("ChunkInterrupted", "StepRunner", "TorchSteps")


class ChunkInterrupted(Exception):
    """A prefill chunk stopped early because the scheduler asked it to yield; nothing of it
    was kept (the state is as before the call)."""


class StepRunner:
    """What the scheduler asks of the model (the seam). All calls come from the worker.

    A state holds the processed tokens of one request: ``state.length`` of them, and
    ``state.kv(start, stop)`` returns the payload the radix tree stores for a token range.
    """

    eos_token_id: int | None = None
    max_context: int = 0

    def worker_context(self) -> contextlib.AbstractContextManager[Any]:
        """Entered around the worker thread's whole life (torch: inference mode)."""
        return contextlib.nullcontext()

    def new_state(self, req: Request, values: tuple[Any, ...], length: int) -> Any:
        """A state for ``req`` holding its first ``length`` tokens, whose cached payloads are
        ``values`` (``None`` where a node has none). Called at the request's first step and
        again when it resumes past tokens another request computed; the first call for a
        generate also prepares its sampling."""
        raise NotImplementedError

    def extend(
        self,
        state: Any,
        ids: Sequence[int],
        *,
        want_logits: bool,
        interrupt: Callable[[], bool] | None,
    ) -> Any:
        """Process ``ids`` after ``state``'s tokens; return next-token logits if
        ``want_logits``. Raises :class:`ChunkInterrupted` (state unchanged) when ``interrupt``
        is given and returns true before the work is done."""
        raise NotImplementedError

    def decode_step(self, state: Any, token: int) -> Any:
        """Process one generated token; return the next-token logits."""
        raise NotImplementedError

    def sample(self, req: Request, logits: Any) -> int:
        """The next output token of ``req`` from ``logits``."""
        raise NotImplementedError

    def text(self, ids: Sequence[int]) -> str:
        """The text of output token ids."""
        raise NotImplementedError


class TorchSteps(StepRunner):
    """The StepRunner of the embedded engine: a torch :class:`ModelRunner` and its sampling."""

    def __init__(self, runner: ModelRunner) -> None:
        from agentwarm.engines.local import kv
        from agentwarm.engines.local import runner as rt

        self.runner = runner
        self._rt = rt
        self._interrupted = kv.Interrupted
        self.eos_token_id = runner.eos_token_id
        self.max_context = runner.max_context

    def worker_context(self) -> contextlib.AbstractContextManager[Any]:
        """Inference mode, and on CUDA the model's device as the thread's current device
        (kernels and generators that name no index then use the model's GPU)."""
        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        if self.runner.device.type == "cuda":
            stack.enter_context(torch.cuda.device(self.runner.device))
        return stack

    def new_state(self, req: Request, values: tuple[Any, ...], length: int) -> SequenceState:
        if req.kind is RequestKind.GENERATE and req.generator is None:
            req.generator = self._rt.make_generator(req.seed, self.runner.device)
        pieces: list[KV] = [v for v in values if v is not None]
        reserve = len(req.ids) + req.max_tokens - sum(int(p.shape[3]) for p in pieces)
        return self.runner.new_state(pieces, reserve=reserve)

    def extend(
        self,
        state: SequenceState,
        ids: Sequence[int],
        *,
        want_logits: bool,
        interrupt: Callable[[], bool] | None,
    ) -> torch.Tensor | None:
        state.interrupt = interrupt
        try:
            return self.runner.extend(state, ids, want_logits=want_logits)
        except self._interrupted:
            raise ChunkInterrupted from None
        finally:
            state.interrupt = None

    def decode_step(self, state: SequenceState, token: int) -> torch.Tensor:
        return self.runner.decode_step(state, token)

    def sample(self, req: Request, logits: torch.Tensor) -> int:
        return self._rt.sample(logits, temperature=req.temperature, generator=req.generator)

    def text(self, ids: Sequence[int]) -> str:
        return self.runner.tokenizer.decode(ids)
