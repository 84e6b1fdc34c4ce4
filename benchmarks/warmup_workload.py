"""The replayed workloads of the warm-up benchmark (:mod:`benchmarks.warmup_bench`).

A workload is conversations split into train and test (:func:`agentwarm.bench.inputs.
split_episodes`, the split ``agentwarm bench`` uses: shuffled by ``seed``, a ``test_fraction``
tested). Each assistant turn of a conversation is one request: the messages before it plus the
tool schemas, as an OpenAI client sends it.

* ``airline`` — the real tau-airline conversations (``conversations.jsonl`` and the
  ``tools.json`` beside it): system message (the policy), user turns, tool calls and results.
* ``retail`` — the tau2-retail tasks (``trajectories.jsonl``: step names only, no messages;
  ``policy.md`` and ``tools.json`` beside it): the policy is the system message, the 15 tools the
  schemas, and the turns are generated (:mod:`agentwarm.bench.prompts`, deterministic): a user's
  opening message, then per step an assistant call of that tool (no arguments) and a tool result
  of 60-360 tokens.

The train split is written as a requests JSONL (``{"messages", "tools"}`` per line) for the plan
miner; the test split is replayed round-robin across conversations (:func:`interleave`), one
benchmark mode at a time on a fresh engine (:func:`run_mode`, :func:`replay`).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentwarm._spec import PrefetchKind
from agentwarm.bench import prompts
from agentwarm.bench.conversations import load_conversations
from agentwarm.bench.inputs import Episode, load_episodes, read_tools_file, split_episodes
from agentwarm.chat import ChatTemplate, Message, render_ids
from agentwarm.engines.base import Engine
from agentwarm.engines.local.engine import LocalEngine
from agentwarm.engines.local.model import LoadedModel
from agentwarm.errors import ConfigError
from agentwarm.stats.definitions import percentile
from agentwarm.warmup.keepwarm import KeepWarm
from agentwarm.warmup.render import ChatRenderer
from agentwarm.warmup.types import Plan
from agentwarm.warmup.warmer import Warmer

__all__ = (
    "Request",
    "Workload",
    "airline",
    "distinct_tokens",
    "first_request",
    "interleave",
    "plan_info",
    "prime",
    "prompt_ids",
    "replay",
    "retail",
    "run_mode",
    "write_requests",
)

Encode = Callable[[str], list[int]]


@dataclass(frozen=True, slots=True)
class Request:
    """One assistant turn to answer: ``messages`` (system first) and ``tools`` before it."""

    conversation: str
    turn: int
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "tools": list(self.tools)}


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload's conversations (each a list of requests, in turn order), split."""

    name: str
    train: tuple[tuple[Request, ...], ...]
    test: tuple[tuple[Request, ...], ...]


def _requests(
    cid: str, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
) -> tuple[Request, ...]:
    """One request per assistant turn of a conversation: the messages before that turn."""
    return tuple(
        Request(cid, k, tuple(messages[:i]), tuple(tools))
        for k, i in enumerate(i for i, m in enumerate(messages) if m["role"] == "assistant")
    )


def _split(name: str, conversations: dict[str, tuple[Request, ...]], limit: int | None) -> Workload:
    """Train and test as ``agentwarm bench`` splits them (seed 0, a fifth tested), at most
    ``limit`` test conversations."""
    episodes = [Episode(cid, tuple(str(r.turn) for r in rs)) for cid, rs in conversations.items()]
    train, test = split_episodes(episodes, seed=0, test_fraction=0.2)
    return Workload(
        name,
        tuple(conversations[e.id] for e in train),
        tuple(conversations[e.id] for e in test[:limit]),
    )


def airline(path: Path, tools_path: Path | None = None, *, limit: int | None = None) -> Workload:
    """The tau-airline conversations of ``path`` with the tools of ``tools_path`` (default: the
    ``tools.json`` beside it); at most ``limit`` test conversations."""
    tools = read_tools_file(tools_path or path.parent / "tools.json")
    conversations: dict[str, tuple[Request, ...]] = {}
    for conv in load_conversations(path):
        system: list[Message] = [{"role": "system", "content": conv.system}] if conv.system else []
        cid = conv.episode.id
        conversations[cid] = _requests(cid, [*system, *conv.messages], tools)
    return _split("airline", conversations, limit)


