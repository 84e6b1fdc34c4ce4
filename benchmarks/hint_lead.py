"""The lead a mid-decode hint gains on real agent turns (issue 15).

Usage::

    python -m benchmarks.hint_lead --conversations FILE [--decode-ms 25] [--tool-ms 0]
                                   [--limit N] [--concurrency N] [--json]

Each conversation of ``FILE`` (JSON lines with OpenAI ``"messages"``, as
``agentwarm bench --conversations`` reads them) is run through the runtime as a ReAct-shaped
workflow: one node per step name of the file (each tool called, ``respond`` for a text answer)
plus an entry node, each declaring every step and ``END`` as successors. A node is the agent
after its step: it adds the real messages of that step (the assistant turn, the tool results
and user turns that followed), waits ``--tool-ms``, then calls the LLM, which streams the
*recorded next assistant turn* as Qwen2.5's chat template renders it (its text, or
``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``), tokenized with Qwen2.5's
tokenizer and decoded at ``--decode-ms`` per token; the node returns that turn's step. The
runtime's :class:`~agentwarm.runtime.prefetch.scanner.HintScanner` reads the stream and records
the hint on the step (``hint_node``, ``hint_lead_s``: the step's end minus the hint).

Reported per turn kind (``tool_call``, ``text``): the LLM steps, those with a hint, the right
hints (the hint is the step that followed), and over the hinted steps the lead in ms, in
tokens (tokens decoded after the one that completed the hint) and as a share of the step's
decode time (lead / time from the call to its last token). A measurement, not a test: the
figures depend on ``--decode-ms`` and on how busy the machine is (concurrent runs share one
event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.bench.conversations import (
    Conversation,
    add_message,
    load_conversations,
    shared_policy,
    step_of,
    step_turns,
)
from agentwarm.chat import QWEN2_5, Message
from agentwarm.engines.base import Completion, GenerateParams, StreamChunk
from agentwarm.engines.tokenizers import PRESET_TOKENIZERS, load_tokenizer
from agentwarm.errors import ConfigError
from agentwarm.runtime import RunResult, summarize
from agentwarm.runtime.prefetch.hints import scanner_for
from agentwarm.runtime.workflow import Workflow
from agentwarm.stats.definitions import percentile

__all__ = ("StreamedTurn", "TurnEngine", "main", "measure", "rendered_turn")

ENTRY = "opening_turn"
KINDS = ("tool_call", "text")
_ASSISTANT = "<|im_start|>assistant\n"
_END_TURN = "<|im_end|>"
_KEY = "hint_lead"
#: The runs' summary keys the report carries.
_RUN_KEYS = (
    "steps",
    "branch_steps",
    "branch_hits",
    "branch_hit_rate",
    "acceptance_ratio",
    "short_hits",
    "miss_reasons",
)


@dataclass(slots=True)
class StreamedTurn:
    """One LLM call of a node: the text to stream, then what the engine measured."""

    text: str
    chunks: list[str] = field(default_factory=list)
    decode_s: float = 0.0


_TURN: contextvars.ContextVar[StreamedTurn | None] = contextvars.ContextVar(
    "hint_lead_turn", default=None
)


def rendered_turn(message: Message) -> str:
    """An assistant turn as Qwen2.5's chat template renders it, without the role header and
    the end-of-turn token (what the model decodes)."""
    text = QWEN2_5.render([message], add_generation_prompt=False)
    body = text[text.rindex(_ASSISTANT) + len(_ASSISTANT) :]
    return body[: body.rindex(_END_TURN)] if _END_TURN in body else body


class TurnEngine(FakeEngine):
    """A FakeEngine with Qwen2.5's tokenizer whose live calls stream the text the calling node
    set (:data:`_TURN`), one token per ``decode_s``; prefills cost nothing."""

    def __init__(self, decode_s: float) -> None:
        super().__init__(seconds_per_token=0, seconds_per_output_token=0, max_context=1 << 24)
        tokenizer = load_tokenizer(PRESET_TOKENIZERS["tiny"])
        assert tokenizer is not None
        self.tokenizer = tokenizer
        self.decode_s = decode_s

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        async for chunk in self.stream_with(ids, params):
            if chunk.completion is not None:
                return chunk.completion
        raise AssertionError("unreachable: the stream ends with its completion")

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        turn = _TURN.get()
        if turn is None:
            raise ConfigError("TurnEngine streams only the turns hint_lead's nodes set")
        out = self.encode(turn.text)
        loop = asyncio.get_running_loop()
        start = due = loop.time()
        shown = ""
        ttft = 0.0
        for i in range(len(out)):
            due += self.decode_s
            await asyncio.sleep(max(0.0, due - loop.time()))
            if i == 0:
                ttft = loop.time() - start
            text = self.decode(out[: i + 1])
            piece = "" if text.endswith("\ufffd") else text[len(shown) :]
            shown += piece
            turn.chunks.append(piece)
            yield StreamChunk((out[i],), piece)
        turn.decode_s = loop.time() - start
        yield StreamChunk(
            (),
            "",
            Completion(
                text=turn.text,
                token_ids=tuple(out),
                prompt_tokens=len(ids),
                cached_tokens=0,
                ttft_s=ttft,
                finish_reason="stop",
                rid=params.rid,
                e2e_s=turn.decode_s,
            ),
        )


async def _agent(ctx: Context) -> str:
    """Add this step's real messages, then stream the recorded next assistant turn."""
    script: dict[str, Any] = ctx.state[_KEY]
    turns: list[tuple[Message, ...]] = script["turns"]
    k = len(ctx.path) - 1
    for message in turns[k]:
        add_message(ctx, message)
    if k + 1 >= len(turns):
        return END
    if script["tool_s"] > 0 and k > 0:
        await asyncio.sleep(script["tool_s"])
    nxt = turns[k + 1][0]
    turn = StreamedTurn(rendered_turn(nxt))
    script["streams"][k] = turn
    token = _TURN.set(turn)
    try:
        await ctx.llm(record=False, max_tokens=4096)
    finally:
        _TURN.reset(token)
    return step_of(nxt)


