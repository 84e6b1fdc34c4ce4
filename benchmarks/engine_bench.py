"""Prefix caching on the embedded engine: cold vs warm TTFT, and prefill throughput.

Usage::

    python -m benchmarks.engine_bench [--model small] [--prefix 512 1024 2048] [--suffix 32]
                                      [--chunk-size 256] [--repeats 3] [--device cpu]
                                      [--json OUT]

For each prefix length L (random token ids, one fresh namespace per measurement so nothing is
shared by accident):

* cold TTFT: ``generate(prefix + suffix, max_tokens=1)`` on an empty cache;
* warm TTFT: ``prefill(prefix)`` first (as a prefetch would), then the same ``generate``; only
  the suffix (plus the radix lookup and the KV copy into the request) is computed;
* prefill throughput: ``prefill(prefix)`` tokens/s through the engine (chunked, last-position
  logits only) vs a plain ``model(input_ids)`` forward of the same model in this process, by
  wall clock and by process CPU time (the latter is steadier on a shared machine).

Each figure is the median of ``--repeats`` runs; engine and plain runs alternate so that load
from other processes hits both alike. Targets: warm/cold <= 0.1 at 2048 tokens, engine
throughput >= 0.9x plain.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# LocalEngine first: loading it sets OMP_WAIT_POLICY=PASSIVE (unless set), which OpenMP reads
# only when torch is first imported.
from agentwarm.engines.local import LocalEngine  # isort: skip
import torch

from agentwarm.engines.local.model import LoadedModel, load_model

__all__ = ("Row", "main", "run")


@dataclass(frozen=True, slots=True)
class Row:
    prefix_tokens: int
    suffix_tokens: int
    cold_ttft_s: float
    warm_ttft_s: float
    warm_cached_tokens: int
    engine_prefill_tok_s: float
    plain_forward_tok_s: float
    engine_prefill_cpu_tok_s: float
    plain_forward_cpu_tok_s: float

    @property
    def ttft_ratio(self) -> float:
        return self.warm_ttft_s / self.cold_ttft_s

    @property
    def throughput_ratio(self) -> float:
        return self.engine_prefill_tok_s / self.plain_forward_tok_s

    @property
    def cpu_throughput_ratio(self) -> float:
        return self.engine_prefill_cpu_tok_s / self.plain_forward_cpu_tok_s


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_forward_s(loaded: LoadedModel, ids: Sequence[int]) -> tuple[float, float]:
    """(wall, process CPU) seconds of one plain ``model(input_ids)`` forward."""
    device = loaded.device
    with torch.inference_mode():
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        out = loaded.model(input_ids=input_ids)
        _sync(device)
        elapsed = time.perf_counter() - t0, time.process_time() - c0
        del out
    return elapsed


async def run(
    loaded: LoadedModel,
    prefixes: Sequence[int],
    *,
    suffix: int = 32,
    chunk_size: int = 256,
    repeats: int = 3,
    seed: int = 0,
) -> list[Row]:
    """Measure every prefix length; see the module docstring for the protocol."""
    rng = random.Random(seed)
    vocab = min(int(loaded.config.vocab_size), 32_000)
    rows: list[Row] = []
    async with LocalEngine(loaded, chunk_size=chunk_size, pin_ttl_s=0.0) as engine:
        warmup = [rng.randrange(vocab) for _ in range(64)]
        await engine.generate(warmup, max_tokens=2, namespace="warmup")
        plain_forward_s(loaded, warmup)
        for length in prefixes:
            cold: list[float] = []
            warm: list[float] = []
            cached: list[int] = []
            engine_tps: list[float] = []
            plain_tps: list[float] = []
            engine_cpu: list[float] = []
            plain_cpu: list[float] = []
            for rep in range(repeats):
                prefix = [rng.randrange(vocab) for _ in range(length)]
                ids = prefix + [rng.randrange(vocab) for _ in range(suffix)]
                tag = f"{length}-{rep}"
                out = await engine.generate(ids, max_tokens=1, namespace=f"cold-{tag}")
                cold.append(out.ttft_s)

                t0, c0 = time.perf_counter(), time.process_time()
                pre = await engine.prefill(prefix, namespace=f"warm-{tag}")
                engine_tps.append(pre.computed_tokens / (time.perf_counter() - t0))
                engine_cpu.append(pre.computed_tokens / (time.process_time() - c0))
                out = await engine.generate(ids, max_tokens=1, namespace=f"warm-{tag}")
                warm.append(out.ttft_s)
                cached.append(out.cached_tokens)

                wall, cpu = plain_forward_s(loaded, prefix)
                plain_tps.append(length / wall)
                plain_cpu.append(length / cpu)
                await engine.flush_cache()
            rows.append(
                Row(
                    prefix_tokens=length,
                    suffix_tokens=suffix,
                    cold_ttft_s=statistics.median(cold),
                    warm_ttft_s=statistics.median(warm),
                    warm_cached_tokens=min(cached),
                    engine_prefill_tok_s=statistics.median(engine_tps),
                    plain_forward_tok_s=statistics.median(plain_tps),
                    engine_prefill_cpu_tok_s=statistics.median(engine_cpu),
                    plain_forward_cpu_tok_s=statistics.median(plain_cpu),
                )
            )
    return rows


def _print(rows: Sequence[Row], header: str) -> None:
    print(header)
    print(
        f"{'prefix':>7} {'cold TTFT s':>12} {'warm TTFT s':>12} {'warm/cold':>10} "
        f"{'cached':>7} {'engine tok/s':>13} {'plain tok/s':>12} {'engine/plain':>13} "
        f"{'(CPU-time)':>10}"
    )
    for r in rows:
        print(
            f"{r.prefix_tokens:>7} {r.cold_ttft_s:>12.4f} {r.warm_ttft_s:>12.4f} "
            f"{r.ttft_ratio:>10.3f} {r.warm_cached_tokens:>7} {r.engine_prefill_tok_s:>13.1f} "
            f"{r.plain_forward_tok_s:>12.1f} {r.throughput_ratio:>13.3f} "
            f"{r.cpu_throughput_ratio:>10.3f}"
        )
    print(
        "engine/plain: wall-clock tokens/s ratio; (CPU-time): the same from process CPU time, "
        "steadier when other processes share the cores"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_bench", description=__doc__)
    parser.add_argument("--model", default="small", help="preset name or checkpoint directory")
    parser.add_argument("--prefix", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--suffix", type=int, default=32)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    loaded = load_model(args.model, device=args.device, dtype=dtype, seed=args.seed)
    rows = asyncio.run(
        run(
            loaded,
            args.prefix,
            suffix=args.suffix,
            chunk_size=args.chunk_size,
            repeats=args.repeats,
            seed=args.seed,
        )
    )
    header = (
        f"model={loaded.name} device={loaded.device} dtype={args.dtype} "
        f"torch_threads={torch.get_num_threads()} chunk={args.chunk_size} "
        f"suffix={args.suffix} repeats={args.repeats} (medians)"
    )
    _print(rows, header)
    if args.json:
        payload = {
            "header": header,
            "rows": [
                {
                    **asdict(r),
                    "ttft_ratio": r.ttft_ratio,
                    "throughput_ratio": r.throughput_ratio,
                    "cpu_throughput_ratio": r.cpu_throughput_ratio,
                }
                for r in rows
            ],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