def retail(path: Path, *, encode: Encode, limit: int | None = None, seed: int = 0) -> Workload:
    """The tau2-retail tasks of ``path`` (step names) as conversations: ``policy.md`` and
    ``tools.json`` beside it, generated user and tool turns sized in ``encode``'s tokens."""
    policy_path = path.parent / "policy.md"
    try:
        policy = policy_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"retail workload: cannot read {policy_path} ({exc.strerror})") from exc
    tools = read_tools_file(path.parent / "tools.json")
    cpt = prompts.chars_per_token(encode, seed)
    conversations: dict[str, tuple[Request, ...]] = {}
    for episode in load_episodes(path):
        rng = prompts.rng_for(seed, "retail", episode.id)
        messages: list[Message] = [
            {"role": "system", "content": policy},
            {
                "role": "user",
                "content": prompts.opening_text(seed, episode.id, rng.randint(60, 120), cpt),
            },
        ]
        for k, step in enumerate(episode.steps):
            call_id = f"call_{episode.id}_{k}"
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": step, "arguments": "{}"},
            }
            result = prompts.tool_result_text(seed, episode.id, k, step, rng.randint(60, 360), cpt)
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "name": step, "content": result}
            )
        messages.append({"role": "assistant", "content": "Done."})
        conversations[episode.id] = _requests(episode.id, messages, tools)
    return _split("retail", conversations, limit)


def interleave(conversations: Sequence[Sequence[Request]], n: int | None = None) -> list[Request]:
    """The requests round-robin across conversations (every first turn, then every second
    turn, ...; finished conversations drop out), the first ``n`` of them (``None``: all)."""
    out: list[Request] = []
    turn = 0
    while n is None or len(out) < n:
        row = [conv[turn] for conv in conversations if turn < len(conv)]
        if not row:
            break
        out.extend(row)
        turn += 1
    return out if n is None else out[:n]


def write_requests(conversations: Sequence[Sequence[Request]], path: Path) -> int:
    """Every request of ``conversations`` as a JSONL line (``{"messages", "tools"}``);
    returns how many."""
    lines = [json.dumps(r.to_json(), ensure_ascii=False) for conv in conversations for r in conv]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)


def prompt_ids(
    template: ChatTemplate, encode: Encode, request: Request, cache: dict[str, list[int]]
) -> list[int]:
    """The whole prompt of ``request`` as the engine sees it: rendered with the chat template,
    the generation prompt added (``cache`` memoizes piece encodings across calls)."""
    rendered = render_ids(
        template, encode, list(request.messages), tools=list(request.tools), cache=cache
    )
    return rendered.ids


