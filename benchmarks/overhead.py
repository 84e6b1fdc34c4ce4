"""Framework overhead of speculative prefetching, side by side with the reactive baseline.

Usage::

    python -m benchmarks.overhead [--quick] [--json] [--timeout-s 60]

Everything runs in one process on ``FakeEngine(seconds_per_token=0,
seconds_per_output_token=0)``, an engine that costs nothing, so every millisecond measured is
the framework's own (agentwarm's runner, prefetcher and the fake engine's scheduler). The
workflow is a 6-node linear chain ``n0 → … → n5 → END``:

- **per step**: runs one at a time; the median over repeats of wall time / steps, without a
  prefetch policy (``PrefetchPolicy.disabled()``) and with the default one, for nodes that do
  not call the LLM, nodes that make one ``ctx.llm`` call, and the same with
  ``timing="step_start"``. LangGraph's ``StateGraph.ainvoke`` on the same 6-node chain is
  measured in the same loop, without a call and with one ``engine.generate`` per node on the
  same engine.
- **concurrent**: 10 / 100 / 1,000 runs started at once, each step one ``ctx.llm`` call then
  50 ms of simulated work (``asyncio.sleep``); wall time and peak RSS (VmHWM, reset per case).
  A case (or a per-step repeat) still running after ``--timeout-s`` is cut and reported with
  its completed count.
- **memory**: for each concurrent case, peak RSS (VmHWM, reset before the case) and its growth
  over the RSS before the case, per 1,000 runs; then, once the runs ended, their background
  tasks finished and ``gc`` ran, the objects and allocator blocks still alive that were not
  before (the workflow, its session and the engine stay alive, as in a server; the engine's
  cache is bounded). Release check, on the largest batch: fewer retained objects than runs
  (at least 100), and no task left.

Goals (issue 16): with prefetching ≤ 1.1× the no-prefetch time in every row; agentwarm's time
per step ≤ LangGraph's; 1,000 concurrent runs with prefetching within 1.1× of reactive. Rows
over a goal are flagged ``OVER``. ``--quick`` runs small counts (a smoke test, seconds);
``--json`` prints the figures as one JSON document instead of the tables.

Longer than 400 lines because it is one runnable script whose cases, measurement loop and
report are read together; nothing in the package imports it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, Workflow, WorkflowGraph, node
from agentwarm.runtime.result import RunResult

__all__ = ("Sizes", "main", "measure")

STEPS = 6
WORK_S = 0.05
RATIO_GOAL = 1.1
#: Engine cache budget (tokens): the fake engine's cache is engine memory, not framework memory.
CACHE_TOKENS = 20_000
NODES = [f"n{i}" for i in range(STEPS)]
SYSTEMS = [f"You are step {i} of a six-step pipeline. Do your part carefully. " * 4 for i in NODES]
PATH = NODES


@dataclass(frozen=True, slots=True)
class Sizes:
    runs: int  # sequential runs per repeat (per-step figures)
    repeats: int
    concurrency: tuple[int, ...]


FULL = Sizes(runs=20, repeats=7, concurrency=(10, 100, 1000))
QUICK = Sizes(runs=3, repeats=2, concurrency=(2, 8))


def make_engine() -> FakeEngine:
    # No request log (a test aid): only the framework's own memory is measured.
    return FakeEngine(
        seconds_per_token=0,
        seconds_per_output_token=0,
        max_cached_tokens=CACHE_TOKENS,
        log_limit=0,
    )


def build_workflow(*, llm: bool, work_s: float = 0.0) -> Workflow:
    """The 6-node chain; each node optionally makes one ``ctx.llm`` call, then awaits work."""
    specs = []
    for i, name in enumerate(NODES):
        nxt = NODES[i + 1] if i + 1 < STEPS else END

        async def step(ctx: Context, _i: int = i, _next: str = nxt) -> str:
            if llm:
                await ctx.llm(f"do step {_i}", max_tokens=4)
            if work_s:
                await asyncio.sleep(work_s)
            return _next

        specs.append(node(name=name, system=SYSTEMS[i], next=[nxt], entry=i == 0)(step))
    return WorkflowGraph("overhead_chain").add(*specs).compile()


class ChainState(TypedDict, total=False):
    input: str
    out: str


def build_langgraph(engine: FakeEngine, *, llm: bool) -> Any:
    """The same chain as a LangGraph ``StateGraph`` (one ``engine.generate`` per node if llm)."""
    from langgraph.graph import END as LG_END
    from langgraph.graph import START as LG_START
    from langgraph.graph import StateGraph

    graph = StateGraph(ChainState)
    for i, name in enumerate(NODES):

        async def step(state: ChainState, _i: int = i) -> dict[str, str]:
            if not llm:
                return {"out": str(_i)}
            ids = engine.encode(f"{SYSTEMS[_i]}{state['input']} do step {_i}")
            return {"out": (await engine.generate(ids, max_tokens=4)).text}

        graph.add_node(name, step)
    graph.add_edge(LG_START, NODES[0])
    for a, b in itertools.pairwise(NODES):
        graph.add_edge(a, b)
    graph.add_edge(NODES[-1], LG_END)
    return graph.compile()


def langgraph_available() -> bool:
    try:
        import langgraph.graph  # noqa: F401
    except ImportError:
        return False
    return True


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _progress(what: str) -> None:
    print(f"[overhead] {what}", file=sys.stderr, flush=True)


def _reset_peak_rss() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux)


# --- per step ---------------------------------------------------------------------------------


RunOnce = Callable[[str], Awaitable[bool]]  # one run on an input; True when it completed


def _agentwarm_case(engine: FakeEngine, llm: bool, policy: PrefetchPolicy) -> RunOnce:
    wf = build_workflow(llm=llm)

    async def once(text: str) -> bool:
        return (await wf.run(text, engine=engine, policy=policy)).path == PATH

    return once


def _langgraph_case(engine: FakeEngine, llm: bool) -> RunOnce:
    app = build_langgraph(engine, llm=llm)

    async def once(text: str) -> bool:
        return "out" in await app.ainvoke({"input": text})

    return once


async def per_step(sizes: Sizes, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Median ms per step of each case; the cases' repeats are interleaved (same load).

    A repeat still running after ``timeout_s`` is cut: its remaining runs count as not completed.
    """
    off, on = PrefetchPolicy.disabled(), PrefetchPolicy()
    engines = [make_engine() for _ in range(7)]
    cases: dict[str, RunOnce] = {
        "no_llm/without": _agentwarm_case(engines[0], False, off),
        "no_llm/with": _agentwarm_case(engines[1], False, on),
        "llm/without": _agentwarm_case(engines[2], True, off),
        "llm/with": _agentwarm_case(engines[3], True, on),
        "llm_step_start/with": _agentwarm_case(
            engines[4], True, PrefetchPolicy(timing="step_start")
        ),
    }
    if langgraph_available():
        cases["no_llm/langgraph"] = _langgraph_case(engines[5], False)
        cases["llm/langgraph"] = _langgraph_case(engines[6], True)
    samples: dict[str, list[float]] = {k: [] for k in cases}
    completed = Counter[str]()
    timed_out: set[str] = set()
    for once in cases.values():
        await once("warm-up")
    for repeat in range(sizes.repeats):
        _progress(f"per step: repeat {repeat + 1} of {sizes.repeats}")
        for key, once in cases.items():
            t0 = time.perf_counter()
            try:
                async with asyncio.timeout(timeout_s):
                    for k in range(sizes.runs):
                        completed[key] += await once(f"request {k}")
            except TimeoutError:
                timed_out.add(key)
            samples[key].append((time.perf_counter() - t0) * 1e3 / (sizes.runs * STEPS))
    for engine in engines:
        await engine.aclose()
    return {
        key: {
            "ms": statistics.median(values),
            "samples_ms": values,
            "runs": sizes.runs * sizes.repeats,
            "completed": completed[key],
            "timed_out": key in timed_out,
        }
        for key, values in samples.items()
    }


