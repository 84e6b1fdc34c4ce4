"""``--kv-dir DIR [--kv-disk-gb N]`` of ``agentwarm serve``/``run``/``bench``: checked once, by
:func:`agentwarm.engines.registry.disk_tier_options`, before any engine is built (and, for
``serve``, before the socket is bound), with one line naming the flag and the fix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from agentwarm.cli import app
from agentwarm.engines.registry import (
    GIB,
    build_engine,
    disk_tier_options,
    host_tier_option,
    open_engine,
)
from agentwarm.errors import ConfigError
from agentwarm.server.command import serve
from agentwarm.server.engine_options import DEFAULT_KV_DISK_GIB
from tests.conftest_server import ROOT

ENV = {"AGENTWARM_NO_PROGRESS": "1", "COLUMNS": "200"}
EXAMPLE = str(ROOT / "examples" / "support_bot.py")


def test_the_directory_is_created_and_the_budget_counted_in_gib(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b" / "kv"
    assert disk_tier_options(nested, 0.5) == (nested, GIB // 2)
    assert nested.is_dir()
    assert disk_tier_options(nested, None) == (nested, None)  # exists: fine, default budget
    assert disk_tier_options(str(nested), 16) == (nested, 16 * 2**30)
    assert disk_tier_options(None, None) == (None, None)  # no tier


@pytest.mark.parametrize("gb", [0.0, -1.0, math.inf, math.nan, 1e-12])
def test_a_budget_that_is_not_a_positive_number_of_gib_is_refused(
    gb: float, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"^--kv-disk-gb .*: the disk tier's budget must be a "):
        disk_tier_options(tmp_path / "kv", gb)
    assert not (tmp_path / "kv").exists()  # nothing made for a refused option


def test_a_budget_needs_a_directory() -> None:
    with pytest.raises(ConfigError, match=r"--kv-disk-gb .* which --kv-dir DIR turns on: give"):
        disk_tier_options(None, 4)


def test_a_directory_that_is_a_file_or_cannot_be_made_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("not a directory")
    with pytest.raises(ConfigError, match=r"^--kv-dir .*file: it is not a directory; give a "):
        disk_tier_options(file, None)
    with pytest.raises(ConfigError, match=r"^--kv-dir .*file/kv: cannot create it \(.*\); give"):
        disk_tier_options(file / "kv", None)  # its parent is a file
    with pytest.raises(ConfigError, match=r"^--kv-dir is empty"):
        disk_tier_options(" ", None)


@pytest.mark.parametrize("engine", ["fake", "http://127.0.0.1:1", "vllm:http://127.0.0.1:1"])
def test_only_the_embedded_engine_takes_a_disk_tier(engine: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--kv-dir: for the embedded torch engine only"):
        disk_tier_options(tmp_path / "kv", None, engine=engine)
    with pytest.raises(ConfigError, match=r"^--kv-dir and --kv-disk-gb: for the embedded"):
        disk_tier_options(tmp_path / "kv", 1, engine=engine)
    assert not (tmp_path / "kv").exists()


async def test_the_factories_refuse_a_tier_for_other_engines(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--kv-dir: for the embedded torch engine only"):
        build_engine("fake", kv_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^--kv-disk-gb: for the embedded torch engine only"):
        await open_engine("fake", "tiny", kv_disk_bytes=GIB)
    with pytest.raises(ConfigError, match=r"which --kv-dir DIR turns on"):
        build_engine("local", kv_disk_bytes=GIB)  # before the model is loaded


def _serve(*args: str) -> Result:
    served = typer.Typer()
    served.command()(serve)
    return CliRunner().invoke(served, list(args))


def test_serve_refuses_bad_tier_options_before_binding(tmp_path: Path) -> None:
    # Port 1 cannot be bound by a test: reaching the binding would fail differently.
    result = _serve("--engine", "fake", "--port", "1", "--kv-dir", str(tmp_path / "kv"))
    assert isinstance(result.exception, ConfigError), result.output
    assert str(result.exception) == (
        "--kv-dir: for the embedded torch engine only (--engine local)"
    )
    result = _serve("--port", "1", "--kv-dir", str(tmp_path), "--kv-disk-gb", "0")
    assert isinstance(result.exception, ConfigError), result.output
    assert str(result.exception).startswith("--kv-disk-gb 0: the disk tier's budget must be")


@pytest.mark.parametrize("command", ["run", "bench"])
def test_run_and_bench_exit_2_with_one_line(command: str, tmp_path: Path) -> None:
    target = [EXAMPLE] if command == "run" else []
    file = tmp_path / "file"
    file.write_text("")
    result = CliRunner().invoke(
        app, [command, *target, "--engine", "local", "--kv-dir", str(file)], env=ENV
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: --kv-dir {file}: it is not a directory; give a directory for the disk tier "
        "(it is created when missing)"
    ]
    result = CliRunner().invoke(
        app, [command, *target, "--engine", "fake", "--kv-disk-gb", "2"], env=ENV
    )
    assert result.exit_code == 2, result.output
    assert "error: --kv-disk-gb: for the embedded torch engine only" in result.output


@pytest.mark.slow
async def test_the_local_engine_gets_its_tier_with_the_budget(tmp_path: Path) -> None:
    from agentwarm.engines.local import LocalEngine

    kv = tmp_path / "new" / "kv"
    served = build_engine("local", model="tiny", kv_dir=kv, kv_disk_bytes=64 << 20)
    ran = await open_engine("local", "tiny", kv_dir=tmp_path / "other")
    try:
        assert isinstance(served, LocalEngine) and isinstance(ran, LocalEngine)
        assert served.disk is not None and ran.disk is not None
        assert served.disk.tier.stats().max_bytes == 64 << 20
        assert ran.disk.tier.path == tmp_path / "other"
        assert (await served.stats()).tier_enabled is True
        assert any(kv.iterdir())  # the fingerprint directory
    finally:
        await served.aclose()
        await ran.aclose()


def test_the_help_states_the_tiers_default_budget() -> None:
    from agentwarm.engines.kvtier import DEFAULT_KV_DISK_BYTES

    assert DEFAULT_KV_DISK_GIB * GIB == DEFAULT_KV_DISK_BYTES
    result = CliRunner().invoke(app, ["serve", "--help"], env=ENV)
    assert "Default: 16 GiB, capped by the free disk space." in " ".join(result.output.split())


def test_the_host_tier_budget_is_counted_in_gib_and_needs_a_directory(tmp_path: Path) -> None:
    assert host_tier_option(None, None) is None  # the engine's default (CUDA: on; CPU: none)
    assert host_tier_option(0.0, None) == 0  # off, with or without a disk tier
    assert host_tier_option(0.5, tmp_path) == GIB // 2
    with pytest.raises(ConfigError, match=r"^--kv-host-gb sets the host tier, .* give --kv-dir"):
        host_tier_option(2, None)
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ConfigError, match=r"^--kv-host-gb .*: the host tier's budget must be"):
            host_tier_option(bad, tmp_path)


def test_serve_refuses_a_host_tier_without_a_disk_tier_before_binding() -> None:
    result = _serve("--port", "1", "--kv-host-gb", "4")
    assert isinstance(result.exception, ConfigError), result.output
    assert str(result.exception) == (
        "--kv-host-gb sets the host tier, which sits above the disk tier that --kv-dir DIR "
        "turns on: give --kv-dir too"
    )
