"""Tokenizers of the embedded engine: a protocol, a built-in byte tokenizer, a HF adapter.

Rules every tokenizer keeps (the engine protocol relies on them, DESIGN §3):

* ``encode(text)`` never adds special tokens (no BOS/EOS), so the encodings of prompt segments
  can be concatenated and a prefix's ids are a prefix of the whole prompt's ids.
* ``decode(ids)`` never raises on ids the model can produce: unknown or special ids are skipped
  and invalid UTF-8 is replaced (U+FFFD), because a sampled model can emit anything in its vocab.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ("ByteTokenizer", "HFTokenizer", "Tokenizer")


@runtime_checkable
class Tokenizer(Protocol):
    """What the engine needs from a tokenizer. See the module docstring for the rules."""

    @property
    def eos_token_id(self) -> int | None: ...

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, plus ``BOS`` (256), ``EOS`` (257) and ``PAD`` (258).

    Lossless for any text; ``decode`` skips special and out-of-range ids.
    """

    BOS = 256
    EOS = 257
    PAD = 258
    VOCAB_SIZE = 259

    @property
    def eos_token_id(self) -> int:
        return self.EOS

    @property
    def bos_token_id(self) -> int:
        return self.BOS

    @property
    def pad_token_id(self) -> int:
        return self.PAD

    @property
    def vocab_size(self) -> int:
        return self.VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        data = bytes(int(i) for i in ids if 0 <= int(i) < 256)
        return data.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return "ByteTokenizer()"


class HFTokenizer:
    """Adapter of a Hugging Face tokenizer to :class:`Tokenizer`.

    ``encode`` passes ``add_special_tokens=False``; ``decode`` skips special tokens and ids outside
    the tokenizer's vocabulary (a model's embedding matrix is often padded past it).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, eos_token_id: int | None = None):
        self._tok = tokenizer
        self._eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
        self._size = len(tokenizer)

    @classmethod
    def from_dir(cls, path: str | Path) -> HFTokenizer:
        """Load the tokenizer saved in checkpoint directory ``path`` (no download)."""
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(path), local_files_only=True))

    @property
    def hf_tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tok

    @property
    def eos_token_id(self) -> int | None:
        return self._eos

    @property
    def vocab_size(self) -> int:
        return self._size

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        valid = [int(i) for i in ids if 0 <= int(i) < self._size]
        return str(self._tok.decode(valid, skip_special_tokens=True))

    def __repr__(self) -> str:
        return f"HFTokenizer({type(self._tok).__name__}, vocab_size={self._size})"
