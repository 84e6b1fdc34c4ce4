"""Next-step prediction on recorded conversations (``python -m benchmarks.predictor_eval
--conversations FILE``): what the content-aware default gains by reading the conversation.

A conversations file is JSON lines, each with ``"messages"`` in OpenAI chat format (the layout
of ``../shared/data/tau-airline/conversations.jsonl``). Every assistant message is a step (its
first tool call's name, or ``respond``); each step after the first, and the end of the
conversation (``END``), is a target, predicted from the steps before it and the conversation up
to that point (:func:`agentwarm.predictors.conversation_transitions`): what the runtime's
transcript or a gateway request holds when the previous step ends.

Protocols:

* online (prequential): conversations are replayed in file order; each target is predicted,
  scored, then observed with its context;
* ``--pretrain-on FILE``: every predictor first learns FILE through
  :func:`agentwarm.predictors.fit.fit` (what ``agentwarm fit`` does), then is scored online;
* ``--pretrain-fraction F``: the first F of the file's conversations are learned that way and
  the rest scored online (in the airline file conversations are grouped by task, so the scored
  half asks tasks the pretraining never saw).

The mean time of one ``predict`` with the context is reported per predictor (microseconds).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentwarm.bench.conversations import load_conversations
from agentwarm.predictors import (
    END,
    Predictor,
    StepContext,
    conversation_transitions,
    observe_with,
    predict_with,
)
from agentwarm.predictors.fit import conversation_examples, fit

__all__ = ("ConversationScore", "ConversationWorkload", "load_workload", "score_conversations")

Transition = tuple[tuple[str, ...], StepContext, str]


@dataclass(frozen=True, slots=True)
class ConversationWorkload:
    """Conversations to score (``transitions`` per conversation) and to pretrain on
    (``pretrain``: message lists), over the ``candidates`` (every step seen, and ``END``)."""

    name: str
    transitions: list[list[Transition]]
    pretrain: list[list[dict[str, Any]]]
    candidates: list[str]


@dataclass(frozen=True, slots=True)
class ConversationScore:
    """Online prediction quality over ``n`` targets, and the mean ``predict`` time."""

    predictor: str
    workload: str
    n: int
    top1: float
    top3: float
    log_loss: float
    predict_us: float
    pretrained: int


def _messages(path: Path) -> list[list[dict[str, Any]]]:
    """Each conversation's messages, checked and read as ``agentwarm bench --conversations``
    reads them (a clear error naming the file and line otherwise)."""
    out = []
    for conversation in load_conversations(path):
        system = [{"role": "system", "content": conversation.system}] if conversation.system else []
        out.append([*system, *(dict(m) for m in conversation.messages)])
    return out


def load_workload(
    path: str, *, pretrain_on: str | None = None, pretrain_fraction: float = 0.0
) -> ConversationWorkload:
    """The workload of the conversations in ``path`` (see the module docstring)."""
    scored = _messages(Path(path))
    pretrain = _messages(Path(pretrain_on)) if pretrain_on else []
    name = Path(path).stem
    if pretrain_fraction > 0.0:
        cut = round(len(scored) * pretrain_fraction)
        pretrain, scored = pretrain + scored[:cut], scored[cut:]
        name += f" (after {cut} pretrained)"
    elif pretrain_on:
        name += f" (pretrained on {Path(pretrain_on).name})"
    transitions = [conversation_transitions(m) for m in scored]
    steps = {t for ts in transitions for _, _, t in ts}
    steps |= {n for ts in transitions for p, _, _ in ts for n in p}
    steps |= {n for m in pretrain for p, _, t in conversation_transitions(m) for n in (*p, t)}
    return ConversationWorkload(name, transitions, pretrain, [*sorted(steps - {END}), END])


def score_conversations(
    factory: Callable[[], Predictor], workload: ConversationWorkload, name: str
) -> ConversationScore:
    """Pretrain a fresh predictor on ``workload.pretrain``, then replay the scored
    conversations online (predict with the context, score, observe)."""
    predictor = factory()
    pretrained = fit(predictor, conversation_examples(workload.pretrain, entry=None)).transitions
    examples = [(path, nxt, context) for ts in workload.transitions for path, context, nxt in ts]
    n = top1 = top3 = 0
    loss = spent = 0.0
    for path, nxt, context in examples:
        start = time.perf_counter()
        ranked = predict_with(
            predictor, path, None, candidates=workload.candidates, context=context
        )
        spent += time.perf_counter() - start
        names = [node for node, _ in ranked]
        n += 1
        top1 += names[:1] == [nxt]
        top3 += nxt in names[:3]
        loss -= math.log(max(dict(ranked).get(nxt, 0.0), 1e-12))
        observe_with(predictor, path, nxt, context)
    d = max(n, 1)
    return ConversationScore(
        name, workload.name, n, top1 / d, top3 / d, loss / d, spent / d * 1e6, pretrained
    )


def table(scores: Sequence[ConversationScore]) -> str:
    """The scores as a text table."""
    w = max([20, *(len(s.workload) for s in scores)]) + 2
    lines = [
        f"{'conversations':<{w}}{'predictor':<32}{'n':>6}{'top-1':>8}{'top-3':>8}"
        f"{'log-loss':>10}{'predict us':>12}"
    ]
    for s in scores:
        lines.append(
            f"{s.workload:<{w}}{s.predictor:<32}{s.n:>6}{s.top1:>8.3f}{s.top3:>8.3f}"
            f"{s.log_loss:>10.3f}{s.predict_us:>12.1f}"
        )
    return "\n".join(lines)


def dump(scores: Sequence[ConversationScore]) -> str:
    """The scores as JSON text."""
    from dataclasses import asdict

    return json.dumps([asdict(s) for s in scores], indent=2)
