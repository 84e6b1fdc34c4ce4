"""Loading the embedded engine's model: built-in presets or a local checkpoint directory.

``load_model(spec)`` accepts

* a preset name (:data:`PRESETS`): a Llama-architecture config with seeded random weights and
  a built-in tokenizer (:data:`PRESET_TOKENIZERS`); nothing is downloaded. ``tiny`` (4 layers of
  256) is for tests and demos, ``small`` is shaped like SmolLM-135M and is for benchmarks, ``1b``
  like Llama-3.2-1B (for a GPU); all three use Qwen2.5's tokenizer
  (:class:`~agentwarm.engines.tokenizers.QwenTokenizer`, 151,936 embedding rows) and a context of
  :data:`PRESET_CONTEXT` tokens (random weights: positions cost nothing). ``tiny-bytes`` and
  ``small-bytes`` are the same shapes with the byte tokenizer
  (:class:`~agentwarm.engines.tokenizers.ByteTokenizer`, no chat template), for tests about bytes;
* a local directory holding a ``transformers`` causal-LM checkpoint (``config.json`` + weights),
  loaded with ``local_files_only=True``; its tokenizer is used when the directory has one, else
  the byte tokenizer.

Only decoder models whose every layer is full (global) attention are supported: the prefix
cache stores the K/V of every past token, which sliding-window and recurrent layers do not keep.
Every load failure raises :class:`~agentwarm.errors.EngineError` naming the path and the problem,
``from`` the original exception. The model is returned in eval mode.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from agentwarm.engines.built import BUILT_MODELS, resolve_model
from agentwarm.engines.tokenizers import (
    PRESET_CONTEXT,
    PRESET_TOKENIZERS,
    QWEN2_5_EMBEDDINGS,
    ByteTokenizer,
    HFTokenizer,
    QwenTokenizer,
    Tokenizer,
)
from agentwarm.errors import EngineError

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

__all__ = (
    "PRESETS",
    "PRESET_CONTEXT",
    "PRESET_TOKENIZERS",
    "LoadedModel",
    "load_model",
    "preset_config",
    "preset_tokenizer",
)

ATTN_IMPLEMENTATION = "sdpa"


_TINY: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rope_theta": 10000.0,
    "initializer_range": 0.05,
}
_SMALL: dict[str, Any] = {  # SmolLM-135M
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "rope_theta": 10000.0,
    "initializer_range": 0.02,
}
_1B: dict[str, Any] = {  # Llama-3.2-1B
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "rope_theta": 500000.0,
    "initializer_range": 0.02,
}
_QWEN = {"vocab_size": QWEN2_5_EMBEDDINGS}
_BYTES = {"vocab_size": ByteTokenizer.VOCAB_SIZE}

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": _TINY | _QWEN,
    "small": _SMALL | _QWEN,
    "1b": _1B | _QWEN,
    "tiny-bytes": _TINY | _BYTES,
    "small-bytes": _SMALL | _BYTES,
}
"""The ``LlamaConfig`` fields of each preset that differ between presets (see
:func:`preset_config` for the common ones)."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready for :class:`~agentwarm.engines.local.runner.ModelRunner`.

    ``max_context`` is the longest sequence (prompt + generated) the model accepts;
    ``eos_token_id`` is ``None`` when neither tokenizer nor config defines one.
    """

    model: PreTrainedModel
    tokenizer: Tokenizer
    name: str
    config: PretrainedConfig
    max_context: int
    eos_token_id: int | None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype


def preset_config(name: str) -> PretrainedConfig:
    """The ``transformers`` config of preset ``name`` (no weights are made); raises
    ``EngineError`` for unknown names."""
    from transformers import LlamaConfig

    try:
        params = PRESETS[name]
    except KeyError:
        raise EngineError(
            f"unknown model preset {name!r} (presets: {', '.join(PRESETS)}; "
            "or pass a local checkpoint directory)"
        ) from None
    tok = preset_tokenizer(name)
    return LlamaConfig(
        **params,
        max_position_embeddings=PRESET_CONTEXT,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def preset_tokenizer(name: str) -> ByteTokenizer | QwenTokenizer:
    """The tokenizer of preset ``name``: Qwen2.5's with its chat template, or the byte one."""
    if PRESET_TOKENIZERS[name] == "byte":
        return ByteTokenizer()
    return QwenTokenizer()


