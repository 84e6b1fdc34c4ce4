"""The command line of ``agentwarm bench --engine fake`` over a small trajectories file: the one
home of it for the bench CLI tests."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ("bench_args",)


def bench_args(tmp_path: Path, rows: list[list[str]], modes: str, *extra: str) -> list[str]:
    """``bench`` on the fake engine, replaying ``rows`` (one episode each) in full with no think
    time, in ``modes``; ``extra`` is appended."""
    eps = tmp_path / "eps.jsonl"
    eps.write_text("".join(json.dumps({"steps": r}) + "\n" for r in rows), encoding="utf-8")
    return [
        *("bench", "--engine", "fake", "--trajectories", str(eps)),
        *("--test-fraction", "1", "--think", "const:0", "--modes", modes),
        *extra,
    ]
