"""LocalEngine's device and dtype: the engine on CUDA (marked ``gpu``, skipped without one) and
the same plumbing on CPU (bf16/fp16 weights and KV, accounting by element size, the error that
names the fix when CUDA is asked for and missing).

The exactness tests run on every device they can: on CPU always, on CUDA when there is one
(``benchmarks/gpu.sh`` runs ``pytest -m gpu tests/engines``). Warm and cold runs use prefixes that
are whole multiples of the chunk size, so both compute every position in chunks of the same
shape: greedy tokens then match exactly even in bf16 on a GPU.
"""

from __future__ import annotations

import asyncio
import random
from functools import cache
from pathlib import Path

import pytest
import torch

from agentwarm.engines.base import Priority
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.local.model import LoadedModel, load_model
from agentwarm.engines.local.runner import (
    DTYPES,
    ModelRunner,
    cuda_cache_bytes,
    resolve_device,
    resolve_dtype,
)
from agentwarm.engines.registry import build_engine, open_engine
from agentwarm.errors import ConfigError, EngineError, InvalidRequest

CHUNK = 64
PREFIX = 2 * CHUNK
SUFFIX = 20
NEW_TOKENS = 16
HAS_CUDA = torch.cuda.is_available()
GPU = pytest.mark.gpu
NEEDS_CUDA = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")

PLACES = [
    pytest.param("cpu", torch.float32, id="cpu-float32"),
    pytest.param("cpu", torch.bfloat16, id="cpu-bfloat16"),
    pytest.param("cpu", torch.float16, id="cpu-float16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16", marks=[GPU, NEEDS_CUDA]),
    pytest.param("cuda", torch.float32, id="cuda-float32", marks=[GPU, NEEDS_CUDA]),
]


@cache
def loaded(device: str, dtype: torch.dtype) -> LoadedModel:
    return load_model("tiny", device=resolve_device(device), dtype=dtype, seed=0)


