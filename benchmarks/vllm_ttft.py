"""Cold vs warm TTFT on a real vLLM server, and a live request behind a speculative prefill
(issue 24): a measurement, not a test.

Usage::

    python -m benchmarks.vllm_ttft --url http://127.0.0.1:8000 [--tokens 1500] [--repeat 3]
                                   [--spec-tokens 3000] [--chunk 512 | --chunk 128,256,512,1024]

Per repeat, in a namespace of its own: the TTFT of a cold ``--tokens``-token prompt (random ids
of the model's vocabulary), then after a prefill of that prompt the TTFT of the same prompt
plus 8 new tokens (warm: served from vLLM's prefix cache, in whole blocks); ``--repeat 0``
skips this part. Then the TTFT of a 40-token live request alone; the time of a
``--spec-tokens``-token speculative prefill sent whole with nothing else running
(``spec_alone_s``); and, for the prefill sent whole and for each ``--chunk`` size (agentwarm's
chunked speculation; several comma-separated sizes make a sweep), the TTFT of a live request
sent 0.3 s after the prefill started (in its first chunk: the live request waits out about a
whole chunk) and the prefill's total time. Medians, in seconds; ``live_over_spec_alone`` is the
live TTFT over ``spec_alone_s`` (issue 24's goal: <= 0.35).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from agentwarm.engines.base import new_rid
from agentwarm.engines.vllm import VLLMEngine


def ids(n: int) -> list[int]:
    rng = random.Random(new_rid())
    return [rng.randrange(200, 40_000) for _ in range(n)]


async def cold_warm(engine: VLLMEngine, tokens: int, repeat: int) -> dict[str, float]:
    cold, warm, cached = [], [], []
    for _ in range(repeat):
        ns, prompt = new_rid(), ids(tokens)
        cold.append((await engine.generate(prompt, max_tokens=1, namespace=ns)).ttft_s)
        ns = new_rid()
        await engine.prefill(prompt, namespace=ns)
        out = await engine.generate([*prompt, *ids(8)], max_tokens=1, namespace=ns)
        warm.append(out.ttft_s)
        cached.append(out.cached_tokens)
    return {
        "cold_ttft_s": statistics.median(cold),
        "warm_ttft_s": statistics.median(warm),
        "warm_over_cold": statistics.median(warm) / statistics.median(cold),
        "cached_tokens": statistics.median(cached),
    }


async def spec_alone(engine: VLLMEngine, spec_tokens: int) -> float:
    """Seconds a speculative prefill takes with nothing else running."""
    t0 = time.perf_counter()
    await engine.prefill(ids(spec_tokens), namespace=new_rid())
    return time.perf_counter() - t0


async def behind_speculation(engine: VLLMEngine, spec_tokens: int) -> tuple[float, float]:
    """TTFT of a live request sent just after a speculative prefill started, and the
    prefill's total time."""
    t0 = time.perf_counter()
    spec = asyncio.create_task(engine.prefill(ids(spec_tokens), namespace=new_rid()))
    await asyncio.sleep(0.3)  # the prefill's first request is running (a measurement)
    live = await engine.generate(ids(40), max_tokens=2, namespace=new_rid())
    await spec
    return live.ttft_s, time.perf_counter() - t0


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--tokens", type=int, default=1_500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spec-tokens", type=int, default=3_000)
    parser.add_argument("--chunk", default="512", help="chunk size(s), comma-separated; 0: none")
    args = parser.parse_args(argv)
    chunks = [int(c) for c in args.chunk.split(",") if int(c) > 0]
    result: dict[str, Any] = {}
    whole = await VLLMEngine.from_url(args.url, wait_s=30, prefill_chunk_tokens=None)
    try:
        if args.repeat > 0:
            result.update(await cold_warm(whole, args.tokens, args.repeat))
        alone = [(await whole.generate(ids(40), max_tokens=2)).ttft_s for _ in range(3)]
        result["live_alone_ttft_s"] = statistics.median(alone)
        result["spec_alone_s"] = await spec_alone(whole, args.spec_tokens)
        live, total = await behind_speculation(whole, args.spec_tokens)
        result["whole"] = {"live_ttft_s": live, "spec_total_s": total}
    finally:
        await whole.aclose()
    for chunk in chunks:
        engine = await VLLMEngine.from_url(args.url, prefill_chunk_tokens=chunk)
        try:
            live, total = await behind_speculation(engine, args.spec_tokens)
        finally:
            await engine.aclose()
        result[f"chunk_{chunk}"] = {"live_ttft_s": live, "spec_total_s": total}
    for row in result.values():
        if isinstance(row, dict):
            row["live_over_spec_alone"] = row["live_ttft_s"] / result["spec_alone_s"]
    print(json.dumps(_rounded(result), indent=2))


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(value, 3) if isinstance(value, float) else value


if __name__ == "__main__":
    asyncio.run(main())
