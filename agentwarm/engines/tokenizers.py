"""Tokenizers of every engine: one protocol, the built-in byte tokenizer, a Hugging Face adapter.

The embedded engine (:mod:`agentwarm.engines.local`) loads one with its model; the SGLang
client (:mod:`agentwarm.engines.sglang`) takes one by :func:`load_tokenizer` (and falls back to
the server's ``/tokenize``, :class:`~agentwarm.engines.sglang.tokenizers.RemoteTokenizer`).

Rules every tokenizer keeps (the engine protocol relies on them, DESIGN §3):

* ``encode(text)`` never adds special tokens (no BOS/EOS), so the encodings of prompt segments
  can be concatenated and a prefix's ids are a prefix of the whole prompt's ids.
* ``decode(ids)`` never raises on ids the model can produce: unknown or special ids are skipped
  and invalid UTF-8 is replaced (U+FFFD), because a sampled model can emit anything in its vocab.

Loading never downloads, and this module imports neither torch nor (until a Hugging Face
tokenizer is loaded) transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentwarm.errors import EngineError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ("ByteTokenizer", "HFTokenizer", "Tokenizer", "load_tokenizer")


@runtime_checkable
class Tokenizer(Protocol):
    """What an engine needs from a tokenizer. See the module docstring for the rules."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, plus ``BOS`` (256), ``EOS`` (257) and ``PAD`` (258): the
    tokenizer of ``FakeEngine`` and of the built-in model presets.

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
    :meth:`from_dir` loads one from a local directory or an already cached hub id.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        eos_token_id: int | None = None,
        path: str | None = None,
    ) -> None:
        self._tok = tokenizer
        self._eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
        self._size = len(tokenizer)
        self.path = path
        """Where it was loaded from (:meth:`from_dir`), else ``None``."""

    @classmethod
    def from_dir(cls, path: str | Path) -> HFTokenizer:
        """Load the tokenizer saved in directory ``path`` (or cached as hub id ``path``);
        never downloads. Raises what transformers raises when it cannot."""
        from transformers import AutoTokenizer

        where = str(path)
        return cls(AutoTokenizer.from_pretrained(where, local_files_only=True), path=where)

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
        if self.path is not None:
            return f"HFTokenizer({self.path!r})"
        return f"HFTokenizer({type(self._tok).__name__}, vocab_size={self._size})"


def load_tokenizer(spec: str | Path | Tokenizer | None) -> Tokenizer | None:
    """``None``, ``"byte"``, a local tokenizer directory / cached hub id, or a tokenizer object
    (returned as is). Raises :class:`~agentwarm.errors.EngineError` when a directory cannot be
    loaded without downloading."""
    if spec is None:
        return None
    if isinstance(spec, Tokenizer) and not isinstance(spec, str | Path):
        return spec
    if spec == "byte":
        return ByteTokenizer()
    try:
        return HFTokenizer.from_dir(spec)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ...
        raise EngineError(
            f"cannot load a tokenizer from {str(spec)!r} without downloading: {exc}"
        ) from exc