def ids_for(engine: LocalEngine, seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    vocab = min(engine.runner.vocab_size, 32_000)
    return [rng.randrange(vocab) for _ in range(n)]


def tolerance(device: str, dtype: torch.dtype, scale: float) -> float:
    """Largest logit difference accepted between chunked and whole-sequence forwards: float32
    rounding (GPU kernels pick other reduction orders for other shapes), or a few bf16/fp16
    ulps of the logits' magnitude (the lm_head output itself is rounded to the dtype)."""
    if dtype == torch.float32:
        return 1e-4 if device == "cpu" else 1e-3
    return 0.05 * max(1.0, scale)


def kv_of(model: LoadedModel) -> torch.Tensor:
    """The KV a fresh runner of ``model`` computes for three tokens."""
    runner = ModelRunner(model)
    state = runner.new_state(reserve=3)
    runner.extend(state, [1, 2, 3], want_logits=False)
    return state.kv()


# ------------------------------------------------------------- on every device


@pytest.mark.parametrize(("device", "dtype"), PLACES)
@pytest.mark.slow
async def test_cached_prefix_logits_equal_cold_logits(device: str, dtype: torch.dtype) -> None:
    model = loaded(device, dtype)
    reference = ModelRunner(model)
    async with LocalEngine(model, chunk_size=CHUNK) as engine:
        for trial in range(3):
            ids = ids_for(engine, trial, PREFIX + SUFFIX)
            await engine.prefill(ids[:PREFIX], namespace=f"t{trial}")
            warm = await engine.next_token_logits(ids, namespace=f"t{trial}")
            cold = reference.forward_full(ids)[-1]
            assert warm.device == model.device  # logits stay on the device
            assert warm.dtype == torch.float32
            scale = float(cold.abs().max())
            assert float((warm - cold).abs().max()) <= tolerance(device, dtype, scale)
        stats = await engine.stats()
        assert stats.hit_tokens >= 3 * PREFIX


@pytest.mark.parametrize(("device", "dtype"), PLACES)
async def test_greedy_generation_warm_equals_cold(device: str, dtype: torch.dtype) -> None:
    async with LocalEngine(loaded(device, dtype), chunk_size=CHUNK) as engine:
        ids = ids_for(engine, 7, PREFIX + SUFFIX)
        cold = await engine.generate(ids, max_tokens=NEW_TOKENS)
        assert cold.cached_tokens == 0
        await engine.flush_cache()
        await engine.prefill(ids[:PREFIX])
        warm = await engine.generate(ids, max_tokens=NEW_TOKENS)
        assert warm.cached_tokens == PREFIX
        assert warm.token_ids == cold.token_ids
        assert len(warm.token_ids) == NEW_TOKENS or warm.finish_reason == "stop"


@pytest.mark.parametrize(("device", "dtype"), PLACES)
async def test_prefetch_and_live_request(device: str, dtype: torch.dtype) -> None:
    """A speculative prefill and the live request that follows it, sequentially and at once."""
    async with LocalEngine(loaded(device, dtype), chunk_size=CHUNK) as engine:
        ids = ids_for(engine, 11, PREFIX + SUFFIX)
        cold = await engine.generate(ids, max_tokens=NEW_TOKENS, namespace="cold")

        pre = await engine.prefill(ids[:PREFIX], priority=Priority.SPECULATIVE, namespace="seq")
        assert pre.done and pre.computed_tokens == PREFIX
        live = await engine.generate(ids, max_tokens=NEW_TOKENS, namespace="seq")
        assert live.cached_tokens == PREFIX
        assert live.token_ids == cold.token_ids

        both = await asyncio.gather(
            engine.prefill(ids[:PREFIX], priority=Priority.SPECULATIVE, namespace="both"),
            engine.generate(ids, max_tokens=NEW_TOKENS, namespace="both"),
        )
        assert both[1].token_ids == cold.token_ids
        await engine.check_integrity()


# ------------------------------------------------------------------ CUDA only


@GPU
@NEEDS_CUDA
async def test_cuda_engine_places_everything_on_the_gpu() -> None:
    async with LocalEngine("tiny", device="cuda", dtype="bfloat16") as engine:
        runner = engine.runner
        assert runner.device == torch.device("cuda", torch.cuda.current_device())
        assert runner.dtype == torch.bfloat16
        out = await engine.generate([1, 2, 3, 4], max_tokens=4, temperature=0.8, seed=3)
        assert len(out.token_ids) >= 1
        # The default budget comes from GPU memory, not from a quarter of RAM.
        _free, total = torch.cuda.mem_get_info(runner.device)
        budget = engine.cache.max_tokens * runner.kv_bytes_per_token
        assert 0 < budget <= total // 2
    state_kv = kv_of(loaded("cuda", torch.bfloat16))
    assert state_kv.device.type == "cuda"
    assert state_kv.dtype is torch.bfloat16


# ------------------------------------------------------------ CPU plumbing


def test_dtype_names() -> None:
    assert resolve_dtype("bfloat16") is torch.bfloat16
    assert resolve_dtype("BF16") is torch.bfloat16
    assert resolve_dtype("float16") is torch.float16
    assert resolve_dtype(torch.float32) is torch.float32
    assert set(DTYPES.values()) == {torch.float32, torch.bfloat16, torch.float16}
    for bad in ("int8", torch.int64, "float64"):
        with pytest.raises(InvalidRequest, match="unsupported dtype"):
            resolve_dtype(bad)


def test_device_names() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(InvalidRequest, match="unknown device"):
        resolve_device("gpu0")


@pytest.mark.slow
async def test_kv_accounting_by_element_size() -> None:
    budget = 1 << 20
    sizes = {}
    for name in ("float32", "bfloat16", "float16"):
        async with LocalEngine("tiny", dtype=name, max_cache_bytes=budget, seed=0) as engine:
            runner = engine.runner
            assert runner.dtype is DTYPES[name]
            geometry = runner.num_layers * 2 * runner.num_kv_heads * runner.head_dim
            assert runner.kv_bytes_per_token == geometry * DTYPES[name].itemsize
            assert engine.cache.max_tokens == budget // runner.kv_bytes_per_token
            sizes[name] = engine.cache.max_tokens
            out = await engine.generate([5, 6, 7, 8], max_tokens=3)
            assert out.prompt_tokens == 4
        assert kv_of(loaded("cpu", DTYPES[name])).dtype is DTYPES[name]
    assert sizes["bfloat16"] == sizes["float16"] == 2 * sizes["float32"]


def test_cuda_asked_for_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1", torch.device("cuda")):
        with pytest.raises(EngineError, match=r"torch\.cuda\.is_available\(\) is false") as info:
            LocalEngine("tiny", device=device, dtype="bfloat16")
        assert "--device cpu" in str(info.value)
        assert "install a CUDA build of torch" in str(info.value)


async def test_registry_passes_device_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = build_engine("local", model="tiny", device="cpu", dtype="bfloat16")
    try:
        assert isinstance(engine, LocalEngine)
        assert engine.runner.dtype is torch.bfloat16
    finally:
        await engine.aclose()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(EngineError, match="is_available"):
        await open_engine("local", "tiny", device="cuda", dtype="bfloat16")
    with pytest.raises(ConfigError, match="--device"):
        await open_engine("fake", "tiny", device="cuda")
    with pytest.raises(ConfigError, match="--dtype"):
        build_engine("fake", dtype="bfloat16")


def test_cli_device_option_without_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentwarm.cli import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = ["--engine", "local", "--device", "cuda", "--dtype", "bfloat16"]
    example = str(Path(__file__).parents[2] / "examples" / "support_bot.py")
    result = CliRunner().invoke(app, ["run", example, "--state-dir", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert "torch.cuda.is_available() is false" in result.output
    result = CliRunner().invoke(app, ["run", example, "--engine", "fake", "--device", "cuda"])
    assert result.exit_code == 2, result.output
    assert "--device" in result.output


async def test_environment_gives_the_local_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTWARM_DTYPE", "float16")
    monkeypatch.setenv("AGENTWARM_DEVICE", "cpu")
    engine = await open_engine("local", "tiny")
    try:
        assert isinstance(engine, LocalEngine)
        assert engine.runner.dtype is torch.float16
    finally:
        await engine.aclose()
    engine = await open_engine("fake", "tiny")  # the environment is no error for other engines
    await engine.aclose()


def test_cuda_budget_is_half_the_available_gpu_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1 * gib)
    # 10 GiB free + 2 GiB this process's allocator holds unused.
    assert cuda_cache_bytes(torch.device("cuda", 0)) == 6 * gib
