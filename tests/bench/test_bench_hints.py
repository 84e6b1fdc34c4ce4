"""Mid-decode hints in the benchmark: the metered engine streams, the report counts the hints."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind
from rich.console import Console

from agentwarm.bench import BenchConfig, MeteredEngine, PromptSizes, run_bench
from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    StreamChunk,
)
from agentwarm.engines.fake import FakeEngine
from agentwarm.errors import RequestAborted

SIZES = PromptSizes(
    policy=120,
    instructions=(20, 30),
    schema=(20, 30),
    opening=(10, 20),
    result=(10, 20),
    output_tokens=4,
)
THINK_S = 0.002
#: What the engine below puts before every streamed reply: it names the step "answer".
NAMED = "answer "


class NamingEngine(Engine):
    """A fake engine whose streamed replies start with :data:`NAMED` (put before the first
    decoded token, so the hint arrives with it); other calls are the fake's own."""

    provider_name = "test"

    def __init__(self) -> None:
        self.inner = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-3)
        self.model_name = self.inner.model_name
        self.chat_template = self.inner.chat_template

    span_kind = SpanKind.INTERNAL

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        return await self.inner.prefill_with(ids, params)

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        return await self.inner.generate_with(ids, params)

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        first = True
        async for chunk in self.inner.stream_with(ids, params):
            if first and chunk.text:
                chunk, first = replace(chunk, text=NAMED + chunk.text), False
            yield chunk

    async def abort(self, rid: str) -> None:
        await self.inner.abort(rid)

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(ids)

    async def stats(self) -> EngineStats:
        return await self.inner.stats()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_metered_engine_streams_chunk_by_chunk_and_records_as_generate() -> None:
    inner = FakeEngine(seconds_per_token=0.0, seconds_per_output_token=0.0)
    metered = MeteredEngine(inner)
    ids = metered.encode("hello there")
    chunks = [c async for c in metered.generate_stream(ids, max_tokens=5, namespace="n")]
    assert [len(c.token_ids) for c in chunks] == [1, 1, 1, 1, 1, 0]
    done = chunks[-1].completion
    assert done is not None and all(c.completion is None for c in chunks[:-1])
    assert "".join(c.text for c in chunks) == done.text
    streamed = list(metered.records)
    again = await metered.generate(ids, max_tokens=5, namespace="n")
    assert again.text == done.text
    assert len(metered.records) == 2
    (rec,) = streamed
    assert (rec.kind, rec.status, rec.rid) == ("generate", "done", done.rid)
    assert (rec.prompt_tokens, rec.cached_tokens, rec.computed_tokens) == (
        done.prompt_tokens,
        done.cached_tokens,
        done.computed_tokens,
    )
    assert rec.prompt_tokens == len(ids)
    await metered.aclose()


async def test_metered_stream_isolates_and_records_an_abort() -> None:
    inner = FakeEngine(seconds_per_token=0.0, seconds_per_output_token=1e-3)
    metered = MeteredEngine(inner, isolate=True)
    ids = metered.encode("hello")
    stream = metered.generate_stream(ids, max_tokens=50, rid="r1", namespace="n")
    with pytest.raises(RequestAborted):
        async for _chunk in stream:
            await metered.abort("r1")
    assert [r.namespace.startswith("n-") for r in inner.log] == [True]
    assert [(r.kind, r.status, r.prompt_tokens) for r in metered.records] == [
        ("generate", "aborted", len(ids))
    ]
    await metered.aclose()


def _config(tmp_path: Path) -> BenchConfig:
    f = tmp_path / "episodes.jsonl"
    f.write_text("".join(json.dumps({"steps": ["search", "answer"]}) + "\n" for _ in range(3)))
    return BenchConfig(
        trajectories=f,
        test_fraction=1.0,
        think=f"const:{THINK_S}",
        sizes=SIZES,
        pretrain=False,
        modes=("reactive", "agentwarm"),
    )


async def test_bench_reports_the_mid_decode_hints_per_mode(tmp_path: Path) -> None:
    report = await run_bench(_config(tmp_path), NamingEngine)
    out = json.loads(json.dumps(report.to_dict()))
    a, r = out["modes"]["agentwarm"], out["modes"]["reactive"]
    # Each episode: entry -> search -> answer -> END, three steps, each reply naming "answer"
    # (a successor of every node): right only at "search".
    assert a["steps"] == 9
    assert (a["hint_steps"], a["hints_right"]) == (9, 3)
    # The hint comes with the first token; the step still decodes, adds its tool result and
    # thinks (slept in agentwarm mode) before it ends.
    assert a["hint_lead_p50_s"] >= THINK_S
    assert a["hint_lead_mean_s"] >= THINK_S
    steps = [s for res in report.runs["agentwarm"].results for s in res.steps]
    leads = [s.hint_lead_s for s in steps if s.hint_lead_s is not None]
    assert a["hint_lead_mean_s"] == sum(leads) / len(leads)
    # The gain is only up to the end of the LLM call the hint was read from: less than the
    # lead by at least the step's think time after it.
    gains = [s.hint_gain_s for s in steps if s.hint_gain_s is not None]
    assert len(gains) == len(leads) == 9
    assert a["hint_gain_mean_s"] == sum(gains) / len(gains)
    assert all(
        0 <= s.hint_gain_s <= s.hint_lead_s - THINK_S for s in steps if s.hint_gain_s is not None
    )
    assert (r["hint_gain_mean_s"], r["hint_gain_p50_s"]) == (None, None)
    assert all(s.hint_at_s is not None and s.hint_at_s < s.duration_s for s in steps)
    # Reactive mode does not prefetch, so it reads no hints.
    assert (r["hint_steps"], r["hints_right"], r["hint_lead_mean_s"]) == (0, 0, None)
    console = Console(file=io.StringIO(), width=160)
    report.render(console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    row = next(line for line in text.splitlines() if "mid-decode hints (right)" in line)
    assert [cell.strip() for cell in row.split("│")[1:4]] == [
        "mid-decode hints (right)",
        "0 (0)",
        "9 (3)",
    ]
    assert "hint lead mean ms" in text and "hint lead p50 ms" in text