def distinct_tokens(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens a prefix tree of ``sequences`` holds (shared prefixes counted once): what a cache
    needs to keep every one of them."""
    root: dict[int, Any] = {}
    total = 0
    for ids in sequences:
        node = root
        for token in ids:
            child = node.get(token)
            if child is None:
                child = node[token] = {}
                total += 1
            node = child
    return total


# --- replaying a workload on one engine --------------------------------------------------


def _summary(ttfts: list[float], prompt: int, cached: int) -> dict[str, Any]:
    ordered = sorted(ttfts)
    return {
        "ttft_p50_s": percentile(ordered, 50),
        "ttft_p95_s": percentile(ordered, 95),
        "ttft_p99_s": percentile(ordered, 99),
        "ttft_mean_s": statistics.fmean(ordered) if ordered else None,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_ratio": cached / prompt if prompt else None,
    }


async def replay(
    engine: Engine,
    prompts: Sequence[list[int]],
    conversations: Sequence[str],
    *,
    concurrency: int,
    before: Callable[[int], Awaitable[None]],
) -> list[dict[str, Any]]:
    """Send ``prompts`` in order, at most ``concurrency`` in flight, a conversation's request
    only once its previous one is answered; ``before(i)`` is awaited before sending request
    ``i``. One sample per request, in order."""
    samples: list[dict[str, Any]] = [{} for _ in prompts]
    slots = asyncio.Semaphore(concurrency)
    last: dict[str, asyncio.Task[None]] = {}

    async def one(i: int, ids: list[int], after: asyncio.Task[None] | None) -> None:
        try:
            if after is not None:
                await after
            t0 = time.perf_counter()
            done = await engine.generate(ids, max_tokens=1)
            samples[i] = {
                "ttft_s": done.ttft_s,
                "wall_s": time.perf_counter() - t0,
                "prompt_tokens": done.prompt_tokens,
                "cached_tokens": done.cached_tokens,
            }
        finally:
            slots.release()

    tasks = []
    for i, (ids, conv) in enumerate(zip(prompts, conversations, strict=True)):
        await before(i)
        await slots.acquire()
        task = asyncio.create_task(one(i, ids, last.get(conv)))
        last[conv] = task
        tasks.append(task)
    await asyncio.gather(*tasks)
    return samples


async def run_mode(
    mode: str,
    loaded: LoadedModel,
    prompts: Sequence[list[int]],
    conversations: Sequence[str],
    plan: Plan,
    *,
    small_cache_tokens: int,
    rewarm_every: int,
    concurrency: int = 1,
    kv_dir: Path | None = None,
) -> dict[str, Any]:
    """One mode on a fresh engine (with a disk tier at ``kv_dir`` when given): its warm-up (if
    any), then the requests (:func:`replay`). ``ready_s``: from building the engine to the end
    of its warm-up, what a restarted server takes to be ready."""
    small = "_small" in mode
    t_ready = time.perf_counter()
    engine = LocalEngine(
        loaded, max_cached_tokens=small_cache_tokens if small else None, kv_dir=kv_dir
    )
    try:
        warmer = Warmer(engine, renderer=ChatRenderer.for_engine(engine))
        warm: dict[str, Any] | None = None
        if mode not in ("cold", "disk_restart"):
            summary = await warmer.warm(plan, kind=PrefetchKind.STATIC)
            warm = summary.to_dict()
        ready_s = time.perf_counter() - t_ready
        keep = KeepWarm(plan, {"local": warmer}) if mode.startswith("keep") else None
        rewarms: list[dict[str, Any]] = []

        async def before(i: int) -> None:
            if keep is not None and i and i % rewarm_every == 0:
                for s in await keep.rewarm(kind=PrefetchKind.KEEP_WARM):
                    rewarms.append({"before_request": i, **s.to_dict()})

        samples = await replay(
            engine, prompts, conversations, concurrency=concurrency, before=before
        )
        stats = await engine.stats()
    finally:
        await engine.aclose()
    out = _summary(
        [s["ttft_s"] for s in samples],
        sum(s["prompt_tokens"] for s in samples),
        sum(s["cached_tokens"] for s in samples),
    )
    out.update(
        mode=mode,
        ready_s=ready_s,
        first_ttft_s=samples[0]["ttft_s"] if samples else None,
        disk_hit_tokens=stats.disk_hit_tokens,
        capacity_tokens=stats.capacity_tokens,
        evicted_tokens=stats.evicted_tokens,
        warmup=warm,
        rewarms=len(rewarms),
        rewarm_computed_tokens=sum(r["computed_tokens"] for r in rewarms),
        rewarm_seconds=sum(r["seconds"] for r in rewarms),
        rewarm_details=rewarms,
        samples=samples,
    )
    return out


async def prime(loaded: LoadedModel, prompts: Sequence[list[int]]) -> float:
    """Run ``prompts`` (untimed) on a scratch engine: the process's one-time torch costs (several
    seconds on the first prefill) are paid here, not by whichever mode runs first."""
    t0 = time.perf_counter()
    engine = LocalEngine(loaded)
    try:
        for ids in prompts:
            await engine.generate(ids, max_tokens=1)
    finally:
        await engine.aclose()
    return time.perf_counter() - t0


def plan_info(plan: Plan, renderer: ChatRenderer) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """Each plan prefix's figures for the report, and its ids as ``renderer`` renders them."""
    info, ids = [], []
    for p in plan.prefixes:
        rendered = (
            list(p.input_ids)
            if p.input_ids is not None
            else renderer.prefix_ids(p.messages or (), p.tools)
        )
        ids.append(rendered)
        info.append(
            {
                "tokens": len(rendered),
                "mined_tokens": p.tokens,
                "share": p.share,
                "count": p.count,
                "node": p.node,
                "messages": len(p.messages or ()),
            }
        )
    return info, ids


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def first_request(plan_ids: Sequence[Sequence[int]], ids: Sequence[int]) -> dict[str, int]:
    """What the plan holds of the first request: the longest plan prefix it starts with
    (``plan_prefix_tokens``) and the most leading tokens it shares with any plan prefix
    (``plan_match_tokens``: what a token-level radix cache holding the plan finds cached)."""
    return {
        "prompt_tokens": len(ids),
        "plan_prefix_tokens": max(
            (len(p) for p in plan_ids if _common(p, ids) == len(p)), default=0
        ),
        "plan_match_tokens": max((_common(p, ids) for p in plan_ids), default=0),
    }
