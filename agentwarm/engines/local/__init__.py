"""The embedded engine: a transformers model, a radix KV cache and a one-thread scheduler.

``LocalEngine("tiny")`` runs a built-in preset with seeded random weights (no download);
``LocalEngine("/path/to/checkpoint")`` loads a local ``transformers`` causal LM.

Importing this package has no side effect and imports neither torch nor transformers (so
``agentwarm.engines.local.scheduler``, which ``FakeEngine`` runs, stays torch-free).
``LocalEngine`` is imported on first use, which loads torch: right before, it sets
``OMP_WAIT_POLICY=PASSIVE`` unless the environment already sets it (OpenMP reads it once, when
torch loads it, so it has no effect if torch was imported before). The engine's worker thread
shares the CPU with the asyncio loop that feeds it; OpenMP's default spin-waiting between
parallel regions then steals the cores from whoever holds them, which on a 2-core machine made
TTFT up to 10x slower and very noisy (`agentwarm bench --profile quick`: cold TTFT mean 978 ms
spinning vs 162 ms passive).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentwarm.engines.local.engine import LocalEngine

__all__ = ("LocalEngine",)


def __getattr__(name: str) -> Any:
    if name == "LocalEngine":
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from agentwarm.engines.local.engine import LocalEngine

        return LocalEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
