"""The one tokenizer home (``agentwarm.engines.tokenizers``), used by the embedded engine and the
SGLang client alike: the byte tokenizer, the Hugging Face adapter, ``load_tokenizer``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from agentwarm.engines import sglang
from agentwarm.engines.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, load_tokenizer
from agentwarm.errors import EngineError

WORDS = ["<unk>", "<s>", "</s>", "hello", "world", "agent", "cache"]


@pytest.fixture
def hf_dir(tmp_path: Path) -> Path:
    """A saved word-level Hugging Face tokenizer: ids 0..6, ``</s>`` (2) its EOS."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    raw = RawTokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    raw.pre_tokenizer = Whitespace()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    hf.save_pretrained(tmp_path)
    return tmp_path


def test_byte_tokenizer() -> None:
    tok = ByteTokenizer()
    assert isinstance(tok, Tokenizer)
    text = "héllo, wörld — 你好 🙂"
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8"))
    assert all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == text
    assert tok.encode("") == []
    assert tok.encode("ab") + tok.encode("c") == tok.encode("abc")
    assert tok.vocab_size == 259
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id}) == 3
    assert tok.decode([tok.bos_token_id, *tok.encode("hi"), tok.eos_token_id, 9999, -1]) == "hi"
    assert tok.decode([0xE4, 0xBD]) == "\ufffd"
    assert tok.decode([*b"a", 0xFF]) == "a\ufffd"


def test_hf_tokenizer_adds_no_special_tokens_and_skips_unknown_ids(hf_dir: Path) -> None:
    tok = HFTokenizer.from_dir(hf_dir)
    assert isinstance(tok, Tokenizer)
    assert tok.path == str(hf_dir)
    assert repr(tok) == f"HFTokenizer({str(hf_dir)!r})"
    assert tok.vocab_size == len(WORDS)
    assert tok.eos_token_id == 2
    assert tok.encode("hello world") == [3, 4]
    assert tok.encode("hello") + tok.encode("cache") == tok.encode("hello cache")
    assert tok.decode([3, 2, 4]) == "hello world"
    assert tok.decode([5, 1000, -3]) == "agent"
    wrapped = HFTokenizer(tok.hf_tokenizer, eos_token_id=5)
    assert wrapped.eos_token_id == 5 and wrapped.path is None
    assert wrapped.encode("agent cache") == tok.encode("agent cache") == [5, 6]


def test_load_tokenizer_takes_none_byte_a_directory_or_an_object(hf_dir: Path) -> None:
    assert load_tokenizer(None) is None
    assert isinstance(load_tokenizer("byte"), ByteTokenizer)
    for spec in (hf_dir, str(hf_dir)):
        loaded = load_tokenizer(spec)
        assert isinstance(loaded, HFTokenizer)
        assert loaded.encode("world agent hello") == [4, 5, 3]

    class Words:
        def encode(self, text: str) -> list[int]:
            return [len(w) for w in text.split()]

        def decode(self, ids: Sequence[int]) -> str:
            return " ".join("x" * i for i in ids)

    mine = Words()
    assert load_tokenizer(mine) is mine


def test_load_tokenizer_never_downloads(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"cannot load a tokenizer .* without downloading"):
        load_tokenizer(tmp_path / "missing")


def test_the_sglang_client_and_the_embedded_engine_share_one_tokenizer_home() -> None:
    assert sglang.TextTokenizer is Tokenizer
    assert sglang.tokenizers.load_tokenizer is load_tokenizer
    assert sglang.tokenizers.ByteTokenizer is ByteTokenizer
    assert sglang.tokenizers.HFTokenizer is HFTokenizer
