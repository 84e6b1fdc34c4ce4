"""Running the benchmark on the fake engine: modes, accounting, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentwarm import END
from agentwarm.bench import (
    MODES,
    BenchConfig,
    Episode,
    MeteredEngine,
    OraclePredictor,
    PromptSizes,
    Workload,
    headline,
    load_episodes,
    pretrain,
    run_bench,
    split_episodes,
)
from agentwarm.bench.workload import SCRIPT_KEY
from agentwarm.engines.fake import FakeEngine
from agentwarm.predictors import default_predictor

SIZES = PromptSizes(
    policy=200,
    instructions=(40, 80),
    schema=(30, 60),
    opening=(10, 20),
    result=(20, 60),
    output_tokens=4,
)


def _trajectories(tmp_path: Path) -> Path:
    rows = [
        ["search", "read", "read", "answer"],
        ["search", "read", "answer"],
        ["search", "answer"],
        [],
        ["search", "read", "read", "read", "answer"],
        ["read", "answer"],
    ]
    f = tmp_path / "episodes.jsonl"
    f.write_text("".join(json.dumps({"steps": r}) + "\n" for r in rows), encoding="utf-8")
    return f


class Engines:
    """Factory of fresh fake engines; keeps them for inspection."""

    def __init__(self) -> None:
        self.made: list[FakeEngine] = []

    def __call__(self) -> FakeEngine:
        engine = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5, chunk_size=64)
        self.made.append(engine)
        return engine


def _config(tmp_path: Path, **kw: Any) -> BenchConfig:
    base: dict[str, Any] = dict(
        trajectories=_trajectories(tmp_path),
        test_fraction=1.0,
        think="const:0.002",
        sizes=SIZES,
        pretrain=False,
    )
    base.update(kw)
    return BenchConfig(**base)


@pytest.fixture
def engines() -> Engines:
    return Engines()


async def test_all_modes_replay_the_same_episodes(tmp_path: Path, engines: Engines) -> None:
    report = await run_bench(_config(tmp_path), engines)
    assert list(report.modes) == list(MODES)
    assert len(engines.made) == len(MODES) == 5
    for f in report.modes.values():
        assert f["episodes"] == 6
        # 6 entry steps + 16 tool steps, one LLM call each.
        assert f["steps"] == 22
    prompt = {m: f["prompt_tokens"] for m, f in report.modes.items()}
    assert len(set(prompt.values())) == 1, prompt
    assert report.workload["test_episodes"] == 6
    assert report.workload["test_steps"] == 16


async def test_per_request_accounting(tmp_path: Path, engines: Engines) -> None:
    report = await run_bench(_config(tmp_path), engines)
    for mode, engine in zip(MODES, engines.made, strict=True):
        done = [r for r in engine.log if r.status == "done"]
        assert done
        for r in done:
            # The fake runs the embedded engine's scheduler: a request that resumes after
            # another computed part of its prompt counts that part as cached, so every finished
            # request's cached and computed tokens sum to its prompt, prefills included.
            assert r.cached_tokens + r.computed_tokens == r.prompt_tokens, (mode, r)
        f = report.modes[mode]
        # The engine's own counter agrees with the sum of its per-request answers.
        assert f["engine_computed_tokens"] == f["computed_tokens"]
        assert f["accounting_mismatched_requests"] == 0
        # next_turn's warms are live-priority requests of their own, apart from the live ones.
        warms = f.get("next_turn_computed_tokens", 0)
        assert (mode == "next_turn") == (warms > 0)
        assert f["computed_tokens"] == (
            f["live_computed_tokens"] + f["prefill_computed_tokens"] + warms
        )
        assert f["useful_tokens"] + f["wasted_tokens"] == f["computed_tokens"]


async def test_cold_never_reuses_and_oracle_never_wastes(tmp_path: Path, engines: Engines) -> None:
    report = await run_bench(_config(tmp_path), engines)
    cold, reactive, _next_turn, _agentwarm, oracle = engines.made
    timed = [r for r in cold.log if r.namespace.endswith("-cold")]
    assert timed == []  # every cold request went to its own namespace
    cold_ns = [r.namespace for r in cold.log if r.kind == "generate"]
    assert len(set(cold_ns)) == len(cold_ns)
    assert all(r.cached_tokens == 0 for r in cold.log)
    c = report.modes["cold"]
    assert c["cached_tokens"] == 0
    assert c["computed_tokens"] == c["prompt_tokens"]
    assert c["prefetches_issued"] == 0 and c["acceptance_ratio"] is None
    r = report.modes["reactive"]
    assert r["prefetches_issued"] == 0 and r["cached_tokens"] > 0
    assert all(rec.kind == "generate" for rec in reactive.log)
    o = report.modes["oracle"]
    assert o["wasted_tokens"] == 0
    assert o["acceptance_ratio"] == 1.0
    assert o["branch_hit_rate"] == 1.0
    assert o["prefetches_issued"] == 16  # one per transition into a tool step
    assert o["computed_tokens"] == o["useful_tokens"]
    assert {rec.kind for rec in oracle.log} == {"generate", "prefill"}


async def test_agentwarm_learns_and_reports_its_prefetches(
    tmp_path: Path, engines: Engines
) -> None:
    config = _config(tmp_path, pretrain=True, test_fraction=0.5)
    report = await run_bench(config, engines)
    a = report.modes["agentwarm"]
    train, _ = split_episodes(load_episodes(config.trajectories), seed=0, test_fraction=0.5)
    assert report.workload["train_episodes"] == len(train) == 3
    assert a["pretrained_transitions"] == sum(len(e.steps) + 1 for e in train)
    assert a["prefetches_issued"] >= a["prefetch_hits"] > 0
    assert a["acceptance_ratio"] == a["prefetch_hits"] / a["prefetches_issued"]
    assert report.modes["cold"]["pretrained_transitions"] == 0


@pytest.mark.slow
async def test_gap_to_oracle_splits_the_mean_ttft_difference_by_step_outcome(
    tmp_path: Path, engines: Engines
) -> None:
    report = await run_bench(_config(tmp_path), engines)
    gap = report.gap_to_oracle
    assert gap is not None
    a, o = report.modes["agentwarm"], report.modes["oracle"]
    assert gap["total_s"] == pytest.approx(a["ttft_mean_s"] - o["ttft_mean_s"], abs=1e-12)
    assert sum(gap["by_outcome_s"].values()) == pytest.approx(gap["total_s"], abs=1e-12)
    steps = [st for r in report.runs["agentwarm"].results for st in r.steps]
    hits = sum(1 for st in steps if st.prefetched)
    assert gap["steps"]["none"] == a["episodes"]  # each run's first step
    assert gap["steps"].get("hit", 0) == hits and sum(gap["steps"].values()) == len(steps)
    assert json.loads(json.dumps(report.to_dict()))["gap_to_oracle"] == gap
    without = await run_bench(_config(tmp_path, modes=("reactive", "oracle")), engines)
    assert without.gap_to_oracle is None and without.to_dict()["gap_to_oracle"] is None


async def test_modes_subset_and_json_shape(tmp_path: Path, engines: Engines) -> None:
    report = await run_bench(_config(tmp_path, modes=("oracle", "reactive")), engines)
    assert list(report.modes) == ["reactive", "oracle"]
    d = json.loads(json.dumps(report.to_dict()))
    assert d["gap_closed"] is None and d["ttft_speedup_vs_reactive"] is None
    assert d["config"]["modes"] == ["reactive", "oracle"]
    assert d["oracle_ttft_speedup_vs_reactive"] > 0


def test_headline_ratios() -> None:
    modes = {
        "reactive": {"ttft_mean_s": 1.0, "makespan_s": 10.0},
        "agentwarm": {"ttft_mean_s": 0.4, "makespan_s": 8.0},
        "oracle": {"ttft_mean_s": 0.25, "makespan_s": 7.5},
        "cold": {"ttft_mean_s": 3.0, "makespan_s": 20.0},
    }
    h = headline(modes)
    assert h["gap_closed"] == pytest.approx(0.8)
    assert h["ttft_speedup_vs_reactive"] == pytest.approx(2.5)
    assert h["makespan_speedup_vs_reactive"] == pytest.approx(1.25)
    assert h["oracle_ttft_speedup_vs_reactive"] == pytest.approx(4.0)
    assert h["reactive_ttft_speedup_vs_cold"] == pytest.approx(3.0)
    assert h["next_turn_gap_closed"] is None and h["ttft_speedup_vs_next_turn"] is None
    modes["next_turn"] = {"ttft_mean_s": 0.85, "live_computed_tokens": 900}
    for m, live in (("reactive", 1000), ("agentwarm", 400), ("oracle", 200)):
        modes[m]["live_computed_tokens"] = live
    h = headline(modes)
    assert h["next_turn_gap_closed"] == pytest.approx(0.2)
    assert h["ttft_speedup_vs_next_turn"] == pytest.approx(0.85 / 0.4)
    assert h["gap_closed_live_tokens"] == pytest.approx(0.75)
    assert h["next_turn_gap_closed_live_tokens"] == pytest.approx(0.125)
    modes["oracle"]["ttft_mean_s"] = 1.0
    assert headline(modes)["gap_closed"] is None


def test_pretrain_feeds_every_transition() -> None:
    eps = [Episode("0", ("a", "b")), Episode("1", ("a", "b")), Episode("2", ())]
    w = Workload.build(eps, encode=FakeEngine().encode, sizes=SIZES)
    p = default_predictor()
    assert pretrain(p, w, eps) == 7
    assert p.predict((w.entry,), candidates=["a", "b", END])[0][0] == "a"
    assert p.predict((w.entry, "a"), candidates=["a", "b", END])[0][0] == "b"


def test_oracle_predictor_names_the_true_next_step() -> None:
    eps = [Episode("0", ("a", "b"))]
    w = Workload.build(eps, encode=FakeEngine().encode, sizes=SIZES)
    state = {SCRIPT_KEY: w.script(eps[0])}
    o = OraclePredictor()
    cands = ["a", "b", END]
    assert o.predict((w.entry,), state, candidates=cands) == [("a", 1.0)]
    assert o.predict((w.entry, "a"), state, candidates=cands) == [("b", 1.0)]
    assert o.predict((w.entry, "a", "b"), state, candidates=cands) == [(END, 1.0)]
    assert o.predict((w.entry,), {}, candidates=["a", "b"]) == [("a", 0.5), ("b", 0.5)]
    assert OraclePredictor.from_dict(o.to_dict()).to_dict() == {"kind": "oracle"}


async def test_metered_engine_isolates_and_records() -> None:
    inner = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    m = MeteredEngine(inner, isolate=True)
    ids = inner.encode("hello world")
    await m.generate(ids, max_tokens=2, namespace="n")
    await m.prefill(ids, namespace="n")
    assert [r.kind for r in m.records] == ["generate", "prefill"]
    assert [r.cached_tokens for r in m.records] == [0, 0]
    assert m.records[1].computed_tokens == len(ids)
    spaces = [r.namespace for r in inner.log]
    assert len(set(spaces)) == 2 and all(s.startswith("n-") for s in spaces)
    plain = MeteredEngine(inner)
    await plain.prefill(ids, namespace="k")
    await plain.prefill(ids, namespace="k")
    assert [r.cached_tokens for r in plain.records] == [0, len(ids)]
    assert plain.supports_promotion is True
    await m.aclose()


async def test_plot_writes_a_png(tmp_path: Path, engines: Engines) -> None:
    pytest.importorskip("matplotlib")
    report = await run_bench(_config(tmp_path, modes=("reactive", "oracle")), engines)
    out = tmp_path / "cdf.png"
    report.plot(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
async def test_fast_baselines_account_think_time_instead_of_sleeping(
    tmp_path: Path, engines: Engines
) -> None:
    config = _config(tmp_path, think="const:0.05", modes=("reactive", "oracle"))
    report = await run_bench(config, engines)
    reactive, oracle = report.runs["reactive"], report.runs["oracle"]
    # 22 nodes ran (6 entry steps + 16 tool steps), each thinking 0.05 s.
    assert sum(reactive.accounted_think_s) == pytest.approx(22 * 0.05)
    assert oracle.accounted_think_s == [0.0] * 6
    assert report.modes["reactive"]["think_accounted_s"] == pytest.approx(1.1)
    for r, think in zip(reactive.results, reactive.accounted_think_s, strict=True):
        assert r.duration_s < think  # nothing was slept
    for r in oracle.results:
        assert r.duration_s >= 0.05 * len(r.steps)
    slept = await run_bench(config.model_copy(update={"fast_baselines": False}), Engines())
    assert slept.runs["reactive"].accounted_think_s == [0.0] * 6
    for r in slept.runs["reactive"].results:
        assert r.duration_s >= 0.05 * len(r.steps)
