"""What the embedded engine's :class:`~agentwarm.engines.local.scheduler.Scheduler` schedules:
requests, their kinds, the steps it plans and logs, and how a request's outcome becomes its
result (a :class:`PrefillResult`, a :class:`Completion` or an error)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from agentwarm.engines.base import Completion, PrefillResult, PrefillStatus, Priority
from agentwarm.engines.types import SOURCE_DEVICE, SOURCE_DISK, SOURCE_HOST
from agentwarm.errors import RequestAborted

if TYPE_CHECKING:
    import torch

    from agentwarm.engines.radix import RadixNode

__all__ = (
    "Future",
    "Request",
    "RequestKind",
    "Step",
    "StepEvent",
    "by_source_of",
    "resolve",
    "result_of",
)

Future = concurrent.futures.Future[Any] | asyncio.Future[Any]
"""A request's future: a ``concurrent.futures.Future`` (worker thread) or an asyncio one
(worker on the event loop)."""

RequestEnd = str | BaseException | None
"""How a request ends: ``None`` (prefill done), a finish reason (generate done) or an error."""


class RequestKind(Enum):
    PREFILL = "prefill"
    GENERATE = "generate"


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One unit of work, logged before it runs: a prefill chunk ``[start, stop)``, a decode
    step (``start`` = position of the fed token), or a ``"load"`` of the stored KV of tokens
    ``[start, stop)`` from the disk tier (:mod:`~agentwarm.engines.local.loading`). A
    speculative chunk that yielded to live work mid-way is logged again with kind
    ``"interrupted"`` (none of it was kept); in ``events`` that entry replaces its ``"prefill"``
    one, a ``step_hook`` sees both."""

    rid: str
    kind: str
    start: int
    stop: int
    priority: int


@dataclass(eq=False)
class Request:
    """A request as the scheduler sees it. Callers fill the first block; the worker the rest.

    ``on_token`` (generate only) is called on the worker with each generated token id,
    ``on_logits`` with the next-token logits before each sample; both must be thread-safe and
    quick. ``future`` is a ``concurrent.futures.Future`` unless the caller gives one (an
    asyncio future, for a worker on the event loop). ``pin_ttl_s`` (prefill only) is how long
    the finished prefill's prefix stays pinned (``None``: the scheduler's default).
    """

    rid: str
    kind: RequestKind
    ids: tuple[int, ...]
    priority: int
    namespace: str = ""
    max_tokens: int = 0
    temperature: float = 0.0
    seed: int | None = None
    on_token: Callable[[int], None] | None = None
    on_logits: Callable[[Any], None] | None = None
    pin_ttl_s: float | None = None
    t_submit: float = field(default_factory=time.perf_counter)
    future: Future = field(default_factory=concurrent.futures.Future)

    arrival: int = 0
    state: Any = None  # the step runner's per-request state (a SequenceState for torch)
    node: RadixNode[Any] | None = None
    cached_tokens: int = 0
    computed_tokens: int = 0
    #: Of ``cached_tokens``, those loaded from the disk tier (``None``: the engine has none).
    disk_tokens: int | None = None
    #: Of ``cached_tokens``, those loaded from the host tier (``None``: the engine has none).
    host_tokens: int | None = None
    #: While it loads from the disk tier: the end of the stored run it loads (0: not loading).
    load_stop: int = 0
    output: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    t_first_token: float | None = None

    @property
    def prefill_target(self) -> int:
        """Prompt tokens whose KV this request needs before it can decode."""
        return len(self.ids)

    @property
    def match_limit(self) -> int:
        """Prompt tokens it may take from the cache: a generate computes its last one (it
        needs that token's logits)."""
        return len(self.ids) - (1 if self.kind is RequestKind.GENERATE else 0)


@dataclass(slots=True)
class Step:
    """A step :meth:`Scheduler.next_step` planned (and logged) for :meth:`Scheduler.run_step`."""

    req: Request
    event: StepEvent

    @property
    def interruptible(self) -> bool:
        """A prefill chunk below live priority: work of higher priority may cut it short."""
        return self.event.kind == "prefill" and self.req.priority < Priority.LIVE


def result_of(
    req: Request, outcome: RequestEnd, text: Callable[[Sequence[int]], str]
) -> PrefillResult | Completion | BaseException:
    """What ``req``'s future resolves with when it ends with ``outcome``: a prefill done or
    aborted is a :class:`PrefillResult`, a finished generate a :class:`Completion` (its text
    from ``text``), anything else the error itself."""
    aborted = isinstance(outcome, RequestAborted)
    by_source = by_source_of(req)
    if req.kind is RequestKind.PREFILL and (outcome is None or aborted):
        return PrefillResult(
            rid=req.rid,
            prompt_tokens=len(req.ids),
            cached_tokens=req.cached_tokens,
            computed_tokens=req.computed_tokens,
            status=PrefillStatus.ABORTED if aborted else PrefillStatus.DONE,
            cached_tokens_by_source=by_source,
        )
    if isinstance(outcome, str):
        now = time.perf_counter()
        first = req.t_first_token if req.t_first_token is not None else now
        return Completion(
            text=text(req.output),
            token_ids=tuple(req.output),
            prompt_tokens=len(req.ids),
            cached_tokens=req.cached_tokens,
            ttft_s=first - req.t_submit,
            finish_reason=outcome,
            rid=req.rid,
            e2e_s=now - req.t_submit,
            cached_tokens_by_source=by_source,
        )
    assert outcome is not None
    return outcome


def by_source_of(req: Request) -> dict[str, int]:
    """``req.cached_tokens`` split by tier (:data:`~agentwarm.engines.types.CACHED_BY_SOURCE`):
    ``device`` and ``disk``, and ``host`` with a host tier; empty when the engine has no tier."""
    if req.disk_tokens is None:
        return {}
    host = req.host_tokens or 0
    split = {
        SOURCE_DEVICE: req.cached_tokens - req.disk_tokens - host,
        SOURCE_DISK: req.disk_tokens,
    }
    if req.host_tokens is not None:
        split[SOURCE_HOST] = host
    return split


def resolve(fut: Future, outcome: object) -> None:
    """Set ``fut`` to ``outcome`` (an exception is raised by it) unless it is already done."""
    if fut.done():
        return
    try:
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
    except (concurrent.futures.InvalidStateError, asyncio.InvalidStateError):
        pass
