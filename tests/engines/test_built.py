"""``smollm2``: the real model a setup script builds, named like a preset (engines.built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentwarm.engines.built import SETUP_COMMAND, built_model_dir, resolve_model
from agentwarm.errors import ConfigError
from agentwarm.warmup.render import load_chat_renderer


def test_an_unbuilt_model_is_an_error_naming_the_setup_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTWARM_VLLM_DIR", str(tmp_path))
    (tmp_path / "smollm2").mkdir()  # half-built: no .complete marker
    with pytest.raises(ConfigError, match="smollm2") as refused:
        built_model_dir("smollm2")
    assert SETUP_COMMAND in str(refused.value) and str(tmp_path / "smollm2") in str(refused.value)
    with pytest.raises(ConfigError, match=r"scripts/setup_vllm\.sh"):
        load_chat_renderer("smollm2")


def test_a_built_model_resolves_to_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTWARM_VLLM_DIR", str(tmp_path))
    folder = tmp_path / "smollm2"
    folder.mkdir()
    (folder / ".complete").touch()
    assert built_model_dir("smollm2") == folder.resolve()
    assert resolve_model("smollm2") == str(folder.resolve())
    assert resolve_model("tiny") == "tiny" and resolve_model("/some/dir") == "/some/dir"
