"""Restart scenario: cold start vs a static warm-up from a mined plan vs keep-warm (issue 14).

Usage::

    python benchmarks/warmup_bench.py [--profile quick|full] [--json] [--workload W]
        [--requests N] [--rewarm-every K] [--small-cache F] [--model PRESET] [--device cpu]
        [--file CONVERSATIONS] [--tools TOOLS] [--retail TRAJECTORIES] [--modes a,b,...]

An embedded engine (:class:`~agentwarm.engines.local.LocalEngine`: preset ``tiny`` for
``quick``, ``small`` for ``full``; both render with Qwen2.5's tokenizer and chat template, which
the report names) has just restarted; then the first ``N`` requests of a replayed workload
arrive one after another (each waits for the one before; ``--concurrency C``: up to ``C`` in
flight, as ``C`` clients send them, a conversation's turn still after its previous one).

A workload (:mod:`benchmarks.warmup_workload`) is conversations split into train and test: each
assistant turn is a request of the messages before it plus the tool schemas, rendered with the
engine's chat template (generation prompt added); the requests of the first
``--conversations`` of the test split are interleaved round-robin (every first turn, then every
second turn, ...), so that they share the cache as concurrent sessions do. The plan is mined
(:func:`agentwarm.warmup.mine.mine_plan`, ``--top-k`` 20, min share 0.01) from the train split
written as a requests JSONL.

Modes, each on a fresh engine (the loaded weights are shared, the cache is new), in this order,
after two untimed requests on a scratch engine (torch's one-time costs, several seconds, would
otherwise fall on the first mode's first request):

* ``cold`` — no warm-up.
* ``warm`` — static warm-up of the plan (:class:`agentwarm.warmup.warmer.Warmer`, its default
  budget: half the cache) before the first request.
* ``warm_small`` — the same under a cache too small for the workload: ``max_cached_tokens`` =
  ``--small-cache`` (0.5) x the distinct tokens of the N prompts (a prefix tree's size), but at
  least the longest prompt and twice the plan's first prefix (the warm-up's budget is half the
  cache: a smaller one would skip it); no keep-warm. The report says when that holds
  everything (``small_cache_fits_all``: the quick profile's few requests).
* ``keepwarm_small`` — the same small cache, warm-up, and keep-warm: ``await kw.rewarm()``
  (:class:`agentwarm.warmup.keepwarm.KeepWarm`) before every ``--rewarm-every``-th request.
* ``keepwarm_unbounded`` — warm-up and the same rewarms with the default (unbounded) cache: the
  hit-ratio reference.

Per request: TTFT is the engine's :attr:`~agentwarm.engines.types.Completion.ttft_s`
(``generate(ids, max_tokens=1)``: from the call to the first generated token, queueing
included; warm-ups and rewarms run between requests and are not in it), and its cached / prompt
tokens. Per mode: TTFT p50/p95/p99/mean of the N requests, hit ratio (cached / prompt tokens
summed over them), warm-up seconds / tokens / computed tokens, rewarms. Goals (issue 14): p50
TTFT cold / warm >= 4, p99 >= 2; hit ratio of ``keepwarm_unbounded`` minus ``keepwarm_small``
<= 5 points.

``--profile quick``: tiny, 12 requests of 3 conversations, airline only, rewarm every 4.
``--profile full``: small, 50 requests of 10 conversations, airline and retail, rewarm every
10. Progress goes to stderr unless ``AGENTWARM_NO_PROGRESS`` is set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentwarm.engines.local.engine import LocalEngine
from agentwarm.engines.local.model import LoadedModel, load_model
from agentwarm.errors import ConfigError
from agentwarm.warmup.mine import mine_plan
from agentwarm.warmup.render import ChatRenderer
from benchmarks.warmup_disk import DISK_GOALS, DISK_MODES, disk_goals, goal, run_disk_mode
from benchmarks.warmup_workload import (
    Request,
    Workload,
    airline,
    distinct_tokens,
    first_request,
    interleave,
    plan_info,
    prime,
    prompt_ids,
    retail,
    run_mode,
    write_requests,
)

__all__ = ("GOALS", "MODES", "PROFILES", "Profile", "main", "measure", "render")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
AIRLINE = DATA / "tau-airline" / "conversations.jsonl"
RETAIL = DATA / "tau2-retail" / "trajectories.jsonl"
MODES = ("cold", "warm", "warm_small", "keepwarm_small", "keepwarm_unbounded", *DISK_MODES)
#: Goals (issue 14): cold/warm TTFT ratios at p50 and p99 (at least), hit-ratio gap (at most);
#: issue 25's with the disk tier (:data:`~benchmarks.warmup_disk.DISK_GOALS`).
GOALS = {"p50_ratio": 4.0, "p99_ratio": 2.0, "hit_gap_points": 5.0, **DISK_GOALS}
TTFT_SOURCE = "Completion.ttft_s: engine.generate(ids, max_tokens=1), call to first token"


@dataclass(frozen=True, slots=True)
class Profile:
    """Defaults of a run (each overridable by its option)."""

    model: str
    requests: int
    conversations: int
    workloads: tuple[str, ...]
    rewarm_every: int
    small_cache: float


PROFILES: dict[str, Profile] = {
    "quick": Profile("tiny", 12, 3, ("airline",), 4, 0.5),
    "full": Profile("small", 50, 10, ("airline", "retail"), 10, 0.5),
}


def _progress(line: str) -> None:
    if os.environ.get("AGENTWARM_NO_PROGRESS") is None:
        print(f"[warmup_bench] {line}", file=sys.stderr, flush=True)


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


async def run_workload(
    workload: Workload,
    loaded: LoadedModel,
    renderer: ChatRenderer,
    *,
    requests: int,
    rewarm_every: int,
    small_cache: float,
    modes: Sequence[str],
    top_k: int = 20,
    concurrency: int = 1,
) -> dict[str, Any]:
    """Every mode on one workload (prompts rendered by ``renderer``: the engine's), and the
    ratios and goals."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="warmup-bench-") as tmp:
        log = Path(tmp) / "train-requests.jsonl"
        train_requests = write_requests(workload.train, log)
        plan = mine_plan([log], renderer=renderer, top_k=top_k, min_share=0.01)
    mine_s = time.perf_counter() - t0
    replayed: list[Request] = interleave(workload.test, requests)
    pieces: dict[str, list[int]] = {}
    prompts = [prompt_ids(renderer.template, renderer.encode, r, pieces) for r in replayed]
    plan_figures, plan_ids = plan_info(plan, renderer)
    distinct = distinct_tokens(prompts)
    head = max((len(ids) for ids in plan_ids[:1]), default=0)
    small_tokens = max(max(map(len, prompts), default=1), 2 * head, int(distinct * small_cache))
    _progress(
        f"{workload.name}: {len(replayed)} requests of {len(workload.test)} test conversations, "
        f"plan of {len(plan)} prefixes from {train_requests} train requests; "
        f"small cache {small_tokens} of {distinct} distinct tokens"
    )
    before = [
        prompt_ids(renderer.template, renderer.encode, r, pieces)
        for r in interleave(workload.train, requests)
    ]
    prime_s = await prime(loaded, prompts[:2])
    results: dict[str, Any] = {}
    for mode in modes:
        _progress(f"{workload.name}: {mode}")
        kw: dict[str, Any] = {"before_restart": before} if mode in DISK_MODES else {}
        results[mode] = await (run_disk_mode if mode in DISK_MODES else run_mode)(
            mode,
            loaded,
            prompts,
            [r.conversation for r in replayed],
            plan,
            small_cache_tokens=small_tokens,
            rewarm_every=rewarm_every,
            concurrency=concurrency,
            **kw,
        )
    cold, warm = results.get("cold"), results.get("warm")
    ratios = {
        q: _ratio(cold[f"ttft_{q}_s"], warm[f"ttft_{q}_s"]) if cold and warm else None
        for q in ("p50", "p95", "p99", "mean")
    }
    small, ref = results.get("keepwarm_small"), results.get("keepwarm_unbounded")
    gap = (
        (ref["hit_ratio"] - small["hit_ratio"]) * 100
        if small and ref and small["hit_ratio"] is not None and ref["hit_ratio"] is not None
        else None
    )
    goals = {
        "p50_ratio": goal(ratios["p50"], GOALS["p50_ratio"], at_least=True),
        "p99_ratio": goal(ratios["p99"], GOALS["p99_ratio"], at_least=True),
        "hit_gap_points": goal(gap, GOALS["hit_gap_points"], at_least=False),
        **disk_goals(results),
    }
    return {
        "workload": workload.name,
        "train_conversations": len(workload.train),
        "train_requests": train_requests,
        "test_conversations": len(workload.test),
        "requests": len(replayed),
        "prompt_tokens_total": sum(len(p) for p in prompts),
        "distinct_tokens": distinct,
        "small_cache_tokens": small_tokens,
        "small_cache_fits_all": small_tokens >= distinct,
        "mine_s": mine_s,
        "prime_s": prime_s,
        "plan": plan_figures,
        "first_request": first_request(plan_ids, prompts[0] if prompts else []),
        "modes": results,
        "ratios": ratios,
        "hit_gap_points": gap,
        "goals": goals,
    }


def load_workloads(
    args: argparse.Namespace, names: Sequence[str], encode: Any, conversations: int
) -> list[Workload]:
    out = []
    for name in names:
        if name == "airline":
            out.append(airline(args.file, args.tools, limit=conversations))
        else:
            out.append(retail(args.retail, encode=encode, limit=conversations))
    return out


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure the options ask for, as one JSON-ready object."""
    t0 = time.perf_counter()
    prof = PROFILES[args.profile]
    model = args.model or prof.model
    names = (
        prof.workloads
        if args.workload is None
        else (("airline", "retail") if args.workload == "both" else (args.workload,))
    )
    requests = args.requests or prof.requests
    rewarm_every = args.rewarm_every or prof.rewarm_every
    small_cache = args.small_cache if args.small_cache is not None else prof.small_cache
    modes = tuple(m for m in MODES if m in args.modes) if args.modes else MODES
    _progress(f"loading {model} on {args.device}")
    loaded = load_model(model, device=args.device, seed=0)
    probe = LocalEngine(loaded, max_cached_tokens=0)
    template, renderer = probe.chat_template, ChatRenderer.for_engine(probe)
    await probe.aclose()
    conversations = args.conversations or prof.conversations
    workloads = load_workloads(args, names, loaded.tokenizer.encode, conversations)
    out: dict[str, Any] = {
        "profile": args.profile,
        "model": model,
        "device": args.device,
        "tokenizer": type(loaded.tokenizer).__name__,
        "chat_template": template.name if template is not None else None,
        "ttft_source": TTFT_SOURCE,
        "requests": requests,
        "conversations": conversations,
        "rewarm_every": rewarm_every,
        "small_cache_fraction": small_cache,
        "modes": list(modes),
        "top_k": args.top_k,
        "concurrency": args.concurrency,
        "workloads": {},
    }
    for workload in workloads:
        out["workloads"][workload.name] = await run_workload(
            workload,
            loaded,
            renderer,
            requests=requests,
            rewarm_every=rewarm_every,
            small_cache=small_cache,
            modes=modes,
            top_k=args.top_k,
            concurrency=args.concurrency,
        )
        # a long run's finished workloads show even if it is stopped before the end
        table = render_workload(workload.name, out["workloads"][workload.name], args.concurrency)
        _progress("\n" + "\n".join(table))
    out["elapsed_s"] = time.perf_counter() - t0
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _arrival(concurrency: int) -> str:
    return "one after another" if concurrency == 1 else f"up to {concurrency} in flight"


def render_workload(name: str, w: dict[str, Any], concurrency: int) -> list[str]:
    """One workload's table and goal lines (:func:`run_workload`'s figures)."""
    lines = [
        f"### {name}: first {w['requests']} requests of {w['test_conversations']} test "
        f"conversations (round-robin, {_arrival(concurrency)}); plan of {len(w['plan'])} "
        f"prefixes mined from {w['train_requests']} train requests in {w['mine_s']:.1f} s; "
        f"small cache {w['small_cache_tokens']} tokens for {w['distinct_tokens']} distinct ones"
        + (" (it holds them all)" if w["small_cache_fits_all"] else ""),
        "",
        "| mode | first | TTFT p50 | p95 | p99 | mean | hit ratio | from disk | ready s | "
        "warm-up s | warm-up tokens (computed) | rewarms (computed tokens) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, m in w["modes"].items():
        warm = m["warmup"]
        lines.append(
            f"| {mode} | {_ms(m['first_ttft_s'])} | {_ms(m['ttft_p50_s'])} | "
            f"{_ms(m['ttft_p95_s'])} | {_ms(m['ttft_p99_s'])} | {_ms(m['ttft_mean_s'])} | "
            f"{_pct(m['hit_ratio'])} | {m['disk_hit_tokens']} | {m['ready_s']:.2f} | "
            + (
                f"{warm['seconds']:.2f} | {warm['tokens']} ({warm['computed_tokens']}) | "
                if warm
                else "- | - | "
            )
            + (f"{m['rewarms']} ({m['rewarm_computed_tokens']}) |" if m["rewarms"] else "- |")
        )
    lines.append("")
    for key, label, unit in (
        ("p50_ratio", "p50 TTFT cold/warm", "x"),
        ("p99_ratio", "p99 TTFT cold/warm", "x"),
        ("hit_gap_points", "hit ratio keepwarm_unbounded - keepwarm_small", " points"),
        ("small_disk_hit_ratio", "hit ratio keepwarm_small_disk", ""),
        ("restart_first_ratio", "first request TTFT disk_restart/cold", "x"),
    ):
        g = w["goals"][key]
        op = ">=" if g["at_least"] else "<="
        value = "-" if g["value"] is None else f"{g['value']:.2f}{unit}"
        verdict = {True: "met", False: "MISSED", None: "not measured"}[g["met"]]
        lines.append(f"- goal {label} {op} {g['goal']:g}{unit}: {verdict} ({value})")
    lines.append("")
    return lines


def render(report: dict[str, Any]) -> str:
    """The report (:func:`measure`) as markdown tables and goal lines."""
    lines = [
        f"model {report['model']} ({report['tokenizer']}, chat template "
        f"{report['chat_template']}) on {report['device']}; TTFT = {report['ttft_source']}",
        "",
    ]
    for name, w in report["workloads"].items():
        lines.extend(render_workload(name, w, report["concurrency"]))
    lines.append(f"elapsed {report['elapsed_s']:.0f} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/warmup_bench.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--profile", choices=sorted(PROFILES), default="quick")
    add("--model", help="LocalEngine preset or checkpoint (quick: tiny, full: small)")
    add("--device", default="cpu", help="cpu, cuda or cuda:N")
    add("--workload", choices=("airline", "retail", "both"))
    add("--file", type=Path, default=AIRLINE, help="airline conversations (JSON lines)")
    add("--tools", type=Path, help="airline tool schemas (default: tools.json beside --file)")
    add("--retail", type=Path, default=RETAIL, help="tau2-retail trajectories.jsonl")
    add("--conversations", type=int, help="test conversations interleaved (quick 3, full 10)")
    add("--requests", type=int, help="requests measured per mode (quick 12, full 50)")
    add("--rewarm-every", type=int, help="keep-warm modes: rewarm before every K-th request")
    add("--small-cache", type=float, help="small cache = F x distinct tokens (default 0.5)")
    add("--concurrency", type=int, default=1, help="requests in flight at most (1)")
    add("--top-k", type=int, default=20, help="plan: the most valuable prefixes kept (20)")
    add("--modes", type=lambda s: tuple(s.split(",")), help=f"subset of {','.join(MODES)}")
    add("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    for name in ("requests", "rewarm_every", "conversations", "top_k", "concurrency"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.small_cache is not None and not 0 < args.small_cache <= 1:
        parser.error(f"--small-cache must be in (0, 1], got {args.small_cache}")
    if args.modes and (bad := [m for m in args.modes if m not in MODES]):
        parser.error(f"--modes: unknown {', '.join(bad)} (modes: {', '.join(MODES)})")
    try:
        report = asyncio.run(measure(args))
    except ConfigError as exc:
        print(f"warmup_bench: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
