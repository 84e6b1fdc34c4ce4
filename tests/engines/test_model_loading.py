"""Loading presets and checkpoint directories; the built-in, Qwen2.5 and HF tokenizers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentwarm.engines.local.model import (
    PRESET_CONTEXT,
    PRESETS,
    LoadedModel,
    load_model,
    preset_config,
)
from agentwarm.engines.local.runner import ModelRunner
from agentwarm.engines.tokenizers import ByteTokenizer, HFTokenizer, QwenTokenizer, Tokenizer
from agentwarm.errors import EngineError

TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }} {% endfor %}"


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    """The tiny shape with the byte tokenizer: small enough to save and reload quickly."""
    return load_model("tiny-bytes")


def logits_of(loaded: LoadedModel, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return loaded.model(input_ids=torch.tensor([ids])).logits[0]


def test_tiny_preset_has_qwen2_5_tokenizer_and_a_32k_context() -> None:
    tiny = load_model("tiny")
    params = sum(p.numel() for p in tiny.model.parameters())
    embedding = 151_936 * 256  # tied with the LM head
    assert 1_000_000 < params - embedding < 10_000_000
    assert tiny.name == "tiny"
    assert isinstance(tiny.tokenizer, QwenTokenizer)
    assert tiny.config.vocab_size == 151_936 >= tiny.tokenizer.vocab_size
    assert tiny.max_context == PRESET_CONTEXT == 32_768
    assert tiny.eos_token_id == 151_645  # <|im_end|>
    assert not tiny.model.training
    assert all(not p.requires_grad for p in tiny.model.parameters())
    assert tiny.dtype == torch.float32 and tiny.device == torch.device("cpu")
    ids = tiny.tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n")
    assert logits_of(tiny, ids).shape == (len(ids), 151_936)


def test_tiny_bytes_preset(tiny: LoadedModel) -> None:
    params = sum(p.numel() for p in tiny.model.parameters())
    assert 1_000_000 < params < 10_000_000
    assert tiny.name == "tiny-bytes"
    assert isinstance(tiny.tokenizer, ByteTokenizer)
    assert tiny.tokenizer.chat_template is None
    assert tiny.config.vocab_size == 259
    assert tiny.max_context == PRESET_CONTEXT
    assert tiny.eos_token_id == ByteTokenizer.EOS
    assert not tiny.model.training


def test_presets_attend_with_sdpa(tiny: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layer's attention runs torch's scaled_dot_product_attention. (transformers keeps
    the chosen implementation only in the private ``config._attn_implementation``; this checks
    the behaviour instead.)"""
    calls: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(1)
        return sdpa(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    logits_of(tiny, list(b"attention"))
    assert len(calls) == tiny.config.num_hidden_layers


def test_presets_are_seeded(tiny: LoadedModel) -> None:
    again = load_model("tiny-bytes", seed=0)
    other = load_model("tiny-bytes", seed=1)
    ids = list(b"hello world")
    assert torch.equal(logits_of(tiny, ids), logits_of(again, ids))
    assert not torch.equal(logits_of(tiny, ids), logits_of(other, ids))


def test_preset_loading_leaves_global_rng_alone() -> None:
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    load_model("tiny-bytes", seed=7)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.slow
def test_small_preset_is_smollm_135m_shaped_with_qwen2_5_vocabulary() -> None:
    config = preset_config("small")
    assert config.model_type == "llama"
    assert (config.hidden_size, config.num_hidden_layers) == (576, 30)
    assert (config.num_attention_heads, config.num_key_value_heads) == (9, 3)
    assert (config.intermediate_size, config.vocab_size) == (1536, 151_936)
    assert config.max_position_embeddings == 32_768
    assert config.rope_parameters["rope_theta"] == 10000.0
    assert preset_config("small-bytes").vocab_size == 259
    small = load_model("small")
    params = sum(p.numel() for p in small.model.parameters())
    smollm_body = 134_515_008 - 49_152 * 576  # SmolLM-135M less its embedding (tied)
    assert params == smollm_body + 151_936 * 576
    assert small.model.config.architectures in (None, ["LlamaForCausalLM"])
    assert type(small.model).__name__ == "LlamaForCausalLM"
    assert isinstance(small.tokenizer, QwenTokenizer)
    assert set(PRESETS) == {"tiny", "small", "1b", "tiny-bytes", "small-bytes"}


def test_1b_preset_is_llama_3_2_1b_shaped_with_qwen2_5_vocabulary() -> None:
    """Only the config: its 1.2B random weights are for a GPU (benchmarks/gpu.sh)."""
    config = preset_config("1b")
    assert config.model_type == "llama"
    assert (config.hidden_size, config.num_hidden_layers) == (2048, 16)
    assert (config.num_attention_heads, config.num_key_value_heads) == (32, 8)
    assert config.intermediate_size == 8192
    assert config.tie_word_embeddings is True
    assert (config.vocab_size, config.max_position_embeddings) == (151_936, 32_768)
    assert config.eos_token_id == 151_645


def test_unknown_preset_name() -> None:
    with pytest.raises(EngineError, match="unknown model preset 'huge'"):
        preset_config("huge")


def test_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "nope"
    with pytest.raises(EngineError, match="does not exist") as info:
        load_model(str(path))
    assert str(path) in str(info.value)
    with pytest.raises(EngineError, match="does not exist"):
        load_model("huge")


def test_file_instead_of_directory(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"x")
    with pytest.raises(EngineError, match="not a directory") as info:
        load_model(path)
    assert str(path) in str(info.value)


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"no config\.json") as info:
        load_model(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_broken_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama", ')
    with pytest.raises(EngineError, match=r"malformed config\.json") as info:
        load_model(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_config_json_not_an_object(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(EngineError, match="not a JSON object") as info:
        load_model(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_unknown_model_type(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-model"}))
    with pytest.raises(EngineError, match="unsupported architecture") as info:
        load_model(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert "no-such-model" in str(info.value)
    assert info.value.__cause__ is not None


def test_non_causal_architecture(tmp_path: Path) -> None:
    from transformers import T5Config, ViTConfig

    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path)
    with pytest.raises(EngineError, match="unsupported architecture") as info:
        load_model(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert info.value.__cause__ is not None

    t5 = tmp_path / "t5"
    T5Config(d_model=32, num_layers=1, num_heads=2).save_pretrained(t5)
    with pytest.raises(EngineError, match=r"unsupported architecture.*encoder-decoder"):
        load_model(t5)


def test_sliding_window_architecture(tmp_path: Path) -> None:
    from transformers import MistralConfig

    MistralConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=300,
        sliding_window=16,
    ).save_pretrained(tmp_path)
    with pytest.raises(EngineError, match="sliding") as info:
        load_model(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_corrupt_weights(tmp_path: Path, tiny: LoadedModel) -> None:
    tiny.config.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(EngineError, match="cannot load weights") as info:
        load_model(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert info.value.__cause__ is not None


def test_vocab_too_small_for_byte_tokenizer(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        vocab_size=100,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(EngineError, match="too small for the built-in byte tokenizer"):
        load_model(tmp_path)


def test_save_pretrained_roundtrip(tmp_path: Path, tiny: LoadedModel) -> None:
    tiny.model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.name == tmp_path.name
    assert isinstance(loaded.tokenizer, ByteTokenizer)
    assert loaded.max_context == tiny.max_context
    assert loaded.eos_token_id == ByteTokenizer.EOS
    assert not loaded.model.training
    ids = list(b"The KV of a prefix is reusable.")
    assert torch.equal(logits_of(loaded, ids), logits_of(tiny, ids))
    a, b = ModelRunner(loaded), ModelRunner(tiny)
    sa, sb = a.new_state(), b.new_state()
    assert torch.equal(a.extend(sa, ids), b.extend(sb, ids))


def test_checkpoint_with_hf_tokenizer(tmp_path: Path, tiny: LoadedModel) -> None:
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", "hello", "world", "agent", "cache"]
    raw = RawTokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    raw.pre_tokenizer = Whitespace()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    hf.chat_template = TEMPLATE
    tiny.model.save_pretrained(tmp_path)
    hf.save_pretrained(tmp_path)

    loaded = load_model(tmp_path)
    tok = loaded.tokenizer
    assert isinstance(tok, HFTokenizer)
    assert isinstance(tok, Tokenizer)
    assert tok.vocab_size == len(words)
    assert loaded.eos_token_id == 2
    assert tok.encode("hello world") == [3, 4]
    assert tok.encode("hello") + tok.encode("cache") == tok.encode("hello cache")
    assert tok.decode([3, 2, 4]) == "hello world"
    assert tok.decode([5, 1000, -3]) == "agent"
    assert (tok.chat_template, tok.bos_token, tok.eos_token) == (TEMPLATE, "<s>", "</s>")