# --- concurrent -------------------------------------------------------------------------------


async def _concurrent(
    n: int, policy: PrefetchPolicy, timeout_s: float, *, wf: Workflow, engine: FakeEngine
) -> tuple[float, list[RunResult], bool]:
    t0 = time.perf_counter()
    tasks = [
        asyncio.create_task(wf.run(f"request {k}", engine=engine, policy=policy)) for k in range(n)
    ]
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    wall = time.perf_counter() - t0
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    results = [t.result() for t in done if not t.cancelled() and t.exception() is None]
    return wall, results, bool(pending)


def _outcomes(results: list[RunResult]) -> dict[str, int]:
    return dict(Counter(str(p.outcome) for r in results for p in r.speculative_prefetches))


async def _settled(baseline: int, deadline_s: float = 5.0) -> int:
    """Wait until only ``baseline`` tasks are left (background work done); return the excess."""
    t_end = time.monotonic() + deadline_s
    while len(asyncio.all_tasks()) > baseline and time.monotonic() < t_end:
        await asyncio.sleep(0.01)
    return len(asyncio.all_tasks()) - baseline


def _retained(before: set[int]) -> list[object]:
    gc.collect()
    return [o for o in gc.get_objects() if id(o) not in before]


async def concurrent(n: int, policy: PrefetchPolicy, timeout_s: float) -> dict[str, Any]:
    """``n`` runs at once: wall time, peak RSS, and what is left once they ended (after gc)."""
    engine, wf = make_engine(), build_workflow(llm=True, work_s=WORK_S)
    await wf.run("warm-up", engine=engine, policy=policy)
    baseline_tasks = len(asyncio.all_tasks())
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    blocks = sys.getallocatedblocks()
    rss = _rss_kib("VmRSS")
    _reset_peak_rss()
    wall, results, timed_out = await _concurrent(n, policy, timeout_s, wf=wf, engine=engine)
    peak = _rss_kib("VmHWM")
    completed = sum(r.path == PATH for r in results)
    outcomes = _outcomes(results)
    del results
    pending = await _settled(baseline_tasks)
    left = _retained(before)
    left_blocks = sys.getallocatedblocks() - blocks
    top = Counter(type(o).__qualname__ for o in left).most_common(4)
    retained = len(left)
    del left[:]
    await engine.aclose()
    return {
        "runs": n,
        "wall_s": wall,
        "completed": completed,
        "timed_out": timed_out,
        "peak_rss_mib": peak / 1024,
        "rss_growth_mib_per_1000_runs": (peak - rss) / 1024 * 1000 / n,
        "prefetches": outcomes,
        "pending_tasks_after": pending,
        "retained_objects": retained,
        "retained_blocks": left_blocks,
        "retained_top_types": top,
    }


# --- the whole benchmark ----------------------------------------------------------------------


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


async def measure(sizes: Sizes, timeout_s: float) -> dict[str, Any]:
    off, on = PrefetchPolicy.disabled(), PrefetchPolicy()
    steps = await per_step(sizes, timeout_s)
    rows = []
    for label, base, with_ in (
        ("per step, no LLM call", "no_llm/without", "no_llm/with"),
        ("per step, one ctx.llm call", "llm/without", "llm/with"),
        ('per step, one ctx.llm call, timing="step_start"', "llm/without", "llm_step_start/with"),
    ):
        a, b = steps[base], steps[with_]
        ratio = _ratio(b["ms"], a["ms"])
        rows.append(
            {
                "case": label,
                "unit": "ms",
                "without": a["ms"],
                "with": b["ms"],
                "ratio": ratio,
                "over": ratio > RATIO_GOAL or min(a["completed"], b["completed"]) < b["runs"],
                "runs": b["runs"],
                "completed_without": a["completed"],
                "completed_with": b["completed"],
                "timed_out": a["timed_out"] or b["timed_out"],
            }
        )
    langgraph = []
    for label, kind in (("no LLM call", "no_llm"), ("one LLM call", "llm")):
        lg = steps.get(f"{kind}/langgraph")
        if lg is None:
            continue
        a, b = steps[f"{kind}/without"], steps[f"{kind}/with"]
        langgraph.append(
            {
                "case": label,
                "langgraph_ms": lg["ms"],
                "without_ms": a["ms"],
                "with_ms": b["ms"],
                "ratio_without": _ratio(a["ms"], lg["ms"]),
                "ratio_with": _ratio(b["ms"], lg["ms"]),
                "over": max(a["ms"], b["ms"]) > lg["ms"] or lg["completed"] < lg["runs"],
                "runs": lg["runs"],
                "completed": lg["completed"],
            }
        )
    memory = []
    for n in sizes.concurrency:
        _progress(f"{n:,} concurrent runs, no prefetch")
        a = await concurrent(n, off, timeout_s)
        _progress(f"{n:,} concurrent runs, prefetch")
        b = await concurrent(n, on, timeout_s)
        ratio = _ratio(b["wall_s"], a["wall_s"])
        incomplete = a["completed"] < n or b["completed"] < n
        rows.append(
            {
                "case": f"{n:,} concurrent runs, {WORK_S * 1e3:.0f} ms work per step, wall",
                "unit": "s",
                "without": a["wall_s"],
                "with": b["wall_s"],
                "ratio": ratio,
                "over": ratio > RATIO_GOAL or incomplete,
                "runs": n,
                "completed_without": a["completed"],
                "completed_with": b["completed"],
                "timed_out": a["timed_out"] or b["timed_out"],
                "prefetches_with": b["prefetches"],
            }
        )
        for name, m in (("no prefetch", a), ("prefetch", b)):
            m = {"policy": name, **m}
            # Release check on the largest batch, once the engine's bounded cache is full: less
            # than one object per run may stay behind, and no task.
            m["over"] = n == max(sizes.concurrency) and (
                m["retained_objects"] >= max(n, 100) or m["pending_tasks_after"] > 0
            )
            memory.append(m)
    over = any(r["over"] for r in (*rows, *langgraph, *memory))
    return {
        "sizes": {
            "runs": sizes.runs,
            "repeats": sizes.repeats,
            "concurrency": list(sizes.concurrency),
        },
        "steps_per_run": STEPS,
        "work_s": WORK_S,
        "ratio_goal": RATIO_GOAL,
        "rows": rows,
        "langgraph": langgraph,
        "memory": memory,
        "per_step_samples_ms": {k: v["samples_ms"] for k, v in steps.items()},
        "peak_rss_mib": _rss_kib("VmHWM") / 1024,
        "goals_met": not over and bool(langgraph),
    }


