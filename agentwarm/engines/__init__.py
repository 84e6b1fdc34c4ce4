"""Inference engines: the protocol, a deterministic fake, the embedded torch engine, SGLang."""

from __future__ import annotations

from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    PrefillStatus,
    Priority,
    StreamChunk,
    new_rid,
)

__all__ = (
    "Completion",
    "Engine",
    "EngineStats",
    "GenerateParams",
    "PrefillParams",
    "PrefillResult",
    "PrefillStatus",
    "Priority",
    "StreamChunk",
    "new_rid",
)