def build_workflow(conversations: Sequence[Conversation]) -> Workflow:
    """The ReAct-shaped replay workflow of the module docstring."""
    steps = list(dict.fromkeys(s for c in conversations for s in c.episode.steps))
    if ENTRY in steps:
        raise ConfigError(f"a step is named {ENTRY!r}, the benchmark's entry node")
    system, _ = shared_policy(conversations)
    longest = max(len(c.episode.steps) for c in conversations)
    specs = [
        node(name=n, system=system, next=[*steps, END], entry=n == ENTRY)(_agent)
        for n in (ENTRY, *steps)
    ]
    return WorkflowGraph("hint_lead").add(*specs).compile(max_steps=longest + 2)


def _tokens_after_hint(wf: Workflow, name: str, chunks: Sequence[str]) -> tuple[str, int] | None:
    """The hint the runtime's scanner reads from ``chunks`` and how many tokens followed it."""
    scanner = scanner_for(wf.nodes[name], wf.successors(name), lambda _: True)
    if scanner is None:
        return None
    for i, piece in enumerate(chunks):
        if (hint := scanner.feed(piece)) is not None:
            return hint, len(chunks) - i - 1
    return None


def _dist(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "mean": statistics.fmean(values) if values else None,
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
    }


async def measure(
    conversations: Sequence[Conversation],
    *,
    decode_ms: float = 25.0,
    tool_ms: float = 0.0,
    concurrency: int = 16,
) -> dict[str, Any]:
    """Run ``conversations`` and report the hints per turn kind (module docstring)."""
    wf = build_workflow(conversations)
    engine = TurnEngine(decode_ms / 1000)
    session = wf.session()
    gate = asyncio.Semaphore(concurrency)
    rows: dict[str, dict[str, list[float]]] = {
        k: {"steps": [], "hinted": [], "right": [], "ms": [], "tokens": [], "share": []}
        for k in KINDS
    }
    mismatches = 0
    results: list[RunResult] = []

    async def one(conv: Conversation) -> None:
        nonlocal mismatches
        streams: dict[int, StreamedTurn] = {}
        script = {"turns": step_turns(conv.messages), "tool_s": tool_ms / 1000, "streams": streams}
        async with gate:
            result = await session.run(
                "", engine=engine, policy=PrefetchPolicy(), state={_KEY: script}
            )
        results.append(result)
        for k, step in enumerate(result.steps):
            turn = streams.get(k)
            if turn is None:
                continue
            kind = "tool_call" if "<tool_call>" in turn.text else "text"
            row = rows[kind]
            row["steps"].append(1)
            if step.hint_node is None or step.hint_lead_s is None:
                continue
            row["hinted"].append(1)
            row["right"].append(1 if step.next[:1] == [step.hint_node] else 0)
            row["ms"].append(step.hint_lead_s * 1000)
            if turn.decode_s > 0:
                row["share"].append(step.hint_lead_s / turn.decode_s)
            replay = _tokens_after_hint(wf, step.node, turn.chunks)
            if replay is None or replay[0] != step.hint_node:
                mismatches += 1
            else:
                row["tokens"].append(replay[1])

    started = time.perf_counter()
    try:
        await asyncio.gather(*(one(c) for c in conversations))
    finally:
        await engine.aclose()
    report: dict[str, Any] = {
        "conversations": len(conversations),
        "decode_ms": decode_ms,
        "tool_ms": tool_ms,
        "wall_s": round(time.perf_counter() - started, 2),
        "replay_mismatches": mismatches,
        # The runs' own figures (issue 27): branch hits and why the other steps missed.
        "runs": {k: summarize(results)[k] for k in _RUN_KEYS} if results else None,
    }
    for kind, row in rows.items():
        report[kind] = {
            "steps": len(row["steps"]),
            "hinted": len(row["hinted"]),
            "right": int(sum(row["right"])),
            "lead_ms": _dist(row["ms"]),
            "lead_tokens": _dist(row["tokens"]),
            "lead_share": _dist(row["share"]),
        }
    return report


