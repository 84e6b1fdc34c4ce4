"""Memory soak of the embedded engine: many agent-like requests under a cache budget.

Usage::

    python -m benchmarks.soak [--requests 10000] [--model tiny] [--max-cached-tokens 20000]
                              [--every 1000] [--concurrency 8] [--seed 0] [--json OUT]

The workload mimics agent steps: a few shared "system" stems, each request a stem plus a random
tail; per request, with fixed probabilities, a speculative prefill (sometimes aborted mid-way,
sometimes abandoned as a losing branch), a live generate, or a streamed generate. Requests run
``--concurrency`` at a time so that preemption, promotion and aborts happen. Every ``--every``
requests it prints resident memory (VmRSS), the cache size and the request counters, and
checks the cache's integrity. RSS should level off once the cache budget is full: the last
report's RSS minus the first is the growth to watch.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from agentwarm.engines.base import Priority
from agentwarm.engines.local import LocalEngine
from agentwarm.errors import RequestAborted

__all__ = ("Report", "main", "rss_mib", "soak")


@dataclass(frozen=True, slots=True)
class Report:
    requests: int
    rss_mib: float
    cached_tokens: int
    evicted_tokens: int
    hit_tokens: int
    computed_tokens: int
    aborted: int
    elapsed_s: float


def rss_mib() -> float:
    """Resident set size of this process in MiB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _one(engine: LocalEngine, rng: random.Random, stems: list[list[int]]) -> None:
    ids = [*rng.choice(stems), *(rng.randrange(256) for _ in range(rng.randrange(4, 48)))]
    ns = rng.choice(["", "", "", "tenant-b"])
    roll = rng.random()
    if roll < 0.35:
        rid = f"{rng.getrandbits(64):016x}"
        task = asyncio.create_task(engine.prefill(ids, rid=rid, namespace=ns))
        if rng.random() < 0.2:
            await asyncio.sleep(0)
            await engine.abort(rid)
        await task
        if rng.random() < 0.5:
            await engine.abort(rid)  # a losing branch: drop its pin
    elif roll < 0.85:
        await engine.generate(ids, max_tokens=rng.randrange(1, 4), namespace=ns)
    else:
        rid = f"{rng.getrandbits(64):016x}"
        try:
            async for chunk in engine.generate_stream(ids, rid=rid, max_tokens=3, namespace=ns):
                if chunk.completion is None and rng.random() < 0.1:
                    await engine.abort(rid)
        except RequestAborted:
            pass


async def soak(
    requests: int,
    *,
    model: str = "tiny",
    max_cached_tokens: int = 20_000,
    every: int = 1000,
    concurrency: int = 8,
    seed: int = 0,
) -> list[Report]:
    """Run the soak; return one report per ``every`` requests (printed as they come)."""
    rng = random.Random(seed)
    reports: list[Report] = []
    async with LocalEngine(
        model, max_cached_tokens=max_cached_tokens, chunk_size=64, pin_ttl_s=2.0, seed=seed
    ) as engine:
        stems = [[rng.randrange(256) for _ in range(rng.randrange(64, 256))] for _ in range(12)]
        for stem in stems[:4]:
            await engine.prefill(stem, priority=Priority.SPECULATIVE)
        t0 = time.perf_counter()
        done = 0
        print(
            f"{'requests':>9} {'RSS MiB':>9} {'cached':>7} {'evicted':>9} {'hit':>9} "
            f"{'computed':>9} {'aborted':>8} {'elapsed s':>10}"
        )
        while done < requests:
            batch = min(concurrency, requests - done)
            await asyncio.gather(*(_one(engine, rng, stems) for _ in range(batch)))
            before, done = done, done + batch
            if done // every != before // every or done == requests:
                gc.collect()
                await engine.check_integrity()
                stats = await engine.stats()
                report = Report(
                    requests=done,
                    rss_mib=rss_mib(),
                    cached_tokens=stats.cached_tokens,
                    evicted_tokens=stats.evicted_tokens,
                    hit_tokens=stats.hit_tokens,
                    computed_tokens=stats.computed_tokens,
                    aborted=stats.aborted,
                    elapsed_s=time.perf_counter() - t0,
                )
                reports.append(report)
                print(
                    f"{report.requests:>9} {report.rss_mib:>9.1f} {report.cached_tokens:>7} "
                    f"{report.evicted_tokens:>9} {report.hit_tokens:>9} "
                    f"{report.computed_tokens:>9} {report.aborted:>8} {report.elapsed_s:>10.1f}",
                    flush=True,
                )
                assert stats.cached_tokens <= max_cached_tokens
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--max-cached-tokens", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="also write the reports as JSON")
    args = parser.parse_args(argv)
    reports = asyncio.run(
        soak(
            args.requests,
            model=args.model,
            max_cached_tokens=args.max_cached_tokens,
            every=args.every,
            concurrency=args.concurrency,
            seed=args.seed,
        )
    )
    first, last = reports[0], reports[-1]
    print(
        f"RSS {first.rss_mib:.1f} MiB after {first.requests} requests, {last.rss_mib:.1f} MiB "
        f"after {last.requests}: growth {last.rss_mib - first.rss_mib:+.1f} MiB"
    )
    full = [r for r in reports if r.evicted_tokens > 0]
    if full:
        print(
            f"once the cache budget was full (request {full[0].requests}): RSS "
            f"{full[0].rss_mib:.1f} -> {last.rss_mib:.1f} MiB "
            f"({last.rss_mib - full[0].rss_mib:+.1f} MiB over {last.requests - full[0].requests} "
            "requests)"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([asdict(r) for r in reports], fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
