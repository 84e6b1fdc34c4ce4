"""Cold vs warm TTFT on a real vLLM server, and a live request behind a speculative prefill
(issue 24): a measurement, not a test.

Usage::

    python -m benchmarks.vllm_ttft --url http://127.0.0.1:8000 [--tokens 1500] [--repeat 3]
                                   [--spec-tokens 3000] [--chunk 512]

Per repeat, in a namespace of its own: the TTFT of a cold ``--tokens``-token prompt (random ids
of the model's vocabulary), then after a prefill of that prompt the TTFT of the same prompt
plus 8 new tokens (warm: served from vLLM's prefix cache, in whole blocks). Then the TTFT of a
40-token live request alone, and sent once the first chunk of a ``--spec-tokens``-token
speculative prefill has been sent: with ``--chunk`` (agentwarm's chunked speculation) and with
the prefill sent whole (``--chunk 0`` only measures the latter). Medians, in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys

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


async def behind_speculation(engine: VLLMEngine, spec_tokens: int) -> float:
    """TTFT of a live request sent just after a speculative prefill started."""
    spec = asyncio.create_task(engine.prefill(ids(spec_tokens), namespace=new_rid()))
    await asyncio.sleep(0.3)  # the prefill's first request is running (a measurement)
    live = await engine.generate(ids(40), max_tokens=2, namespace=new_rid())
    await spec
    return live.ttft_s


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--tokens", type=int, default=1_500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spec-tokens", type=int, default=3_000)
    parser.add_argument("--chunk", type=int, default=512)
    args = parser.parse_args(argv)
    result: dict[str, float] = {}
    engine = await VLLMEngine.from_url(args.url, wait_s=30, prefill_chunk_tokens=args.chunk or None)
    whole = await VLLMEngine.from_url(args.url, prefill_chunk_tokens=None)
    try:
        result.update(await cold_warm(engine, args.tokens, args.repeat))
        alone = [(await engine.generate(ids(40), max_tokens=2)).ttft_s for _ in range(3)]
        result["live_alone_ttft_s"] = statistics.median(alone)
        if args.chunk:
            chunked = await behind_speculation(engine, args.spec_tokens)
            result["live_behind_chunked_ttft_s"] = chunked
        result["live_behind_whole_ttft_s"] = await behind_speculation(whole, args.spec_tokens)
    finally:
        await engine.aclose()
        await whole.aclose()
    print(json.dumps({k: round(v, 3) for k, v in result.items()}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