def _fmt(d: dict[str, float | None], spec: str) -> str:
    return " / ".join("-" if d[k] is None else format(d[k], spec) for k in ("mean", "p50", "p95"))


def print_report(report: dict[str, Any], out: Any = sys.stdout) -> None:
    print(
        f"{report['conversations']} conversations, {report['decode_ms']:g} ms/token decode, "
        f"{report['tool_ms']:g} ms tools, {report['wall_s']:g} s",
        file=out,
    )
    print(
        f"{'turn kind':<10} {'steps':>6} {'hinted':>7} {'right':>6}  "
        f"{'lead ms mean/p50/p95':>22}  {'tokens mean/p50/p95':>20}  share mean/p50/p95",
        file=out,
    )
    for kind in KINDS:
        r = report[kind]
        print(
            f"{kind:<10} {r['steps']:>6} {r['hinted']:>7} {r['right']:>6}  "
            f"{_fmt(r['lead_ms'], '.0f'):>22}  {_fmt(r['lead_tokens'], '.1f'):>20}  "
            f"{_fmt(r['lead_share'], '.2f')}",
            file=out,
        )
    runs = report.get("runs")
    if runs:
        shown = ", ".join(f"{k} {n}" for k, n in runs["miss_reasons"].items() if n) or "none"
        print(
            f"runs: branch hit {runs['branch_hits']}/{runs['branch_steps']}, acceptance "
            f"{runs['acceptance_ratio']}; miss reasons: {shown} ({runs['short_hits']} short hits)",
            file=out,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hint_lead")
    parser.add_argument("--conversations", type=Path, required=True)
    parser.add_argument("--decode-ms", type=float, default=25.0, help="per output token")
    parser.add_argument("--tool-ms", type=float, default=0.0, help="before each LLM call")
    parser.add_argument("--limit", type=int, default=None, help="first N conversations")
    parser.add_argument("--concurrency", type=int, default=16, help="runs at once")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.decode_ms < 0 or args.tool_ms < 0 or args.concurrency < 1:
        parser.error("--decode-ms and --tool-ms must be >= 0 and --concurrency >= 1")
    conversations = load_conversations(args.conversations)[: args.limit]
    report = asyncio.run(
        measure(
            conversations,
            decode_ms=args.decode_ms,
            tool_ms=args.tool_ms,
            concurrency=args.concurrency,
        )
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
