"""Filling idle time (``PrefetchPolicy.fill_idle``; :mod:`.spend` tells why): when a step's
speculation may send what the expected window held back, one candidate at a time.

Only while spending by value, on an engine whose live requests preempt speculation
(``Engine.preempts_speculation``), and only when the engine is idle from the step's point of
view: the step is open, has speculated (not deferred) and made no live call since, none of its
speculative requests is still running, and it holds fewer than ``top_n`` candidates. The
prefetcher asks :func:`idle_now` at the end of each of the step's speculative prefills and then
sends :meth:`~agentwarm.runtime.prefetch.choice.Choice.to_send` ``(fill=True)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentwarm.engines.base import Engine
    from agentwarm.runtime.guardrail import Limits
    from agentwarm.runtime.policy import PrefetchPolicy
    from agentwarm.runtime.prefetch.choice import Choice
    from agentwarm.runtime.prefetch.state import StepScope

__all__ = ("fills", "idle_now")


def fills(policy: PrefetchPolicy, engine: Engine) -> bool:
    """Whether a run under ``policy`` on ``engine`` fills idle time at all."""
    return (
        policy.enabled
        and policy.spend == "value"
        and policy.fill_idle
        and engine.preempts_speculation
    )


def idle_now(scope: StepScope, choice: Choice, limits: Limits) -> bool:
    """Whether ``scope``'s step may send one more candidate now (module doc); the caller has
    checked that ``scope`` is still open."""
    if scope.deferred or limits.paused or not choice.waiting(scope):
        return False
    speculative = [pf for pf in scope.prefetches.values() if pf.record.speculative]
    if len(speculative) >= limits.top_n:
        return False
    return not any(req.running for pf in speculative for req in pf.requests)
