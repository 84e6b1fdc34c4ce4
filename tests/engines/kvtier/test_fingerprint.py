"""``model_fingerprint``: the same model gives the same fingerprint; anything that changes the
KV (weights, config, dtype, tokenizer, chunking) gives another."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from agentwarm.engines.kvtier import model_fingerprint
from agentwarm.engines.kvtier.fingerprint import (
    config_json,
    fingerprint_of,
    tokenizer_digest,
    weights_digest,
)
from agentwarm.engines.local.model import LoadedModel, load_model
from agentwarm.engines.tokenizers import ByteTokenizer, HFTokenizer, QwenTokenizer


@pytest.fixture(scope="module")
def model() -> LoadedModel:
    return load_model("tiny-bytes", seed=0)


def test_the_same_model_loaded_twice_has_the_same_fingerprint(model: LoadedModel) -> None:
    again = load_model("tiny-bytes", seed=0)
    assert again.model is not model.model
    fingerprint = model_fingerprint(model, chunk_size=256)
    assert fingerprint == model_fingerprint(again, chunk_size=256)
    assert len(fingerprint) == 32 and int(fingerprint, 16) >= 0


def test_other_weights_config_dtype_or_settings_change_it(model: LoadedModel) -> None:
    base = model_fingerprint(model, chunk_size=256)
    assert model_fingerprint(load_model("tiny-bytes", seed=1), chunk_size=256) != base
    half = load_model("tiny-bytes", seed=0, dtype=torch.bfloat16)
    assert model_fingerprint(half, chunk_size=256) != base
    assert model_fingerprint(model, chunk_size=128) != base
    assert model_fingerprint(model, chunk_size=256, settings={"attention": "eager"}) != base


def test_one_sampled_weight_changes_the_weights_digest() -> None:
    model = load_model("tiny-bytes", seed=0)
    before = weights_digest(model.model)
    name, weight = next(iter(model.model.named_parameters()))
    with torch.no_grad():
        weight.view(-1)[0] += 1.0  # the first value of every tensor is sampled
    assert weights_digest(model.model) != before, name


def test_the_digest_samples_a_few_values_per_tensor_and_is_cheap(model: LoadedModel) -> None:
    # a changed value between two samples is not seen: the price of not hashing every byte
    weight = next(iter(model.model.parameters()))
    before = weights_digest(model.model)
    with torch.no_grad():
        weight.view(-1)[1] += 1.0
        try:
            assert weights_digest(model.model) == before
        finally:
            weight.view(-1)[1] -= 1.0


def test_the_config_digest_ignores_where_the_model_was_loaded_from(model: LoadedModel) -> None:
    config = model.config
    text = config_json(config)
    moved = type(config).from_dict(config.to_dict())
    moved._name_or_path = "/somewhere/else"
    moved._attn_implementation = config._attn_implementation
    assert config_json(moved) == text
    moved.rms_norm_eps = 1e-6
    assert config_json(moved) != text
    moved.rms_norm_eps = config.rms_norm_eps
    moved._attn_implementation = "eager"
    assert config_json(moved) != text
    assert '"_attn_implementation": "sdpa"' in text


def test_tokenizers_are_told_apart(tmp_path: Path) -> None:
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    def hf(words: list[str]) -> HFTokenizer:
        raw = RawTokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
        return HFTokenizer(PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>"))

    a, b = hf(["<unk>", "hello", "world"]), hf(["<unk>", "world", "hello"])
    digests = {
        tokenizer_digest(ByteTokenizer()),
        tokenizer_digest(QwenTokenizer()),
        tokenizer_digest(a),
        tokenizer_digest(b),
    }
    assert len(digests) == 4
    assert tokenizer_digest(hf(["<unk>", "hello", "world"])) == tokenizer_digest(a)
    assert tokenizer_digest(QwenTokenizer()) == tokenizer_digest(QwenTokenizer())


def test_a_loaded_model_with_another_tokenizer_has_another_fingerprint(
    model: LoadedModel,
) -> None:
    class Renumbered(ByteTokenizer):
        def encode(self, text: str) -> list[int]:
            return [255 - i for i in super().encode(text)]

    other = dataclasses.replace(model, tokenizer=Renumbered())
    assert model_fingerprint(other, chunk_size=256) != model_fingerprint(model, chunk_size=256)


def test_the_parts_are_all_in_the_fingerprint() -> None:
    parts = {"config": "c", "weights": "w", "dtype": "d", "tokenizer": "t"}
    base = fingerprint_of(**parts, settings={"chunk_size": 1})
    for name in parts:
        assert fingerprint_of(**{**parts, name: "x"}, settings={"chunk_size": 1}) != base
    assert fingerprint_of(**parts, settings={"chunk_size": 2}) != base


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_fingerprint_does_not_depend_on_the_device() -> None:
    cpu = load_model("tiny-bytes", seed=0)
    gpu = load_model("tiny-bytes", seed=0, device="cuda")
    assert model_fingerprint(gpu, chunk_size=256) == model_fingerprint(cpu, chunk_size=256)
