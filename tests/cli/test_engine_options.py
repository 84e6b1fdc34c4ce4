"""The ``--engine`` options of ``agentwarm run``/``bench`` and ``agentwarm serve``: one factory,
:mod:`agentwarm.engines.registry`, builds the engine each names, with the same options and errors
as before it was shared."""

from __future__ import annotations

import pytest

from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.registry import EMBEDDED_KINDS, build_engine, open_engine
from agentwarm.errors import ConfigError
from agentwarm.server import build_engine as served_engine


async def test_serve_engine_options_reach_the_fake() -> None:
    fake = build_engine(
        "fake",
        model="small",
        chunk_size=8,
        max_cached_tokens=100,
        seconds_per_token=0.5,
        seconds_per_output_token=0.25,
    )
    assert isinstance(fake, FakeEngine)
    assert fake.model_name == "fake-small"
    costs = (fake.seconds_per_token, fake.seconds_per_output_token)
    assert (fake.chunk_size, costs) == (8, (0.5, 0.25))
    assert (await fake.stats()).capacity_tokens == 100
    await fake.aclose()
    defaults, plain = build_engine("fake"), FakeEngine()
    assert defaults.model_name == "fake-tiny"
    assert (defaults.chunk_size, defaults.seconds_per_token) == (
        plain.chunk_size,
        plain.seconds_per_token,
    )
    await defaults.aclose()
    await plain.aclose()


async def test_run_engine_fake_keeps_its_defaults() -> None:
    """``agentwarm run/bench --engine fake``: the fake named ``fake``, whatever --model and
    --chunk-size say."""
    fake = await open_engine("fake", "small", chunk_size=8)
    assert isinstance(fake, FakeEngine)
    assert (fake.model_name, fake.chunk_size) == ("fake", FakeEngine().chunk_size)
    await fake.aclose()


async def test_local_engine_takes_chunk_size_and_cache_budget() -> None:
    from agentwarm.engines.local import LocalEngine

    local = await open_engine("local", "tiny", chunk_size=16)
    assert isinstance(local, LocalEngine)
    assert local.scheduler.chunk_size == 16
    await local.aclose()
    served = build_engine("local", model="tiny", chunk_size=32, max_cached_tokens=64)
    assert isinstance(served, LocalEngine)
    assert (served.scheduler.chunk_size, (await served.stats()).capacity_tokens) == (32, 64)
    await served.aclose()


async def test_unknown_engines_are_refused_with_the_choices() -> None:
    assert EMBEDDED_KINDS == ("local", "fake")
    assert served_engine is build_engine  # agentwarm.server re-exports the one factory
    with pytest.raises(ConfigError, match="unknown engine 'gpu' for agentwarm serve: use 'local'"):
        build_engine("gpu")
    with pytest.raises(ConfigError, match="'gpu' is not valid: use 'local', 'fake', the URL"):
        await open_engine("gpu", "tiny")
    with pytest.raises(ConfigError, match="is not valid") as bad:
        await open_engine("ftp://user:hunter2@example.com", "tiny")
    assert "hunter2" not in str(bad.value)


async def test_a_vllm_engine_takes_well_formed_urls() -> None:
    with pytest.raises(ConfigError, match=r"^--engine vllm:URL: engine URL 'ftp://h' is not valid"):
        await open_engine("vllm:ftp://h", "tiny")
    with pytest.raises(ConfigError, match=r"^--engine vllm:URL: engine URL 'ftp://h' is not valid"):
        await open_engine("vllm:http://127.0.0.1:1,ftp://h", "tiny")  # before any connection
    with pytest.raises(ConfigError, match=r"^--engine vllm:URL needs a URL"):
        await open_engine("vllm: , ", "tiny")


async def test_a_malformed_url_is_refused_before_any_connection() -> None:
    with pytest.raises(ConfigError, match=r"^--engine: ") as bad:
        await open_engine("http://127.0.0.1:1,http://user:hunter2@127.0.0.1:99999", "tiny")
    assert "hunter2" not in str(bad.value)
