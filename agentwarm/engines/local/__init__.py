"""The embedded engine: a transformers model, a radix KV cache and a one-thread scheduler.

``LocalEngine("tiny")`` runs a built-in preset with seeded random weights (no download);
``LocalEngine("/path/to/checkpoint")`` loads a local ``transformers`` causal LM.
"""

from __future__ import annotations

from agentwarm.engines.local.engine import LocalEngine

__all__ = ("LocalEngine",)
