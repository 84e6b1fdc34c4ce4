"""Why a step missed (issue 27): the :class:`~agentwarm._spec.Miss` of every step with a
previous step that was not a branch hit, and of every hit that did not find its whole
prefetched prefix cached. Pure functions of the prefetcher's data, and the probe a hit carries
to its step's live request; the reasons are taken where the decisions were made:

* the choice (:meth:`~agentwarm.runtime.prefetch.choice.Choice.candidates`) judges every ranked
  target it does not send (:func:`verdicts`): below the candidates considered, priced out by
  the spend rule (its ``p`` and price), or held back by the guardrail (the normal limits would
  have sent it); ``to_send`` those the step's budget stops (``dropped``, ``step_budget``);
* admission names what refused a prefetch (``PrefetchRecord.refused``), the engine fails one;
* :func:`miss_of` reads those at the step's end for each actual next node that was no hit;
* a hit's :class:`~agentwarm.runtime.prefetch.state.HitProbe` looks at its request when the
  live request comes (still running, or stopped: ``late``) and compares its ids with the live
  ids (``prefix_mismatch``: the token and the message where they diverged).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence

from agentwarm._spec import END, Miss, MissReason
from agentwarm.runtime.guardrail import Limits
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.prefetch.spend import choose
from agentwarm.runtime.prefetch.state import HitProbe, StepScope, Where

__all__ = (
    "HitProbe",
    "Where",
    "held_back",
    "judged_choice",
    "marks_of",
    "miss_of",
    "verdicts",
)


def verdicts(
    predictions: Sequence[tuple[str, float]],
    chosen: Collection[str],
    *,
    priced: Mapping[str, float],
    normal: Collection[str] | None,
    level: str,
    reads_prompt: Callable[[str], bool],
) -> dict[str, Miss]:
    """Why each target of ``predictions`` (END aside) that the choice did not take
    (``chosen``) was refused: ``no_prompt`` (seen not to read one), ``priced_out`` (``priced``:
    its price per wasted token), ``guardrail`` (``normal``: what the normal limits would have
    taken, ``None`` at the normal level; ``level`` the guardrail's), else ``not_predicted``
    (below the candidates considered)."""
    out: dict[str, Miss] = {}
    for rank, (name, p) in enumerate(predictions):
        if name == END or name in chosen:
            continue
        if not reads_prompt(name):
            out[name] = Miss(MissReason.NOT_PREDICTED, cause="no_prompt", p=p, rank=rank)
        elif name in priced:
            out[name] = Miss(MissReason.PRICED_OUT, p=p, price=priced[name], rank=rank)
        elif normal is not None and name in normal:
            out[name] = Miss(MissReason.GUARDRAIL, cause=level, p=p, rank=rank)
        else:
            out[name] = Miss(MissReason.NOT_PREDICTED, cause="below", p=p, rank=rank)
    return out


def judged_choice(
    predictions: Sequence[tuple[str, float]],
    *,
    policy: PrefetchPolicy,
    limits: Limits,
    new_tokens: Callable[[str], int] = lambda _: 0,
    free_tokens: float = math.inf,
    reads_prompt: Callable[[str], bool] = lambda _: True,
    ranked: Sequence[tuple[str, float]] | None = None,
    overtaken: bool = False,
) -> tuple[list[tuple[int, str, float]], dict[str, Miss]]:
    """:func:`~agentwarm.runtime.prefetch.spend.choose` (its arguments), and the
    :func:`verdicts` of the targets of ``ranked`` (default: ``predictions``) it did not take.
    Under limits the guardrail tightened (cautious, paused), the choice is made again with the
    policy's own limits: what that one takes and the tightened one does not, the guardrail
    held back; what its price refuses is priced out all the same."""
    priced: dict[str, float] = {}
    chosen = choose(
        predictions,
        policy=policy,
        limits=limits,
        new_tokens=new_tokens,
        free_tokens=free_tokens,
        priced=priced,
        overtaken=overtaken,
    )
    normal: set[str] | None = None
    p = policy
    full = Limits(top_n=p.top_n, min_p=p.min_p, paused=False, top_p=p.top_p)
    if limits != full:
        unpriced: dict[str, float] = {}  # what the price refuses under the normal limits
        unheld = choose(
            predictions,
            policy=p,
            limits=full,
            new_tokens=new_tokens,
            free_tokens=free_tokens,
            priced=unpriced,
            overtaken=overtaken,
        )
        normal = {name for _, name, _ in unheld}
        priced = {**unpriced, **priced}
    judged = verdicts(
        predictions if ranked is None else ranked,
        {name for _, name, _ in chosen},
        priced=priced,
        normal=normal,
        level="paused" if limits.paused else "cautious",
        reads_prompt=reads_prompt,
    )
    return chosen, judged


def held_back(judged: Mapping[str, Miss]) -> dict[str, float]:
    """The targets of ``judged`` a tightened guardrail held back, with their probability: the
    guardrail is scored as if they were chosen (the policy's own limits would have been)."""
    return {n: m.p or 0.0 for n, m in judged.items() if m.reason is MissReason.GUARDRAIL}


def miss_of(scope: StepScope, target: str, *, enabled: bool) -> Miss:
    """Why ``target``, an actual next node of ``scope``'s step, was no branch hit."""
    if not enabled:
        return Miss(MissReason.OFF)
    pf = scope.prefetches.get(target)
    if pf is not None:  # chosen, but no hit: failed, or refused (no request reached the engine)
        p, rank = pf.record.probability, pf.record.rank if pf.record.rank >= 0 else None
        if pf.failed:
            return Miss(MissReason.FAILED, p=p, rank=rank)
        return Miss(MissReason.DROPPED, cause=pf.record.refused or "rate", p=p, rank=rank)
    verdict = scope.verdicts.get(target)
    if verdict is not None:
        return verdict
    if scope.deferred:  # its speculation waited for an LLM call that never came
        return Miss(MissReason.OVERTAKEN)
    ranked = [name for name, _ in scope.predictions]
    if target not in ranked:
        return Miss(MissReason.NOT_PREDICTED, cause="unranked")
    rank = ranked.index(target)
    p = scope.predictions[rank][1]
    return Miss(MissReason.NOT_PREDICTED, cause="below", p=p, rank=rank)


def marks_of(
    scope: StepScope, actual: Sequence[str], hits: Collection[str], *, enabled: bool
) -> dict[str, HitProbe | Miss]:
    """What ``scope``'s resolved step leaves for each node it chose (END aside): a hit's
    :class:`HitProbe` (its prefetch's ids move to it), else the :func:`miss_of`."""
    out: dict[str, HitProbe | Miss] = {}
    for target in actual:
        if target == END:
            continue
        pf = scope.prefetches.get(target)
        if target in hits and pf is not None and pf.latest is not None:
            out[target] = HitProbe(pf.latest, pf.ids or [])
            pf.ids = None
        else:
            out[target] = miss_of(scope, target, enabled=enabled)
    return out
