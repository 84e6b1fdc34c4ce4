"""The embedded engine's disk KV tier (issue 25): the restart check and the breakeven table.
A measurement, not a test.

Usage::

    python -m benchmarks.kv_tier [--models small,1b] [--tokens 3000]
        [--lengths 64,256,1024,3000] [--repeat 3] [--json]

Per model (a :class:`~agentwarm.engines.local.LocalEngine` preset, random weights, on CPU):

* **restart**: a ``--tokens``-token prompt (random ids of the vocabulary) is served by a fresh
  engine with nothing cached (cold), then by an engine with a ``kv_dir`` that is closed (its
  cache spilled to the directory) and replaced by a new engine on the same directory, as a
  restarted ``agentwarm serve --kv-dir D`` would be: that engine's first request is served
  from disk. Reported: both TTFTs (median of ``--repeat``), their ratio (issue 25's goal:
  <= 0.15), the tokens the disk served, and whether the greedy output (16 tokens) is identical
  to the cold one (it must be).
* **breakeven**: bytes of KV per token; the tier's read throughput (cold: each stored file's
  page cache dropped with ``posix_fadvise(DONTNEED)`` first, and warm: from the page cache);
  the engine's cold prefill throughput; then, for each ``--lengths`` prefix length L, the TTFT
  of an L+1-token prompt cold and from disk, and the shortest measured L from which loading
  wins. Loading wins per token when bytes_per_token / read throughput < 1 / prefill
  throughput; the measured lengths add the fixed costs (a file per block, the last token's
  forward pass).

Every engine of one model shares its loaded weights; torch's one-time costs are paid by an
untimed request first. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentwarm.engines.local.engine import LocalEngine
from agentwarm.engines.local.model import LoadedModel, load_model

GOAL_RESTART_RATIO = 0.15
NEW_TOKENS = 16


def _progress(line: str) -> None:
    print(f"[kv_tier] {line}", file=sys.stderr, flush=True)


def _ids(n: int, vocab: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(10, min(vocab, 40_000)) for _ in range(n)]


def _drop_page_cache(root: Path) -> int:
    """Ask the kernel to drop the page cache of every file under ``root``; returns the files."""
    n = 0
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            n += 1
    return n


async def _first(engine: LocalEngine, ids: list[int], new_tokens: int = 1) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = await engine.generate(ids, max_tokens=new_tokens)
    return out, time.perf_counter() - t0


async def _fill(loaded: LoadedModel, kv_dir: Path, ids: list[int]) -> None:
    """An engine on ``kv_dir`` computes ``ids`` and stops cleanly (its cache spills)."""
    engine = LocalEngine(loaded, kv_dir=kv_dir)
    try:
        await engine.prefill(ids)
    finally:
        await engine.aclose()


async def restart(loaded: LoadedModel, tokens: int, repeat: int, seed: int) -> dict[str, Any]:
    cold_s, disk_s, disk_tokens, ready_s = [], [], [], []
    identical = True
    vocab = loaded.config.vocab_size
    for r in range(repeat):
        ids = _ids(tokens, vocab, seed + r)
        cold = LocalEngine(loaded)
        try:
            cold_out = await cold.generate(ids, max_tokens=NEW_TOKENS)
        finally:
            await cold.aclose()
        with tempfile.TemporaryDirectory(prefix="kv-tier-bench-") as tmp:
            await _fill(loaded, Path(tmp), ids)
            _drop_page_cache(Path(tmp))
            t0 = time.perf_counter()
            engine = LocalEngine(loaded, kv_dir=tmp)
            ready_s.append(time.perf_counter() - t0)
            try:
                out = await engine.generate(ids, max_tokens=NEW_TOKENS)
            finally:
                await engine.aclose()
        cold_s.append(cold_out.ttft_s)
        disk_s.append(out.ttft_s)
        disk_tokens.append(out.cached_tokens_by_source.get("disk", 0))
        identical = identical and out.token_ids == cold_out.token_ids
        _progress(f"  restart {r}: cold {cold_out.ttft_s:.3f} s, disk {out.ttft_s:.3f} s")
    cold_m, disk_m = statistics.median(cold_s), statistics.median(disk_s)
    return {
        "prompt_tokens": tokens,
        "cold_ttft_s": cold_m,
        "disk_ttft_s": disk_m,
        "disk_over_cold": disk_m / cold_m,
        "goal": GOAL_RESTART_RATIO,
        "met": disk_m / cold_m <= GOAL_RESTART_RATIO,
        "disk_tokens": statistics.median(disk_tokens),
        "engine_start_s": statistics.median(ready_s),
        "greedy_identical": identical,
        "new_tokens": NEW_TOKENS,
    }


async def breakeven(
    loaded: LoadedModel, lengths: Sequence[int], repeat: int, seed: int
) -> dict[str, Any]:
    vocab = loaded.config.vocab_size
    probe = LocalEngine(loaded, max_cached_tokens=0)
    bpt = probe.runner.kv_bytes_per_token
    await probe.aclose()
    rows = []
    for length in lengths:
        cold_s: list[float] = []
        disk_s: list[float] = []
        read_cold: list[float] = []
        read_warm: list[float] = []
        for r in range(repeat):
            ids = _ids(length + 1, vocab, seed + 1000 * length + r)
            cold = LocalEngine(loaded)
            try:
                cold_s.append((await cold.generate(ids, max_tokens=1)).ttft_s)
            finally:
                await cold.aclose()
            with tempfile.TemporaryDirectory(prefix="kv-tier-bench-") as tmp:
                await _fill(loaded, Path(tmp), ids)
                engine = LocalEngine(loaded, kv_dir=tmp)
                try:
                    assert engine.disk is not None
                    tier = engine.disk.tier
                    stop = tier.stored_prefix("", ids)
                    if stop > 0:
                        for bucket in (read_cold, read_warm):
                            if bucket is read_cold:
                                _drop_page_cache(Path(tmp))
                            t0 = time.perf_counter()
                            kv = tier.read("", ids, 0, stop)
                            dt = time.perf_counter() - t0
                            if kv is not None:
                                bucket.append(stop * bpt / dt)
                    _drop_page_cache(Path(tmp))
                    disk_s.append((await engine.generate(ids, max_tokens=1)).ttft_s)
                finally:
                    await engine.aclose()
        row: dict[str, Any] = {
            "tokens": length,
            "cold_ttft_s": statistics.median(cold_s),
            "disk_ttft_s": statistics.median(disk_s),
            "read_cold_bytes_per_s": statistics.median(read_cold) if read_cold else None,
            "read_warm_bytes_per_s": statistics.median(read_warm) if read_warm else None,
        }
        row["loading_wins"] = row["disk_ttft_s"] < row["cold_ttft_s"]
        rows.append(row)
        _progress(
            f"  {length} tokens: cold {row['cold_ttft_s']:.3f} s, disk {row['disk_ttft_s']:.3f} s"
        )
    longest = rows[-1]
    prefill_tps = longest["tokens"] / longest["cold_ttft_s"]
    reads = [r["read_cold_bytes_per_s"] for r in rows if r["read_cold_bytes_per_s"]]
    read_bps = statistics.median(reads) if reads else None
    wins = [r["tokens"] for r in rows if r["loading_wins"]]
    return {
        "kv_bytes_per_token": bpt,
        "prefill_tokens_per_s": prefill_tps,
        "read_bytes_per_s": read_bps,
        "breakeven_read_bytes_per_s": bpt * prefill_tps,
        "loading_wins_from_tokens": min(wins) if wins else None,
        "rows": rows,
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"models": {}}
    for name in args.models:
        _progress(f"loading {name}")
        loaded = load_model(name, device="cpu", seed=0)
        warm = LocalEngine(loaded)
        try:
            await warm.generate(_ids(64, loaded.config.vocab_size, 7), max_tokens=1)
        finally:
            await warm.aclose()
        _progress(f"{name}: restart ({args.tokens} tokens)")
        res = {"restart": await restart(loaded, args.tokens, args.repeat, args.seed)}
        _progress(f"{name}: breakeven")
        res["breakeven"] = await breakeven(loaded, args.lengths, args.repeat, args.seed)
        out["models"][name] = res
    return out


def _rate(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e6:,.0f} MB/s"


def render(report: dict[str, Any]) -> str:
    lines = [
        "| model | KV bytes/token | prefill tok/s | breakeven read | tier read (cold) | "
        "loading wins from | restart TTFT cold | from disk | disk/cold | greedy identical |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, m in report["models"].items():
        b, r = m["breakeven"], m["restart"]
        wins = b["loading_wins_from_tokens"]
        lines.append(
            f"| {name} | {b['kv_bytes_per_token']:,} | {b['prefill_tokens_per_s']:.0f} | "
            f"{_rate(b['breakeven_read_bytes_per_s'])} | {_rate(b['read_bytes_per_s'])} | "
            f"{'-' if wins is None else wins} tokens | {r['cold_ttft_s']:.3f} s | "
            f"{r['disk_ttft_s']:.3f} s | {r['disk_over_cold']:.3f} "
            f"({'met' if r['met'] else 'MISSED'} <= {r['goal']}) | {r['greedy_identical']} |"
        )
    lines += ["", "| model | prefix tokens | TTFT cold | TTFT from disk | loading wins |"]
    lines.append("|---|---:|---:|---:|---|")
    for name, m in report["models"].items():
        for row in m["breakeven"]["rows"]:
            lines.append(
                f"| {name} | {row['tokens']} | {row['cold_ttft_s']:.3f} s | "
                f"{row['disk_ttft_s']:.3f} s | {row['loading_wins']} |"
            )
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.kv_tier",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--models", type=lambda s: s.split(","), default=["small", "1b"])
    add("--tokens", type=int, default=3000, help="restart check: prompt tokens (3000)")
    add("--lengths", type=_ints, default=[64, 256, 1024, 3000], help="breakeven prefix lengths")
    add("--repeat", type=int, default=3, help="repeats per figure (median)")
    add("--seed", type=int, default=0)
    add("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.tokens < 1 or not args.lengths or min(args.lengths) < 1:
        parser.error("--repeat, --tokens and every --lengths value must be at least 1")
    report = asyncio.run(measure(args))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
