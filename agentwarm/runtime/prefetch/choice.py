"""Which candidates a step sends, and the prefixes they send (:class:`Choice`, one per run).

Candidates are chosen under ``policy.spend`` (:func:`~agentwarm.runtime.prefetch.spend.choose`):
by expected value (default) or the fixed top-N. The value choice needs what a candidate's
prefill would compute (its known prefix less what was sent for it before,
:class:`~agentwarm.runtime.prefetch.spend.SentPrefixes`) and the idle window after the step's
speculation (:class:`~agentwarm.runtime.prefetch.spend.SpendEstimator`, less the speculative
tokens admission holds in flight). Then, in that order, each is checked by admission (a refused
one is not sent) and the step's token budget. Every ranked target not sent gets its verdict on
the step's scope, taken here (:mod:`~agentwarm.runtime.prefetch.misses`). The estimator and the
sent prefixes are the session's, shared by its runs and fed only through their methods: the
throughput by the run's :class:`~agentwarm.runtime.prefetch.sender.Sender`, the idle time by the
run's
:class:`~agentwarm.runtime.prefetch.spend.IdleClock` held here, the prefixes by :meth:`sent`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from agentwarm._spec import END, Miss, MissReason
from agentwarm.runtime.prefetch.misses import held_back, judged_choice
from agentwarm.runtime.prefetch.rules import keep_largest, within_budget
from agentwarm.runtime.prefetch.spend import IdleClock, SentPrefixes, SpendEstimator

if TYPE_CHECKING:
    from agentwarm.graphs import CompiledGraph
    from agentwarm.runtime.admission import RunAdmission
    from agentwarm.runtime.guardrail import Limits
    from agentwarm.runtime.policy import PrefetchPolicy
    from agentwarm.runtime.prefetch.state import StepScope
    from agentwarm.runtime.prompt import PromptRenderer
    from agentwarm.runtime.timing import StepTiming

__all__ = ("Choice",)

PrefixIds = Callable[[str], list[int]]


class Choice:
    """One run's choice of speculative candidates and their prefixes (module doc), within
    ``max_prefetch_tokens`` per step and the run's share of the engine's cache (``budget``)."""

    def __init__(
        self,
        *,
        workflow: CompiledGraph,
        renderer: PromptRenderer,
        timing: StepTiming,
        policy: PrefetchPolicy,
        admission: RunAdmission,
        spend: SpendEstimator,
        sent: SentPrefixes,
        namespace: str,
        run_id: str | None = None,
        overtaken: bool = False,
    ) -> None:
        self.workflow = workflow
        #: The engine's live requests overtake speculation (``fill_idle`` on an engine that
        #: preempts it): a candidate that starts inside the window is priced idle in full.
        self.overtaken = overtaken
        self.renderer = renderer
        self.timing = timing
        self.policy = policy
        self.admission = admission
        self.spend = spend
        self.namespace = namespace
        self.run_id = run_id
        self.budget = policy.max_prefetch_tokens
        if admission.limits.max_tokens is not None:  # the run's share of the engine's cache
            self.budget = min(self.budget, admission.limits.max_tokens)
        self._sent = sent
        self._idle = IdleClock(spend)
        self._elapsed_s = 0.0

    def speculated(self, node: str, step: object = None) -> None:
        """``node``'s step speculates now (its idle time runs from the step's first
        speculation until the next live call: a re-ranking's window is what is left of it)."""
        self._elapsed_s = self._idle.speculated(node, step)

    def live(self) -> None:
        """A live LLM call of the run starts now."""
        self._idle.live()

    def waiting(self, scope: StepScope) -> bool:
        """Whether ``scope``'s step has speculated and the run made no live call since."""
        return self._idle.pending(scope)

    def new_tokens(self, target: str, ids: list[int]) -> int:
        """What sending ``ids`` as ``target``'s prefix would compute: the tokens past what was
        sent for it before (call before :meth:`sent`)."""
        return self._sent.new_tokens((self.namespace, target), ids, run=self.run_id)

    def sent(self, target: str, ids: list[int]) -> None:
        """``ids`` were sent (or shared) as ``target``'s prefix: cached from now on."""
        self._sent.sent((self.namespace, target), ids, run=self.run_id)

    def prefix_ids(self, target: str) -> list[int]:
        """``target``'s known prefix, rendered now."""
        return self.renderer.prefix_ids(self.workflow.nodes[target])

    def within_budget(
        self,
        targets: Iterable[str],
        admissible: Callable[[str], bool] | None = None,
        *,
        spent: int = 0,
        prefix_ids: PrefixIds | None = None,
    ) -> Iterator[tuple[str, list[int] | None]]:
        """Each target's prefix until the step's budget (less ``spent``) would be passed
        (:func:`~agentwarm.runtime.prefetch.rules.within_budget`)."""
        render = self.prefix_ids if prefix_ids is None else prefix_ids
        return within_budget(targets, render, self.budget - spent, admissible)

    def candidates(
        self, scope: StepScope, limits: Limits, hinted: str | None = None, *, fill: bool = False
    ) -> tuple[dict[str, tuple[int, float]], PrefixIds]:
        """The candidates of ``scope``'s step not prefetched yet, ``name -> (rank, p)`` in
        order (``hinted`` added, rank -1, if not chosen), and the prefixes rendered to choose
        them (rendered on demand, once).

        ``fill``: the engine is idle now (the step's speculation has all finished and no live
        call came): the window is open, every token priced idle, and only the first candidate
        worth it at that price is taken (the next one waits for this one's end); the others
        keep the verdict of the choice that held them back."""
        # A node seen not to call the LLM reads no prompt: it takes no candidate's place.
        reads = self.timing.reads_prompt
        predictions = [(n, p) for n, p in scope.predictions if n == END or reads(n)]
        rendered: dict[str, list[int]] = {}

        def prefix_ids(target: str) -> list[int]:
            if target not in rendered:
                rendered[target] = self.prefix_ids(target)
            return rendered[target]

        def new_tokens(target: str) -> int:
            return self.new_tokens(target, prefix_ids(target))

        if fill:
            free = math.inf
        else:  # less what the speculation in flight will compute first (FCFS)
            queued = self.admission.work_in_flight
            free = self.spend.free_tokens(
                scope.spec.name, queued_tokens=queued, elapsed_s=self._elapsed_s
            )
        chosen, judged = judged_choice(
            predictions,
            policy=self.policy,
            limits=limits,
            new_tokens=new_tokens,
            free_tokens=free,
            reads_prompt=reads,
            ranked=scope.predictions,
            overtaken=self.overtaken,
        )
        if fill:
            fresh = [c for c in chosen if c[1] not in scope.prefetches]
            for rank, name, p in fresh[1:]:  # held for the next fill, or priced out at last
                judged[name] = scope.verdicts.get(name) or Miss(
                    MissReason.PRICED_OUT, p=p, price=self.policy.busy_price, rank=rank
                )
            chosen = fresh[:1]
        scope.verdicts.update(judged)
        keep_largest(scope.held, held_back(judged))
        if hinted is not None and hinted not in {name for _, name, _ in chosen}:
            chosen.append((-1, hinted, dict(scope.predictions).get(hinted, 0.0)))
        # Already prefetched (a mid-decode hint, an earlier ranking): not started twice.
        return {n: (rank, p) for rank, n, p in chosen if n not in scope.prefetches}, prefix_ids

    def to_send(
        self, scope: StepScope, limits: Limits, hinted: str | None = None, *, fill: bool = False
    ) -> Iterator[tuple[str, int, float, list[int] | None]]:
        """The :meth:`candidates` to start now, ``(name, rank, p, ids)`` in order, until the
        step's budget (less what its prefetches hold) would be passed; ``ids`` ``None``: refused
        by admission (not rendered, unless the choice by value did)."""
        ranked, prefix_ids = self.candidates(scope, limits, hinted, fill=fill)

        def admissible(name: str) -> bool:
            return self.admission.may_admit(ranked[name][1])

        spent = sum(pf.record.tokens for pf in scope.prefetches.values())
        left = dict(ranked)
        for name, ids in self.within_budget(ranked, admissible, spent=spent, prefix_ids=prefix_ids):
            rank, p = left.pop(name)
            scope.verdicts.pop(name, None)
            yield name, rank, p, ids
        for name, (rank, p) in left.items():  # the step's budget stopped them, or no prompt
            cause = "step_budget" if prefix_ids(name) else None
            reason = MissReason.DROPPED if cause else MissReason.NOT_PREDICTED
            if cause and rank >= 0:  # chosen by a ranking: scored as chosen (not a hint's)
                keep_largest(scope.held, {name: p})
            scope.verdicts[name] = Miss(reason, cause=cause or "no_prompt", p=p, rank=rank)

    def judge(self, scope: StepScope, limits: Limits) -> None:
        """The guardrail paused speculation: judge the step's candidates all the same (what the
        normal limits would have sent is held back by the guardrail), send nothing."""
        self.candidates(scope, limits)
