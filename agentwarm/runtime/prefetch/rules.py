"""The prefetcher's decisions as pure functions of its data: which prefetches are hits, whether
a candidate can share another's request, what a confirmed warm-up does, and each prefetch's
final outcome. Nothing here sends, stops or records anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentwarm._spec import END, PrefetchKind, PrefetchOutcome
from agentwarm.runtime.policy import PrefetchPolicy, choose_candidates
from agentwarm.runtime.prefetch.state import Prefetch, Request

__all__ = (
    "WarmUpPlan",
    "chosen_of",
    "computed_tokens",
    "fallen_targets",
    "hit_targets",
    "keep_largest",
    "outcome",
    "plan_warm_up",
    "predicted_branch",
    "prefetched_branch",
    "scored_branch",
    "shared_request",
    "within_budget",
)


def hit_targets(prefetches: Mapping[str, Prefetch], actual: Collection[str]) -> set[str]:
    """The targets the step chose (``actual``) whose prefetch reached the engine and did not
    fail. A prefetch that admission dropped has no request: it is no hit."""
    return {t for t, pf in prefetches.items() if t in actual and not pf.failed and pf.requests}


def predicted_branch(
    predictions: Sequence[tuple[str, float]], actual: Collection[str], policy: PrefetchPolicy
) -> bool | None:
    """What the guardrail scores: whether one of the nodes the step chose (``actual``, END
    aside) was among the candidates ``policy`` takes from ``predictions``. ``None``: nothing to
    score (only END chosen, or no prediction made, as in a run with speculation off)."""
    real = [a for a in actual if a != END]
    if not (real and predictions):
        return None
    p = policy
    top = choose_candidates(predictions, top_n=p.top_n, min_p=p.min_p, top_p=p.top_p)
    return any(a in {name for _, name, _ in top} for a in real)


def prefetched_branch(
    prefetched: Collection[str],
    first_predictions: Sequence[tuple[str, float]],
    actual: Collection[str],
    policy: PrefetchPolicy,
) -> bool | None:
    """What the guardrail scores for a step of a run: whether one of the nodes it chose
    (``actual``, END aside) was among the targets it chose to prefetch speculatively
    (``prefetched``, by any ranking or hint; admission may have refused some: the prediction is
    judged, not the engine's room; :func:`scored_branch` adds what the choice took but did not
    send). A step that chose nothing (all priced out) is scored on its first predictions
    (:func:`predicted_branch`)."""
    real = [a for a in actual if a != END]
    if real and prefetched:
        return any(a in prefetched for a in real)
    return predicted_branch(first_predictions, actual, policy)


def scored_branch(
    chosen: Mapping[str, float],
    first_predictions: Sequence[tuple[str, float]],
    actual: Collection[str],
    policy: PrefetchPolicy,
) -> tuple[bool, float] | None:
    """What a :class:`~agentwarm.runtime.guardrail.CalibratedGuardrail` scores for a step:
    :func:`prefetched_branch` of the targets the step ``chosen`` (those sent speculatively, by
    any ranking or hint, and those a choice took but did not send: held back by a tightened
    guardrail, stopped by the step's budget; so a cautious or paused guardrail is judged by what
    the policy's own limits would have chosen), and the probability that the candidates it was
    scored on promised: their mass under ``first_predictions`` (a target they do not rank at
    its own probability in ``chosen``), else (nothing chosen) the mass of the candidates the
    policy takes from them. Only steps that go somewhere besides END are scored, so the mass is
    conditioned on that: divided by ``1 - p(END)`` (at most 1). ``None``: nothing to score."""
    hit = prefetched_branch(chosen, first_predictions, actual, policy)
    if hit is None:
        return None
    first = dict(first_predictions)
    if chosen:
        mass = sum(first.get(target, p) for target, p in chosen.items())
    else:
        p = policy
        top = choose_candidates(first_predictions, top_n=p.top_n, min_p=p.min_p, top_p=p.top_p)
        mass = sum(q for _, _, q in top)
    rest = 1.0 - first.get(END, 0.0)
    return hit, min(1.0, mass / rest) if rest > 0 else 1.0


def chosen_of(prefetches: Mapping[str, Prefetch], held: Mapping[str, float]) -> dict[str, float]:
    """The targets a step chose, for :func:`scored_branch`: its speculative prefetches (their
    probability when issued) and ``held`` (chosen, not sent), each at its largest probability."""
    out = dict(held)
    keep_largest(
        out, {t: pf.record.probability for t, pf in prefetches.items() if pf.record.speculative}
    )
    return out


def keep_largest(into: dict[str, float], items: Mapping[str, float]) -> None:
    """Add ``items`` to ``into``, each name at the larger of its two probabilities."""
    for name, p in items.items():
        into[name] = max(into.get(name, 0.0), p)


def within_budget(
    targets: Iterable[str],
    prefix_ids: Callable[[str], list[int]],
    budget: int,
    admissible: Callable[[str], bool] | None = None,
) -> Iterator[tuple[str, list[int] | None]]:
    """Each target's known prefix (``prefix_ids(target)``), in order, until ``budget`` tokens
    would be passed (targets with nothing known yet are skipped); ``None`` for a target
    ``admissible`` refuses, without rendering its prompt."""
    spent = 0
    for target in targets:
        if admissible is not None and not admissible(target):
            yield target, None
            continue
        ids = prefix_ids(target)
        if not ids:
            continue
        if spent + len(ids) > budget:
            return
        spent += len(ids)
        yield target, ids


def shared_request(
    prefetches: Mapping[str, Prefetch], pf: Prefetch, key: int, ids_len: int
) -> Request | None:
    """Another candidate's latest request for the very same tokens (``key`` is their hash),
    still usable, which ``pf`` can share instead of sending them twice."""
    for other in prefetches.values():
        req = other.latest
        if (
            other is not pf
            and req is not None
            and req.key == key
            and req.ids_len == ids_len
            and req.shareable
        ):
            return req
    return None


@dataclass(frozen=True)
class WarmUpPlan:
    """What a confirmed warm-up of a node does, given the speculative hit of that node.

    ``send``: send the warm-up, after ``after`` ends when set (an engine that cannot reuse an
    in-flight prefill must not compute the prefix twice). Not sent: ``covered_by``, when set,
    is the running hit the node's live request waits for instead.
    """

    send: bool
    after: asyncio.Task[Any] | None = None
    covered_by: asyncio.Task[Any] | None = None


def plan_warm_up(latest: Request | None, ids_len: int, *, supports_promotion: bool) -> WarmUpPlan:
    """The warm-up of a node whose known prefix is ``ids_len`` tokens, ``latest`` being the
    latest request of its speculative hit (``None``: no hit).

    The transcript is append-only, so a prefix of the same length is the same tokens: a hit
    that sent them (running or finished) makes the warm-up useless.
    """
    same = latest is not None and latest.shareable and latest.ids_len == ids_len
    if latest is not None and latest.running:
        if same:
            return WarmUpPlan(send=False, covered_by=None if supports_promotion else latest.task)
        return WarmUpPlan(send=True, after=None if supports_promotion else latest.task)
    if same and latest is not None and latest.result is not None:
        return WarmUpPlan(send=False)  # computed already: the prefix is cached
    return WarmUpPlan(send=True)


def computed_tokens(pf: Prefetch) -> int:
    """Tokens the engine computed for ``pf``: of its finished requests credited to it."""
    return sum(
        r.result.computed_tokens for r in pf.requests if r.result is not None and r.credit is pf
    )


def outcome(pf: Prefetch, *, hit: bool) -> PrefetchOutcome:
    """``pf``'s final outcome once all its requests have ended (``hit``: the step chose it).

    A confirmed warm-up is a hit unless it failed or was stopped. A speculative hit whose every
    request failed or was stopped never reached the cache (failed / cancelled). A loser is
    failed, dropped (admission refused it: nothing reached the engine), cancelled (stopped) or
    wasted (computed for nothing).
    """
    if pf.record.kind == PrefetchKind.CONFIRMED:
        latest = pf.latest
        stopped = latest is not None and latest.stopped
        if pf.failed:
            return PrefetchOutcome.FAILED
        return PrefetchOutcome.CANCELLED if stopped else PrefetchOutcome.HIT
    if hit:
        if not any(r.result is not None for r in pf.requests):
            return PrefetchOutcome.FAILED if pf.failed else PrefetchOutcome.CANCELLED
        return PrefetchOutcome.HIT
    if pf.failed:
        return PrefetchOutcome.FAILED
    if not pf.requests:
        return PrefetchOutcome.DROPPED
    if any(r.stopped for r in pf.requests):
        return PrefetchOutcome.CANCELLED
    return PrefetchOutcome.WASTED


def fallen_targets(
    prefetches: Mapping[str, Prefetch],
    predictions: Sequence[tuple[str, float]],
    min_p: float,
    keep: Collection[str] = (),
) -> list[str]:
    """Speculative targets whose re-ranked probability fell below ``min_p``: not extended any
    more (their running requests are stopped: that saves the rest of their prefill; finished
    ones stay cached); ``keep`` (a hinted target) never falls."""
    probability = dict(predictions)
    return [
        target
        for target, pf in prefetches.items()
        if target not in keep and pf.record.speculative and probability.get(target, 0.0) < min_p
    ]
