"""The disk tier's own throughput for a preset's KV layout (``python -m benchmarks.kvtier_rate
--model small --tokens 3072 --dir DIR``): bytes per token, write rate (queue to disk), and the
read rate of ``DiskTier.read`` (verified, copied into one tensor) with the files in the page
cache (warm) and evicted from it (cold: ``posix_fadvise(DONTNEED)`` on the tier's own files
after an fsync, nothing else on the machine is touched).

No model runs: the KV is random in the preset's shape and dtype. What loading beats is the
engine's prefill throughput, measured elsewhere (``DiskTier.meta["prefill_tokens_per_s"]``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from agentwarm.engines.kvtier import DiskTier
from agentwarm.engines.local.model import preset_config
from agentwarm.engines.local.runner import resolve_dtype


def layout(model: str) -> tuple[int, int, int]:
    """``(layers, kv heads, head dim)`` of preset ``model``."""
    config = preset_config(model)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers, config.num_key_value_heads, head_dim


def evict_from_page_cache(root: Path) -> None:
    for path in root.rglob("*.kv"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, default=3072)
    parser.add_argument("--block-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="default: a temporary directory")
    args = parser.parse_args()
    dtype = resolve_dtype(args.dtype)
    layers, heads, head_dim = layout(args.model)
    per_token = layers * 2 * heads * head_dim * dtype.itemsize
    ids = list(range(args.tokens))
    kv = torch.randn(layers, 2, heads, args.tokens, head_dim).to(dtype)
    where = Path(args.dir or tempfile.mkdtemp(prefix="kvtier-rate-"))
    options = {"kv_bytes_per_token": per_token, "max_bytes": 64 << 30}
    fingerprint = f"bench-{args.model}-{args.dtype}-{time.time_ns()}"
    tier = DiskTier(where, fingerprint=fingerprint, block_tokens=args.block_tokens, **options)
    began = time.perf_counter()
    tier.write("", ids, kv, 0)
    tier.flush()
    write_s = time.perf_counter() - began
    stored = tier.stored_prefix("", ids)
    nbytes = tier.stats().stored_bytes
    rates: dict[str, list[float]] = {"warm": [], "cold": []}
    for _ in range(args.repeats):
        for kind in ("cold", "warm"):
            if kind == "cold":
                evict_from_page_cache(tier.root)
            began = time.perf_counter()
            out = tier.read("", ids, 0, stored)
            elapsed = time.perf_counter() - began
            assert out is not None and torch.equal(out, kv[:, :, :, :stored])
            rates[kind].append(nbytes / elapsed)
    tier.close()
    print(f"model {args.model} {args.dtype}: {per_token:,} bytes per token, {stored} tokens")
    print(f"write: {nbytes / write_s / 1e6:,.0f} MB/s ({write_s * 1e3:.0f} ms)")
    for kind, values in rates.items():
        best = max(values)
        print(
            f"read {kind}: {best / 1e6:,.0f} MB/s best of {len(values)} "
            f"({nbytes / best * 1e3:.0f} ms for {stored} tokens, "
            f"{best / per_token:,.0f} tokens/s)"
        )
    print(f"tier EWMA read_bytes_per_s: {tier.read_bytes_per_s or 0:,.0f}")


if __name__ == "__main__":
    main()
