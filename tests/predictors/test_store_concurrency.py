"""Issue 10, item 14: processes sharing a state directory lose no learning.

Two ``agentwarm run`` processes on one state directory kept only the learning of the last one
to save (141 of 282 steps). Saves now hold a file lock, re-read the file and add what the
process learned since it loaded or last saved, so the saved counts are the sum of both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

from agentwarm import load_workflow
from agentwarm.errors import PredictorStateError
from agentwarm.predictors import (
    END,
    ContentPredictor,
    FirstOrderPredictor,
    MarkovPredictor,
    PredictorStateWarning,
    PredictorStore,
    default_predictor,
)
from agentwarm.predictors import store as store_module

NODES = ["triage", "billing", "refund", END]
BILLING = (["triage", "billing", END],)
REFUND = (["triage", "refund", "triage", "billing", END],)


def learn(model: Any, paths: tuple[list[str], ...], times: int) -> None:
    for _ in range(times):
        for path in paths:
            for i in range(1, len(path)):
                model.observe(path[:i], path[i])


def by_context(state: dict[str, Any], field: str = "contexts") -> dict[tuple[str, ...], Any]:
    return {tuple(ctx): table for ctx, table in state[field]}


def saved_state(store_dir: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((store_dir / "support.json").read_text())["predictor"]
    return state


# --- the merge, in one process ------------------------------------------------------------


def test_two_loaders_then_two_saves_keep_the_sum_of_plain_counts(tmp_path: Path) -> None:
    """Load A, load B, both learn, save A, save B: the file holds the sum, exactly."""
    PredictorStore(tmp_path).save("support", MarkovPredictor(half_life=None), nodes=NODES)
    store_a, store_b = PredictorStore(tmp_path), PredictorStore(tmp_path)
    a = store_a.load("support", NODES, factory=lambda: MarkovPredictor(half_life=None))
    b = store_b.load("support", NODES, factory=lambda: MarkovPredictor(half_life=None))
    learn(a, BILLING, 7)
    learn(b, REFUND, 5)
    store_a.save("support", a, NODES)
    store_b.save("support", b, NODES)

    both = MarkovPredictor(half_life=None)
    learn(both, BILLING, 7)
    learn(both, REFUND, 5)
    saved = saved_state(tmp_path)
    assert saved["observations"] == 7 * 2 + 5 * 4 == both.observations
    assert by_context(saved) == by_context(both.to_dict())
    assert by_context(saved)[()] == {"triage": 5.0, "billing": 12.0, END: 12.0, "refund": 5.0}
    assert by_context(saved)[("triage",)] == {"billing": 12.0, "refund": 5.0}
    assert sorted(saved["known"]) == sorted(both.to_dict()["known"])


def test_repeated_interleaved_saves_add_only_what_is_new(tmp_path: Path) -> None:
    """Each process saves after every run (as a session does): every save adds the delta
    since that process's previous save, never its whole state again."""
    store_a, store_b = PredictorStore(tmp_path), PredictorStore(tmp_path)
    factory = FirstOrderPredictor
    a = store_a.load("support", NODES, factory=factory)
    b = store_b.load("support", NODES, factory=factory)
    for _ in range(4):
        learn(a, BILLING, 1)
        store_a.save("support", a, NODES)
        learn(b, REFUND, 1)
        store_b.save("support", b, NODES)
        learn(b, REFUND, 1)
        store_b.save("support", b, NODES)
    saved = saved_state(tmp_path)
    assert saved["counts"] == {
        "triage": {"billing": 12.0, "refund": 8.0},
        "billing": {END: 12.0},
        "refund": {"triage": 8.0},
    }
    # A fresh loader sees all of it.
    loaded = PredictorStore(tmp_path).load("support", NODES, factory=factory)
    assert loaded.to_dict()["counts"] == saved["counts"]


def test_default_predictor_merge_keeps_every_observation(tmp_path: Path) -> None:
    """The default's path experts (decayed counts and the mixture), merged through the store:
    the observation count is exact, every successor either process saw is known, weights are
    the last writer's, and counts are the sum to first order in the decay. (What the content
    model learned merges too: tests/predictors/test_content.py.)"""
    seed = default_predictor()
    learn(seed, BILLING, 3)
    PredictorStore(tmp_path).save("support", seed, nodes=NODES)
    store_a, store_b = PredictorStore(tmp_path), PredictorStore(tmp_path)
    a = store_a.load("support", NODES)
    b = store_b.load("support", NODES)
    assert isinstance(a, ContentPredictor) and isinstance(b, ContentPredictor)
    learn(a, BILLING, 4)
    learn(b, REFUND, 2)
    store_a.save("support", a, NODES)
    store_b.save("support", b, NODES)

    saved = saved_state(tmp_path)["path"]
    assert saved["observations"] == 3 * 2 + 4 * 2 + 2 * 4
    assert set(saved["known"]) == {"triage", "billing", "refund", END}
    assert saved_state(tmp_path)["known"] == saved["known"]
    assert saved["weights"] == b.path.to_dict()["weights"]
    # ("triage",) -> billing: 3 seeded + 4 by A + 2 by B, decayed by a factor of about 1.
    billing = by_context(saved)[("triage",)]["billing"]
    assert billing == pytest.approx(3 + 4 + 2, rel=0.05)
    assert by_context(saved)[("triage",)]["refund"] == pytest.approx(2, rel=0.05)
    # Both recent and feature experts were merged too.
    assert ("triage", "refund") in by_context(saved, "recent_contexts")
    assert any(key[0] == "refund" for key in by_context(saved["feature_contexts"], "run"))


