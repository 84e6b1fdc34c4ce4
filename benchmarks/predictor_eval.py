"""Online next-step prediction quality: the default predictor against the old default (the
plain Markov model) and a first-order baseline, on real and generated agent traces.

Usage::

    python -m benchmarks.predictor_eval [--data FILE ...] [--shuffle SEED] [--seed N]
                                        [--runs N] [--timing] [--json OUT]

Protocol (online, as the runtime learns): trajectories are replayed in order; for each step
after the first, and for the end of the run (target ``END``), the predictor is asked for the
next node given the path so far, scored, and only then told the truth. Candidates are the whole
vocabulary plus ``END`` (an agent node that may call any tool). Scores: top-1 and top-3
accuracy and mean log-loss (nats) of the true next node.

Workloads:

* ``tau2-retail``: the packaged tau2-bench retail step sequences (or the ``--data`` files,
  JSON lines of ``{"steps": [...]}``; ``--shuffle`` replays them in a seeded random order, to
  tell learning from the file's ordering of similar tasks).
* Generated agent traces (:func:`agent_workloads`), each from the documented generative
  process of its function, with hidden per-run variables: ``coding-agent``
  (:func:`coding_agent`), ``react-web`` (:func:`react_web`), ``supervisor-team``
  (:func:`supervisor_team`). Their oracle row predicts with the generator's own distribution,
  which knows the hidden variables: an upper bound no learner reaches.
* Synthetic Markov sources with known structure (:func:`synthetic_workloads`):
  ``synthetic-2nd-order`` (the next node depends on the last two nodes; first order cannot see
  it), ``synthetic-drift`` (a second-order source whose table changes halfway through) and
  ``synthetic-1st-order`` (the baseline's home ground: the cost of the extra orders and experts).

``--timing`` also prints the mean microseconds per ``predict`` (and per ``observe``) of each
predictor with 15 and 50 candidates, after learning a 6,000-step second-order source.

Longer than 400 lines because it is one runnable script: its trace generators, online scoring
loop and report are read together; nothing in the package imports it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agentwarm.data import load_trajectories
from agentwarm.predictors import (
    END,
    START,
    FirstOrderPredictor,
    MarkovPredictor,
    Predictor,
    default_predictor,
    path_predictor,
)
from benchmarks import conversation_eval

__all__ = (
    "PREDICTORS",
    "Score",
    "Timing",
    "Workload",
    "agent_workloads",
    "coding_agent",
    "evaluate",
    "main",
    "markov_source",
    "oracle_score",
    "react_web",
    "run_all",
    "supervisor_team",
    "synthetic_workloads",
    "tau2_workload",
    "time_predictors",
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
    oracle: str = "oracle (true source)"


#: The predictors compared, by report name.
PREDICTORS: dict[str, Callable[[], Predictor]] = {
    "default": default_predictor,
    "path experts (old default)": path_predictor,
    "markov (plain)": MarkovPredictor,
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
    return _score(workload.oracle, workload.name, n, top1, top3, loss)


def _score(name: str, workload: str, n: int, top1: int, top3: int, loss: float) -> Score:
    d = max(n, 1)
    return Score(name, workload, n, top1 / d, top3 / d, loss / d)


def tau2_workload(path: str | None = None, *, shuffle: int | None = None) -> Workload:
    """The tau2 retail step sequences (or another ``{"steps": [...]}`` JSON-lines file),
    in file order or, with ``shuffle``, in the order of that random seed."""
    trajectories = load_trajectories(path)
    if shuffle is not None:
        random.Random(shuffle).shuffle(trajectories)
    vocab = sorted({s for steps in trajectories for s in steps})
    name = "tau2-retail" if path is None else f"data:{path}"
    if shuffle is not None:
        name += f" (shuffled {shuffle})"
    return Workload(name, trajectories, [*vocab, END])


# --- generated agent traces ---------------------------------------------------------------


class _Trace:
    """One generated run: samples each next step from a distribution and records it."""

    def __init__(self, rng: random.Random, first: str) -> None:
        self.rng = rng
        self.steps = [first]
        self.truth: list[Distribution] = []

    def step(self, dist: Distribution) -> str:
        nxt = self.rng.choices(list(dist), weights=list(dist.values()))[0]
        self.truth.append(dict(dist))
        if nxt != END:
            self.steps.append(nxt)
        return nxt


def _collect(
    name: str, runs: int, seed: int, nodes: list[str], one: Callable[[random.Random], _Trace]
) -> Workload:
    rng = random.Random(seed)
    traces = [one(rng) for _ in range(runs)]
    return Workload(
        name,
        [t.steps for t in traces],
        [*nodes, END],
        [t.truth for t in traces],
        oracle="oracle (knows hidden state)",
    )


def coding_agent(runs: int = 400, seed: int = 0, name: str = "coding-agent") -> Workload:
    """A coding agent's loop (SWE-style), with a hidden difficulty per run.

    Difficulty is easy, medium or hard with probability 0.4, 0.4, 0.2. The run starts with
    ``plan``, then does 1, 2 or 3 rounds (by difficulty) of ``search`` followed by ``k``
    ``read`` steps (``k`` uniform in {1, 2} when easy, {2, 3} otherwise), then ``edit`` and
    ``run_tests``. A test run fails with probability ``f * 0.7**t`` (``f`` = 0.15, 0.45, 0.75
    by difficulty, ``t`` = failures so far; never after four). After a failure the agent reads
    then edits (0.4) or edits (0.6), and runs the tests again; after a pass it runs ``lint``
    then ``submit`` (0.5) or submits directly, and the run ends.
    """

    def one(rng: random.Random) -> _Trace:
        run = _Trace(rng, "plan")
        difficulty = rng.choices([0, 1, 2], weights=[0.4, 0.4, 0.2])[0]
        for _ in range(difficulty + 1):
            run.step({"search": 1.0})
            for _ in range(rng.choice([1, 2] if difficulty == 0 else [2, 3])):
                run.step({"read": 1.0})
        run.step({"edit": 1.0})
        run.step({"run_tests": 1.0})
        failures = 0
        while True:
            fail = (0.15, 0.45, 0.75)[difficulty] * 0.7**failures if failures < 4 else 0.0
            passed = (1.0 - fail) / 2
            outcome = run.step(
                {"read": 0.4 * fail, "edit": 0.6 * fail, "lint": passed, "submit": passed}
            )
            if outcome in ("read", "edit"):
                if outcome == "read":
                    run.step({"edit": 1.0})
                run.step({"run_tests": 1.0})
                failures += 1
                continue
            if outcome == "lint":
                run.step({"submit": 1.0})
            run.step({END: 1.0})
            return run

    nodes = ["plan", "search", "read", "edit", "run_tests", "lint", "submit"]
    return _collect(name, runs, seed, nodes, one)


def react_web(runs: int = 400, seed: int = 0, name: str = "react-web") -> Workload:
    """A ReAct web-research agent that searches and opens pages until it can answer.

    The hidden question kind is a lookup (0.4: one hop, the run starts with ``search``), a
    comparison (0.35: starts with ``decompose``, two hops, then ``calculator``) or multi-hop
    (0.25: ``decompose``, three hops). A hop is a ``search`` followed by ``open`` steps: right
    after a search the agent opens a result (0.9) or reformulates the search (0.1); after its
    n-th open of the hop it opens another with probability 0.4, 0.2, 0 for n = 1, 2, 3, else
    the hop ends. After the last hop comes ``calculator`` (comparisons), then ``answer``, END.
    """
    more = {1: 0.4, 2: 0.2, 3: 0.0}

    def one(rng: random.Random) -> _Trace:
        kind = rng.choices(["lookup", "compare", "multihop"], weights=[0.4, 0.35, 0.25])[0]
        hops = {"lookup": 1, "compare": 2, "multihop": 3}[kind]
        run = _Trace(rng, "search" if kind == "lookup" else "decompose")
        for hop in range(hops):
            if hop > 0 or kind != "lookup":
                run.step({"search": 1.0})
            while run.step({"open": 0.9, "search": 0.1}) == "search":
                pass
            after = "search" if hop < hops - 1 else "calculator" if kind == "compare" else "answer"
            opened = 1
            while run.step({"open": more[opened], after: 1.0 - more[opened]}) == "open":
                opened += 1
        if kind == "compare":
            run.step({"answer": 1.0})
        run.step({END: 1.0})
        return run

    return _collect(name, runs, seed, ["decompose", "search", "open", "calculator", "answer"], one)


def supervisor_team(runs: int = 400, seed: int = 0, name: str = "supervisor-team") -> Workload:
    """A supervisor multi-agent team: each needed worker is called once, in any order.

    The hidden set of needed workers includes ``researcher`` with probability 0.9, ``coder``
    0.5, ``writer`` 0.7 and ``reviewer`` 0.4 (``researcher`` if none drew). ``supervisor`` runs
    first and after every worker; it hands the task to a needed worker not yet called, chosen
    uniformly, and when all have reported it calls ``finish``, and the run ends.
    """
    need = {"researcher": 0.9, "coder": 0.5, "writer": 0.7, "reviewer": 0.4}

    def one(rng: random.Random) -> _Trace:
        needed = [w for w, p in need.items() if rng.random() < p] or ["researcher"]
        run = _Trace(rng, "supervisor")
        for _ in needed:
            left = [w for w in needed if w not in run.steps]
            run.step(dict.fromkeys(left, 1.0 / len(left)))
            run.step({"supervisor": 1.0})
        run.step({"finish": 1.0})
        run.step({END: 1.0})
        return run

    return _collect(name, runs, seed, ["supervisor", *need, "finish"], one)


def agent_workloads(seed: int = 0, runs: int = 400) -> list[Workload]:
    """The three generated agent workloads described in the module docstring."""
    return [
        coding_agent(runs, seed + 11),
        react_web(runs, seed + 12),
        supervisor_team(runs, seed + 13),
    ]


# --- synthetic Markov sources -------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class Timing:
    """Mean cost of one call, in microseconds, with ``candidates`` candidates."""

    predictor: str
    candidates: int
    predict_us: float
    observe_us: float


def time_predictors(
    sizes: Sequence[int] = (15, 50), *, steps: int = 6000, calls: int = 2000
) -> list[Timing]:
    """Time ``predict`` and ``observe`` of every predictor of :data:`PREDICTORS` after it
    learned (at most) ``steps`` steps of a second-order source over ``size - 1`` nodes (plus
    ``END``); ``predict`` is asked with all ``size`` names as candidates, on the last ``calls``
    learned paths."""
    timings: list[Timing] = []
    for size in sizes:
        runs = steps // 4
        source = markov_source("timing", order=2, runs=runs, seed=size, num_nodes=size - 1)
        pairs = [pair for steps_ in source.trajectories for pair in _targets(steps_)][:steps]
        paths = [path for path, _ in pairs[-calls:]]
        for name, factory in PREDICTORS.items():
            predictor = factory()
            start = time.perf_counter()
            for path, target in pairs:
                predictor.observe(path, target)
            observe = (time.perf_counter() - start) / len(pairs)
            start = time.perf_counter()
            for path in paths:
                predictor.predict(path, {}, candidates=source.candidates)
            predict = (time.perf_counter() - start) / len(paths)
            timings.append(Timing(name, size, predict * 1e6, observe * 1e6))
    return timings


def _table(scores: Sequence[Score]) -> str:
    w = max([20, *(len(s.workload) for s in scores)]) + 2
    lines = [f"{'workload':<{w}}{'predictor':<28}{'n':>6}{'top-1':>8}{'top-3':>8}{'log-loss':>10}"]
    for s in scores:
        lines.append(
            f"{s.workload:<{w}}{s.predictor:<28}{s.n:>6}{s.top1:>8.3f}{s.top3:>8.3f}"
            f"{s.log_loss:>10.3f}"
        )
    return "\n".join(lines)


def _timing_table(timings: Sequence[Timing]) -> str:
    lines = [f"{'predictor':<28}{'candidates':>11}{'predict us':>12}{'observe us':>12}"]
    for t in timings:
        lines.append(
            f"{t.predictor:<28}{t.candidates:>11}{t.predict_us:>12.1f}{t.observe_us:>12.1f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.predictor_eval")
    parser.add_argument(
        "--data",
        action="append",
        help="JSON-lines file of {'steps': [...]}, repeatable (default: the packaged tau2 file)",
    )
    parser.add_argument(
        "--shuffle", type=int, help="replay the real traces in the order of this random seed"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated sources")
    parser.add_argument("--runs", type=int, default=400, help="runs per generated source")
    parser.add_argument("--timing", action="store_true", help="also time predict and observe")
    parser.add_argument("--json", dest="json_out", help="also write the scores to this file")
    parser.add_argument(
        "--conversations",
        action="append",
        help="JSON-lines file of {'messages': [...]} (OpenAI chat), repeatable: score only "
        "these, each prediction reading the conversation so far",
    )
    parser.add_argument(
        "--pretrain-on", help="with --conversations: first fit every predictor on this file"
    )
    parser.add_argument(
        "--pretrain-fraction",
        type=float,
        default=0.0,
        help="with --conversations: fit on this leading fraction of each file, score the rest",
    )
    args = parser.parse_args(argv)
    if args.conversations:
        return _conversations_main(args)
    real = [tau2_workload(path, shuffle=args.shuffle) for path in args.data or [None]]
    workloads = [
        *real,
        *agent_workloads(args.seed, args.runs),
        *synthetic_workloads(args.seed, args.runs),
    ]
    scores = run_all(workloads)
    print(_table(scores))
    if args.timing:
        print()
        print(_timing_table(time_predictors()))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as out:
            json.dump([asdict(s) for s in scores], out, indent=2)
    return 0


def _conversations_main(args: argparse.Namespace) -> int:
    if not 0.0 <= args.pretrain_fraction < 1.0:
        raise SystemExit("--pretrain-fraction must be at least 0 and below 1")
    scores = [
        conversation_eval.score_conversations(factory, workload, name)
        for path in args.conversations
        for workload in [
            conversation_eval.load_workload(
                path, pretrain_on=args.pretrain_on, pretrain_fraction=args.pretrain_fraction
            )
        ]
        for name, factory in PREDICTORS.items()
    ]
    print(conversation_eval.table(scores))
    if args.json_out:
        Path(args.json_out).write_text(conversation_eval.dump(scores), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
