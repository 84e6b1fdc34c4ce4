"""Online next-step prediction quality: the default predictor against a first-order baseline.

Usage::

    python -m benchmarks.predictor_eval [--data FILE] [--seed N] [--runs N] [--json OUT]

Protocol (online, as the runtime learns): trajectories are replayed in order; for each step
after the first, and for the end of the run (target ``END``), the predictor is asked for the
next node given the path so far, scored, and only then told the truth. Candidates are the whole
vocabulary plus ``END`` (an agent node that may call any tool). Scores: top-1 and top-3
accuracy and mean log-loss (nats) of the true next node.

Workloads: the packaged tau2-bench retail step sequences (or ``--data``), and synthetic
sources with known structure, where the true distribution gives an oracle row:

* ``synthetic-2nd-order``: the next node depends on the last two nodes (first order cannot see
  it);
* ``synthetic-drift``: a second-order source whose table changes halfway through;
* ``synthetic-1st-order``: a first-order source, the baseline's home ground (the cost of the
  extra orders).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from agentwarm.data import load_trajectories
from agentwarm.predictors import (
    END,
    START,
    FirstOrderPredictor,
    MarkovPredictor,
    Predictor,
    default_predictor,
)

__all__ = (
    "PREDICTORS",
    "Score",
    "Workload",
    "evaluate",
    "main",
    "markov_source",
    "oracle_score",
    "synthetic_workloads",
    "tau2_workload",
)

Distribution = dict[str, float]


@dataclass(frozen=True, slots=True)
class Score:
    """Online prediction quality over ``n`` targets."""

    predictor: str
    workload: str
    n: int
    top1: float
    top3: float
    log_loss: float


@dataclass(slots=True)
class Workload:
    """Trajectories to replay; ``truth[i][j]`` is the true distribution of target ``j`` of
    trajectory ``i`` (targets are ``steps[1:] + [END]``) when the source is known."""

    name: str
    trajectories: list[list[str]]
    candidates: list[str]
    truth: list[list[Distribution]] | None = field(default=None)


#: The predictors compared, by report name.
PREDICTORS: dict[str, Callable[[], Predictor]] = {
    "markov (default)": default_predictor,
    "markov order 1": lambda: MarkovPredictor(max_order=1),
    "first-order baseline": FirstOrderPredictor,
}


def _targets(steps: Sequence[str]) -> list[tuple[list[str], str]]:
    if not steps:
        return []
    seq = [*steps, END]
    return [(seq[:i], seq[i]) for i in range(1, len(seq))]


def evaluate(predictor: Predictor, workload: Workload, name: str = "") -> Score:
    """Replay ``workload`` online through ``predictor`` (predict, score, then observe)."""
    n = top1 = top3 = 0
    loss = 0.0
    for steps in workload.trajectories:
        for path, target in _targets(steps):
            ranked = predictor.predict(path, {}, candidates=workload.candidates)
            names = [node for node, _ in ranked]
            p = dict(ranked).get(target, 0.0)
            n += 1
            top1 += names[:1] == [target]
            top3 += target in names[:3]
            loss -= math.log(max(p, 1e-12))
            predictor.observe(path, target)
    return _score(name, workload.name, n, top1, top3, loss)


def oracle_score(workload: Workload) -> Score | None:
    """The score of predicting with the true distributions (``None`` for real traces)."""
    if workload.truth is None:
        return None
    n = top1 = top3 = 0
    loss = 0.0
    for steps, truths in zip(workload.trajectories, workload.truth, strict=True):
        for (_, target), dist in zip(_targets(steps), truths, strict=True):
            order = sorted(workload.candidates, key=lambda x: -dist.get(x, 0.0))
            n += 1
            top1 += order[0] == target
            top3 += target in order[:3]
            loss -= math.log(max(dist.get(target, 0.0), 1e-12))
    return _score("oracle (true source)", workload.name, n, top1, top3, loss)


def _score(name: str, workload: str, n: int, top1: int, top3: int, loss: float) -> Score:
    d = max(n, 1)
    return Score(name, workload, n, top1 / d, top3 / d, loss / d)


def tau2_workload(path: str | None = None) -> Workload:
    """The tau2 retail step sequences (or another ``{"steps": [...]}`` JSON-lines file)."""
    trajectories = load_trajectories(path)
    vocab = sorted({s for steps in trajectories for s in steps})
    name = "tau2-retail" if path is None else f"data:{path}"
    return Workload(name, trajectories, [*vocab, END])


def _random_table(
    rng: random.Random, names: list[str], contexts: list[tuple[str, ...]], peak: float
) -> dict[tuple[str, ...], Distribution]:
    """One distribution per context: a dominant successor with probability ``peak``, the rest
    spread at random over the other nodes and ``END``."""
    table: dict[tuple[str, ...], Distribution] = {}
    for ctx in contexts:
        dominant = rng.choice(names)
        rest = {x: rng.random() for x in [*names, END] if x != dominant}
        rest[END] += 1.0
        total = sum(rest.values())
        dist = {x: (1 - peak) * w / total for x, w in rest.items()}
        dist[dominant] = peak
        table[ctx] = dist
    return table


def markov_source(
    name: str,
    *,
    order: int,
    runs: int,
    seed: int,
    num_nodes: int = 8,
    peak: float = 0.8,
    drift_at: int | None = None,
    max_len: int = 40,
) -> Workload:
    """Trajectories from a random ``order``-th order source (1 or 2) starting at node ``n0``.

    With ``drift_at``, runs from that index on use a second, independent table.
    """
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order}")
    names = [f"n{i}" for i in range(num_nodes)]
    keys: list[tuple[str, ...]] = (
        [(p, c) for p in [START, *names] for c in names] if order == 2 else [(c,) for c in names]
    )
    tables = [_random_table(random.Random(seed * 1000 + k), names, keys, peak) for k in (1, 2)]
    rng = random.Random(seed)
    trajectories: list[list[str]] = []
    truth: list[list[Distribution]] = []
    for run in range(runs):
        table = tables[1 if drift_at is not None and run >= drift_at else 0]
        steps, dists = [names[0]], []
        while True:
            key = (steps[-2] if len(steps) > 1 else START, steps[-1])[-order:]
            dist = table[key]
            if len(steps) >= max_len:
                dist = {END: 1.0}
            nxt = rng.choices(list(dist), weights=list(dist.values()))[0]
            dists.append(dist)
            if nxt == END:
                break
            steps.append(nxt)
        trajectories.append(steps)
        truth.append(dists)
    return Workload(name, trajectories, [*names, END], truth)


def synthetic_workloads(seed: int = 0, runs: int = 400) -> list[Workload]:
    """The three synthetic sources described in the module docstring."""
    return [
        markov_source("synthetic-2nd-order", order=2, runs=runs, seed=seed + 1),
        markov_source("synthetic-drift", order=2, runs=runs, seed=seed + 2, drift_at=runs // 2),
        markov_source("synthetic-1st-order", order=1, runs=runs, seed=seed + 3),
    ]


def run_all(workloads: Sequence[Workload]) -> list[Score]:
    """Score every predictor of :data:`PREDICTORS` (and the oracle, when known) on each."""
    scores: list[Score] = []
    for workload in workloads:
        for name, factory in PREDICTORS.items():
            scores.append(evaluate(factory(), workload, name))
        oracle = oracle_score(workload)
        if oracle is not None:
            scores.append(oracle)
    return scores


def _table(scores: Sequence[Score]) -> str:
    lines = [f"{'workload':<22}{'predictor':<22}{'n':>6}{'top-1':>8}{'top-3':>8}{'log-loss':>10}"]
    for s in scores:
        lines.append(
            f"{s.workload:<22}{s.predictor:<22}{s.n:>6}{s.top1:>8.3f}{s.top3:>8.3f}"
            f"{s.log_loss:>10.3f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.predictor_eval")
    parser.add_argument("--data", help="JSON-lines file of {'steps': [...]} (default: tau2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic sources")
    parser.add_argument("--runs", type=int, default=400, help="runs per synthetic source")
    parser.add_argument("--json", dest="json_out", help="also write the scores to this file")
    args = parser.parse_args(argv)
    workloads = [tau2_workload(args.data), *synthetic_workloads(args.seed, args.runs)]
    scores = run_all(workloads)
    print(_table(scores))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as out:
            json.dump([asdict(s) for s in scores], out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
