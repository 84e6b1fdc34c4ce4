"""The four benchmark modes and how one mode replays the episodes on its own engine.

* ``cold`` — no prefix reuse at all (every request in a fresh namespace), no speculation.
* ``reactive`` — the engine's radix cache, no speculation: what SGLang does on its own.
* ``next_turn`` — the closest shipped peer, NVIDIA Dynamo's speculative next-turn prefill
  (:mod:`agentwarm.bench.nextturn`): after each reply, one ``max_tokens=1`` request warms the
  same conversation's next turn; no predictor, no policy.
* ``agentwarm`` — the given :class:`PrefetchPolicy` with the default learned predictor, learning
  online from the episodes replayed before (optionally fitted on the training split first).
* ``oracle`` — the same policy and timing with :class:`OraclePredictor`, which always names the
  true next step: the best any predictor could do under that policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

from agentwarm._spec import END
from agentwarm.bench.inputs import Episode
from agentwarm.bench.metered import MeteredEngine, RequestRecord
from agentwarm.bench.nextturn import NEXT_TURN_KEY, NextTurnEngine, NextTurnLog
from agentwarm.bench.workload import SCRIPT_KEY, EpisodeScript, Workload
from agentwarm.engines.base import Engine, EngineStats
from agentwarm.predictors import Predictor, default_predictor
from agentwarm.predictors.fit import Example, conversation_examples, fit
from agentwarm.runtime import PrefetchPolicy, RunResult

__all__ = ("MODES", "ModeRun", "OraclePredictor", "pretrain", "run_mode")

MODES: tuple[str, ...] = ("cold", "reactive", "next_turn", "agentwarm", "oracle")


class OraclePredictor:
    """Names the true next step of the running episode with probability 1, and nothing else
    (so no policy threshold admits a second candidate).

    It reads the run's :class:`EpisodeScript` from ``state[SCRIPT_KEY]``; without one it is
    uniform over ``candidates``. It learns nothing.
    """

    kind = "oracle"

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        names = list(dict.fromkeys(candidates or ()))
        script = state.get(SCRIPT_KEY) if state is not None else None
        if not isinstance(script, EpisodeScript):
            return [(n, 1.0 / len(names)) for n in names]
        return [(script.next_after(len(path)), 1.0)]

    def observe(self, path: Sequence[str], next_node: str) -> None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        if data.get("kind") != cls.kind:
            raise ValueError(f"not an oracle predictor: {data.get('kind')!r}")
        return cls()


def pretrain(predictor: Predictor, workload: Workload, episodes: Sequence[Episode]) -> int:
    """Fit ``predictor`` on every transition of ``episodes`` as the runtime would learn it
    (paths start at the entry node; the last step is followed by ``END``) with
    :func:`agentwarm.predictors.fit.fit` (what ``agentwarm fit`` does); return the transitions
    fed. A real conversation's transitions carry its context at each step's end: what the
    replay's transcript holds then (the messages before the next assistant turn)."""
    examples: list[Example] = []
    for episode in episodes:
        turns = workload.turns.get(episode.id)
        if turns is not None and episode.steps:
            messages = [m for turn in turns[: len(episode.steps) + 1] for m in turn]
            examples += conversation_examples([messages], workload.entry)
        else:
            names = (workload.entry, *episode.steps, END)
            examples += [(names[: k + 1], names[k + 1], None) for k in range(len(names) - 1)]
    return fit(predictor, examples, score=False).transitions


@dataclass
class ModeRun:
    """What one mode produced: a result per episode (in order) and the engine's answers.

    ``engine_stats`` is the engine's counters over the mode (after warm-up), when the engine
    reports them. ``accounted_think_s`` holds, per episode, the think time that was accounted
    instead of slept (all zeros when every think time was slept). ``peak_rss_mib`` is the
    process's peak resident set once the mode's engine was released (set by the caller).
    ``next_turn`` is the ``next_turn`` mode's warms (``None`` for the other modes).
    """

    mode: str
    results: list[RunResult]
    requests: list[RequestRecord]
    wall_s: float
    engine_stats: dict[str, int] | None = None
    pretrained_transitions: int = 0
    accounted_think_s: list[float] = field(default_factory=list)
    peak_rss_mib: float | None = None
    next_turn: NextTurnLog | None = None


def _delta(before: EngineStats | None, after: EngineStats | None) -> dict[str, int] | None:
    if before is None or after is None:
        return None
    keys = ("hit_tokens", "prompt_tokens", "computed_tokens", "requests", "aborted")
    return {k: int(getattr(after, k)) - int(getattr(before, k)) for k in keys}


async def _stats(engine: Engine) -> EngineStats | None:
    try:
        return await engine.stats()
    except Exception:
        return None


async def run_mode(
    mode: str,
    workload: Workload,
    scripts: Sequence[EpisodeScript],
    engine: Engine,
    *,
    policy: PrefetchPolicy,
    train: Sequence[Episode] = (),
    namespace: str = "",
    fast_baselines: bool = False,
    on_episode: Callable[[str, int, int], None] | None = None,
) -> ModeRun:
    """Replay ``scripts`` in order on ``engine`` (fresh, owned by the caller) in ``mode``.

    ``policy`` is used by ``agentwarm`` and ``oracle``; with ``train``, ``agentwarm``'s
    predictor is first fitted on those episodes. Requests go to ``namespace``; the engine is
    warmed up with one short request in another namespace first. With ``fast_baselines``,
    ``cold`` and ``reactive`` (which never use the engine while a step thinks) do not sleep
    their think times; each episode's think time is added to its makespan instead.
    ``next_turn`` uses the engine while a step thinks (its warm), so it always sleeps them;
    its warms are awaited at the end of each episode. ``on_episode(mode, done, total)`` is
    called after each episode.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; modes are {', '.join(MODES)}")
    next_turn = NextTurnEngine(engine, system=workload.system) if mode == "next_turn" else None
    metered = next_turn or MeteredEngine(engine, isolate=mode == "cold")
    predictor: Predictor
    trained = 0
    if mode == "oracle":
        predictor = OraclePredictor()
    else:
        predictor = default_predictor()
        if mode == "agentwarm" and train:
            trained = pretrain(predictor, workload, train)
    speculate = mode in ("agentwarm", "oracle")
    if fast_baselines and mode in ("cold", "reactive"):
        scripts = [replace(s, sleep_think=False) for s in scripts]
    run_policy = policy if speculate else PrefetchPolicy.disabled()
    if mode == "oracle":
        # Exactly the true next step: no extra candidates from hints in the step's output.
        run_policy = run_policy.model_copy(update={"use_output_hints": False})
    workflow = workload.workflow()
    session = workflow.session(predictor=predictor)
    await metered.generate(metered.encode("warm-up"), max_tokens=2, namespace=f"{namespace}-warmup")
    metered.records.clear()
    before = await _stats(metered)
    results: list[RunResult] = []
    t0 = time.perf_counter()
    for i, script in enumerate(scripts):
        results.append(
            await session.run(
                "",
                engine=metered,
                policy=run_policy,
                state={SCRIPT_KEY: script, **({NEXT_TURN_KEY: next_turn} if next_turn else {})},
                namespace=namespace,
            )
        )
        if next_turn is not None:
            await next_turn.drain()
        if on_episode is not None:
            on_episode(mode, i + 1, len(scripts))
    wall = time.perf_counter() - t0
    after = await _stats(metered)
    return ModeRun(
        mode=mode,
        results=results,
        requests=list(metered.records),
        wall_s=wall,
        engine_stats=_delta(before, after),
        pretrained_transitions=trained,
        accounted_think_s=[0.0 if s.sleep_think else sum(s.think_s) for s in scripts],
        next_turn=next_turn.log if next_turn is not None else None,
    )