def test_a_lone_writer_saves_exactly_its_state(tmp_path: Path) -> None:
    store = PredictorStore(tmp_path)
    model = store.load("support", NODES)
    for times in (3, 2, 5):
        learn(model, REFUND, times)
        store.save("support", model, NODES)
        assert saved_state(tmp_path) == json.loads(json.dumps(model.to_dict()))


def test_a_predictor_the_store_did_not_load_replaces_the_file(tmp_path: Path) -> None:
    store = PredictorStore(tmp_path)
    first = FirstOrderPredictor()
    learn(first, BILLING, 2)
    store.save("support", first, NODES)
    second = FirstOrderPredictor()
    learn(second, REFUND, 1)
    store.save("support", second, NODES)
    assert saved_state(tmp_path) == second.to_dict()


def test_unusable_file_found_on_save_is_set_aside(tmp_path: Path) -> None:
    store = PredictorStore(tmp_path)
    model = store.load("support", NODES)
    learn(model, BILLING, 1)
    (tmp_path / "support.json").write_text('{"format": "agentwarm.predictor", "version"')
    with pytest.warns(PredictorStateWarning, match="support.corrupt-"):
        store.save("support", model, NODES)
    assert saved_state(tmp_path) == json.loads(json.dumps(model.to_dict()))
    assert len(list(tmp_path.glob("support.corrupt-*.json"))) == 1


# --- two real processes ---------------------------------------------------------------------

#: A workflow whose first step waits, once per process, until both processes have started
#: their first run: by then each has loaded the (empty) state, so both save on top of a base
#: the other has changed: the case that lost half the learning.
FLOW = """
import asyncio
import os
import time
from pathlib import Path

from agentwarm import END, node

BARRIER = Path(os.environ["BARRIER_DIR"])
PARTIES = 2
_waited = False


@node(entry=True, next=["work"])
async def plan(ctx):
    global _waited
    if not _waited:
        _waited = True
        (BARRIER / f"ready-{os.getpid()}").touch()
        deadline = time.monotonic() + 60
        while len(list(BARRIER.glob("ready-*"))) < PARTIES:
            if time.monotonic() > deadline:
                raise RuntimeError("the other process never reached the barrier")
            await asyncio.sleep(0.005)
    return "work"


@node(next=["work", "answer"])
async def work(ctx):
    await ctx.llm(ctx.input or "work", max_tokens=2)
    ctx.state["rounds"] = ctx.state.get("rounds", 0) + 1
    return "work" if ctx.state["rounds"] < 3 else "answer"


@node(next=[END])
async def answer(ctx):
    return END
"""

RUNS = 12


@pytest.mark.slow
def test_two_cli_processes_on_one_state_dir_keep_the_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text(textwrap.dedent(FLOW))
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    state_dir = tmp_path / "state"
    monkeypatch.setenv("BARRIER_DIR", str(barrier))  # this process imports the flow too
    env = {**os.environ, "AGENTWARM_NO_PROGRESS": "1"}
    cmd = [sys.executable, "-m", "agentwarm.cli", "run", str(flow), "--engine", "fake"]
    cmd += ["--runs", str(RUNS), "--json", "--state-dir", str(state_dir)]

    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=180) for proc in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "Warning" not in err, err
    assert len(list(barrier.iterdir())) == 2  # both met at the barrier
    summaries = [json.loads(out) for out, _ in outputs]
    steps = [s["steps"] for s in summaries]
    assert steps == [RUNS * 5, RUNS * 5]  # plan, work x3, answer

    name = load_workflow(flow).name
    store = PredictorStore(state_dir)
    saved = json.loads(store.path_for(name).read_text())["predictor"]
    # One observation per step (its transition to the next node, or to END): the sum of both.
    assert saved["path"]["observations"] == sum(steps) == 2 * RUNS * 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = store.load(name, nodes=load_workflow(flow).graph.nodes)
    assert isinstance(loaded, ContentPredictor) and loaded.path.observations == 2 * RUNS * 5
    assert loaded.observations == saved["observations"]
    assert not list(state_dir.glob("*.corrupt-*"))


def test_save_waits_for_the_lock_and_says_who_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process holds the lock, a save waits; past the timeout it fails with the
    lock file's path and leaves the state file alone."""
    store = PredictorStore(tmp_path)
    model = store.load("support", NODES, factory=FirstOrderPredictor)
    learn(model, BILLING, 1)
    store.save("support", model, NODES)
    before = (tmp_path / "support.json").read_bytes()
    lock = store.lock_path_for("support")
    assert lock == tmp_path / ".support.lock"
    holder = (
        "import sys, filelock\n"
        f"with filelock.FileLock({str(lock)!r}):\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.readline()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        monkeypatch.setattr(store_module, "LOCK_TIMEOUT_S", 0.2)
        learn(model, REFUND, 1)
        with pytest.raises(PredictorStateError, match=r"\.support\.lock"):
            store.save("support", model, NODES)
        assert (tmp_path / "support.json").read_bytes() == before
        proc.stdin.write("\n")  # let the holder release the lock and exit
    store.save("support", model, NODES)  # lock released: the save goes through
    assert saved_state(tmp_path)["counts"]["triage"] == {"billing": 2.0, "refund": 1.0}
