"""Helpers of the tests against a real vLLM server."""

from __future__ import annotations

import os
import random

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentwarm.engines.base import new_rid

__all__ = ("LONG", "long_test", "metric", "namespace", "prompt")

#: Opts in to the vLLM tests too long for `.ci/run` on 2 shared cores (each says why).
LONG = "AGENTWARM_VLLM_LONG_TESTS"


def long_test(why: str) -> pytest.MarkDecorator:
    """Skip unless ``AGENTWARM_VLLM_LONG_TESTS=1``: ``why`` says what makes the test long."""
    return pytest.mark.skipif(os.environ.get(LONG) != "1", reason=f"{why}; set {LONG}=1")


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
