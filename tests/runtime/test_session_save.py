"""A session's save after each run (review of issue 15): the predictor is snapshotted on the
event loop (runs change it there), merged and written in a thread; a failing save is a
warning and never replaces the run's result."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentwarm import END, Context, FakeEngine, WorkflowGraph, node
from agentwarm.predictors import PredictorStateWarning, PredictorStore
from agentwarm.runtime.session import WorkflowSession

NODES = sorted([END, "a"])


class _Counting:
    """Counts observations; records the thread of every ``to_dict`` of this instance; with
    ``broken``, ``to_dict`` fails as iterating a container another task mutates does."""

    def __init__(self, observed: int = 0, broken: bool = False) -> None:
        self.observed = observed
        self.broken = broken
        self.threads: list[int] = []

    def predict(
        self, path: Sequence[str], state: Mapping[str, Any] | None = None, *, candidates=None
    ) -> list[tuple[str, float]]:
        return [(END, 1.0)]

    def observe(self, path: Sequence[str], next_node: str) -> None:
        self.observed += 1

    def to_dict(self) -> dict[str, Any]:
        self.threads.append(threading.get_ident())
        if self.broken:
            raise RuntimeError("deque mutated during iteration")
        return {"kind": "counting", "observed": self.observed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _Counting:
        return cls(int(data.get("observed", 0)))

    def merged(self, latest: _Counting, base: _Counting | None) -> _Counting:
        return _Counting(latest.observed + self.observed - (base.observed if base else 0))


def _session(state_dir: Path, predictor: _Counting) -> WorkflowSession:
    @node(name="a", entry=True, system="You are a.", next=[END])
    async def a(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=2)
        return END

    wf = WorkflowGraph("saving").add(a).compile()
    session = wf.session(state_dir=state_dir)
    session.predictor = predictor
    store = session.store
    assert store is not None
    # As if the store had loaded this predictor (the base of its merge).
    store._base["saving"] = (predictor, predictor.to_dict())
    return session


async def test_a_failing_snapshot_is_a_warning_and_the_run_result_stands(tmp_path: Path):
    predictor = _Counting()
    session = _session(tmp_path, predictor)
    predictor.broken = True
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    with pytest.warns(PredictorStateWarning, match="deque mutated during iteration"):
        result = await session.run("hi", engine=engine)
    assert result.path == ["a"]


async def test_the_snapshot_is_taken_on_the_loop_and_saves_still_merge(tmp_path: Path):
    live = _Counting()
    session = _session(tmp_path, live)
    loop_thread = threading.get_ident()
    live.threads.clear()
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    await session.run("hi", engine=engine)
    assert live.threads == [loop_thread]  # the live predictor is read on the loop only
    # Another process saved 5 observations meanwhile: the next save adds this one's delta.
    other = PredictorStore(tmp_path)
    theirs = other.load("saving", NODES, factory=_Counting)
    theirs.observed += 5
    other.save("saving", theirs, NODES)
    await session.run("hi", engine=engine)
    assert live.observed == 2
    saved = PredictorStore(tmp_path).load("saving", NODES, factory=_Counting)
    assert saved.observed == 2 + 5