def load_model(
    spec: str | Path,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> LoadedModel:
    """Load preset ``spec`` (seeded with ``seed``) or the checkpoint in directory ``spec``.

    Raises :class:`EngineError` if the directory is missing, its config is absent or malformed,
    the architecture is not a supported causal LM, or the weights cannot be read.
    """
    if isinstance(spec, str) and spec in PRESETS:
        return _load_preset(spec, device=device, dtype=dtype, seed=seed)
    if isinstance(spec, str) and spec in BUILT_MODELS:
        spec = resolve_model(spec)  # a real model a setup script built (ConfigError if not)
    return _load_dir(Path(spec), device=device, dtype=dtype)


def _load_preset(
    name: str, *, device: str | torch.device, dtype: torch.dtype, seed: int
) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    config = preset_config(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation=ATTN_IMPLEMENTATION, dtype=dtype
        )
    torch.nn.Module.to(model, device)
    return _finish(model, preset_tokenizer(name), name=name, where=f"preset {name!r}")


def _load_dir(path: Path, *, device: str | torch.device, dtype: torch.dtype) -> LoadedModel:
    from transformers import AutoConfig, AutoModelForCausalLM

    where = repr(str(path))
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise EngineError(
            f"model {where} {what}; pass a preset ({', '.join(PRESETS)}) "
            "or a local checkpoint directory"
        )
    config_file = path / "config.json"
    if not config_file.is_file():
        raise EngineError(f"model directory {where} has no config.json")
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EngineError(f"model directory {where}: malformed config.json: {exc}") from exc
    if not isinstance(raw, dict):
        raise EngineError(f"model directory {where}: config.json is not a JSON object")
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        kind = raw.get("model_type")
        raise EngineError(
            f"model directory {where}: unsupported architecture or bad config.json "
            f"(model_type {kind!r}): {exc}"
        ) from exc
    _check_config(config, where)
    try:
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(
            str(path),
            config=config,
            local_files_only=True,
            dtype=dtype,
            attn_implementation=ATTN_IMPLEMENTATION,
        )
    except ValueError as exc:
        if "Unrecognized configuration class" not in str(exc):
            raise EngineError(f"model directory {where}: cannot load weights: {exc}") from exc
        raise EngineError(
            f"model directory {where}: unsupported architecture {_arch(config)} "
            "(not a causal language model)"
        ) from exc
    except Exception as exc:
        raise EngineError(f"model directory {where}: cannot load weights: {exc}") from exc
    torch.nn.Module.to(model, device)
    tokenizer: Tokenizer
    if _has_tokenizer(path):
        try:
            tokenizer = HFTokenizer.from_dir(path)
        except Exception as exc:
            raise EngineError(f"model directory {where}: cannot load tokenizer: {exc}") from exc
    else:
        tokenizer = ByteTokenizer()
    return _finish(model, tokenizer, name=path.name or str(path), where=where)


def _arch(config: PretrainedConfig) -> str:
    names = getattr(config, "architectures", None)
    return ", ".join(names) if names else repr(getattr(config, "model_type", "?"))


def _has_tokenizer(path: Path) -> bool:
    names = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    return any((path / name).is_file() for name in names)


def _finish(model: PreTrainedModel, tokenizer: Tokenizer, *, name: str, where: str) -> LoadedModel:
    config = model.config
    _check_supported(model, where)
    if isinstance(tokenizer, ByteTokenizer) and tokenizer.vocab_size > config.vocab_size:
        raise EngineError(
            f"model {where}: has no tokenizer and its vocabulary of {config.vocab_size} ids "
            f"is too small for the built-in byte tokenizer ({tokenizer.vocab_size} ids)"
        )
    model.eval()
    model.requires_grad_(False)
    eos: Any = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        cfg_eos = getattr(config, "eos_token_id", None)
        eos = cfg_eos[0] if isinstance(cfg_eos, list) and cfg_eos else cfg_eos
    max_context = int(getattr(config, "max_position_embeddings", 0) or 0)
    if max_context <= 0:
        raise EngineError(f"model {where}: config has no max_position_embeddings")
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        config=config,
        max_context=max_context,
        eos_token_id=eos if isinstance(eos, int) else None,
    )


def _check_config(config: PretrainedConfig, where: str) -> None:
    """Reject, before loading weights, configs whose KV cannot be prefix-cached."""
    if getattr(config, "is_encoder_decoder", False):
        raise EngineError(
            f"model {where}: unsupported architecture {_arch(config)} (encoder-decoder)"
        )
    text_config = config.get_text_config(decoder=True)
    layer_types = getattr(text_config, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        kinds = sorted(set(layer_types))
        raise EngineError(
            f"model {where}: unsupported architecture {_arch(config)} (layer types {kinds}; "
            "only full-attention layers can be prefix-cached)"
        )
    window = getattr(text_config, "sliding_window", None)
    if layer_types is None and window and getattr(text_config, "use_sliding_window", True):
        raise EngineError(
            f"model {where}: unsupported architecture {_arch(config)} (sliding-window attention "
            "cannot be prefix-cached)"
        )


def _check_supported(model: PreTrainedModel, where: str) -> None:
    _check_config(model.config, where)
    params = inspect.signature(model.forward).parameters
    missing = [p for p in ("cache", "position_ids", "logits_to_keep") if p not in params]
    if missing:
        raise EngineError(
            f"model {where}: unsupported architecture {type(model).__name__} "
            f"(forward() lacks {', '.join(missing)})"
        )