def _fmt(value: float, unit: str) -> str:
    return f"{value:.2f} ms" if unit == "ms" else f"{value:.2f} s"


def render(report: dict[str, Any]) -> str:
    flag = {True: "**OVER**", False: "ok"}
    out = [
        f"| case | no prefetch | with prefetch | ratio (goal ≤ {RATIO_GOAL}×) | |",
        "|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        done = ""
        if r["completed_with"] < r["runs"] or r["completed_without"] < r["runs"]:
            done = (
                f" (completed: {r['completed_without']} without, {r['completed_with']} with; "
                f"cut at --timeout-s)"
            )
        out.append(
            f"| {r['case']}{done} | {_fmt(r['without'], r['unit'])} | "
            f"{_fmt(r['with'], r['unit'])} | {r['ratio']:.2f}× | {flag[r['over']]} |"
        )
    if report["langgraph"]:
        out += [
            "",
            "| per step | LangGraph `ainvoke` | agentwarm, no prefetch | agentwarm, prefetch "
            "| goal ≤ LangGraph |",
            "|---|---|---|---|---|",
        ]
        for r in report["langgraph"]:
            out.append(
                f"| {r['case']} | {r['langgraph_ms']:.2f} ms | {r['without_ms']:.2f} ms "
                f"({r['ratio_without']:.2f}×) | {r['with_ms']:.2f} ms ({r['ratio_with']:.2f}×) "
                f"| {flag[r['over']]} |"
            )
    else:
        out += ["", "LangGraph is not installed (pip install -e '.[test]'): no comparison."]
    out += [
        "",
        "| memory | concurrent runs | completed | peak RSS | RSS growth per 1,000 runs "
        "| left after the runs and gc | |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in report["memory"]:
        top = ", ".join(f"{name} {count}" for name, count in m["retained_top_types"][:3])
        out.append(
            f"| {m['policy']} | {m['runs']:,} | {m['completed']:,} | {m['peak_rss_mib']:.0f} MiB "
            f"| {m['rss_growth_mib_per_1000_runs']:.1f} MiB | {m['retained_objects']:,} objects"
            f" ({top}), {m['retained_blocks']:+,} blocks, {m['pending_tasks_after']} tasks "
            f"| {flag[m['over']]} |"
        )
    prefetches = {r["runs"]: r["prefetches_with"] for r in report["rows"] if "prefetches_with" in r}
    out += [
        "",
        f"speculative prefetch outcomes (concurrent, with prefetch): {prefetches}",
        f"process peak RSS {report['peak_rss_mib']:.0f} MiB; goals "
        + ("met" if report["goals_met"] else "NOT met"),
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke test)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="limit of one concurrent case or per-step repeat (s)",
    )
    args = parser.parse_args(argv)
    if args.timeout_s <= 0:
        parser.error(f"--timeout-s must be > 0, got {args.timeout_s}; pass e.g. --timeout-s 60")
    report = asyncio.run(measure(QUICK if args.quick else FULL, args.timeout_s))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
