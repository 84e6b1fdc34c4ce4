"""Helpers of the tests against a real vLLM server."""

from __future__ import annotations

import random

import httpx
from prometheus_client.parser import text_string_to_metric_families

from agentwarm.engines.base import new_rid

__all__ = ("metric", "namespace", "prompt")


def prompt(n: int) -> list[int]:
    """``n`` random token ids of the model's vocabulary (plain text pieces, no special ids)."""
    rng = random.Random(new_rid())
    return [rng.randrange(200, 40_000) for _ in range(n)]


def namespace() -> str:
    """A cache namespace of this test alone (the server outlives a test)."""
    return f"t-{new_rid()}"


def metric(url: str, name: str, **labels: str) -> float:
    """The sum of the server's ``name`` samples whose labels include ``labels``."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )
