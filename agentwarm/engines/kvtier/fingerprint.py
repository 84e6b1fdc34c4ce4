"""The fingerprint of what produced a KV: a block is loaded only by an engine whose fingerprint
is the one in its header.

:func:`model_fingerprint` digests, for a loaded model (anything with ``model``, ``config``,
``tokenizer`` and ``dtype``, e.g. :class:`~agentwarm.engines.local.model.LoadedModel`):

* the config (the transformers config's JSON, sorted, without ``_name_or_path``: the same
  checkpoint moved elsewhere is the same model), and the attention implementation;
* the weights (:func:`weights_digest`): every parameter's and buffer's name, shape and dtype, and
  :data:`SAMPLES_PER_TENSOR` values sampled at evenly spaced positions of each. A different
  checkpoint of the same architecture (another seed, a fine-tune, a requantisation) changes
  almost every value, so thousands of samples (17,536 for ``small``) see it, while reading them
  costs ~50 ms here; hashing every byte would take seconds for a 1B model at each start. An edit
  confined to values that are not sampled is not seen: accepted, and stated;
* the dtype the model runs in; not the device (the digest reads the same values on any device);
* the tokenizer (:func:`tokenizer_digest`): its class and vocabulary size, and for a Hugging Face
  tokenizer every ``(id, token)`` of its vocabulary, for the built-in ones (whose vocabularies
  are fixed by the code) the ids of a probe text;
* the engine settings that change numerics (``chunk_size`` and whatever else the engine passes),
  and the torch and transformers versions (a kernel change may change the last bits).

The result is 32 hex characters (128 bits of blake2b).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from itertools import chain
from typing import Any, Protocol

import torch

__all__ = (
    "FINGERPRINT_VERSION",
    "SAMPLES_PER_TENSOR",
    "FingerprintSource",
    "config_json",
    "fingerprint_of",
    "model_fingerprint",
    "tokenizer_digest",
    "weights_digest",
)

FINGERPRINT_VERSION = 1
SAMPLES_PER_TENSOR = 64
"""Values of each weight tensor the digest reads."""

_PROBE = (
    "The quick brown fox jumps over the lazy dog. 0123456789 ä ß é ñ 中文 日本語 한국어 "
    "<|im_start|>user\n{'tool': \"call\", 'x': [1, 2.5e-3]}<|im_end|>\n\t def f(): return 42 🙂"
)


class FingerprintSource(Protocol):
    """What :func:`model_fingerprint` reads (``LoadedModel`` has it)."""

    @property
    def model(self) -> torch.nn.Module: ...

    @property
    def config(self) -> Any: ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def dtype(self) -> torch.dtype: ...


def model_fingerprint(
    loaded: FingerprintSource, *, chunk_size: int, settings: Mapping[str, object] | None = None
) -> str:
    """The fingerprint of the KV that ``loaded`` computes with prefill chunks of
    ``chunk_size`` tokens and the other numerics-changing ``settings`` (JSON-able values)."""
    return fingerprint_of(
        config=config_json(loaded.config),
        weights=weights_digest(loaded.model),
        dtype=str(loaded.dtype),
        tokenizer=tokenizer_digest(loaded.tokenizer),
        settings={"chunk_size": chunk_size, **(settings or {})},
    )


def fingerprint_of(
    *, config: str, weights: str, dtype: str, tokenizer: str, settings: Mapping[str, object]
) -> str:
    """The fingerprint of these parts (the digests the other functions here make)."""
    import transformers

    doc = {
        "version": FINGERPRINT_VERSION,
        "config": config,
        "weights": weights,
        "dtype": dtype,
        "tokenizer": tokenizer,
        "settings": dict(settings),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def config_json(config: Any) -> str:
    """The config's fields as sorted JSON, without where it was loaded from; with the
    attention implementation the model runs."""
    fields = dict(config.to_dict()) if hasattr(config, "to_dict") else dict(vars(config))
    fields.pop("_name_or_path", None)
    fields["_attn_implementation"] = getattr(config, "_attn_implementation", None)
    return json.dumps(fields, sort_keys=True, default=str)


def weights_digest(module: torch.nn.Module, samples: int = SAMPLES_PER_TENSOR) -> str:
    """A digest of ``module``'s parameters and buffers: names, shapes, dtypes and ``samples``
    evenly spaced values of each (read on whatever device they are on)."""
    digest = hashlib.blake2b(digest_size=16)
    tensors = chain(module.named_parameters(), module.named_buffers())
    with torch.no_grad():
        for name, tensor in tensors:
            digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}\n".encode())
            flat = tensor.detach().reshape(-1)
            count = flat.numel()
            if count == 0:
                continue
            where = torch.linspace(0, count - 1, min(count, samples), dtype=torch.float64)
            picked = flat.index_select(0, where.round().long().to(flat.device)).cpu()
            digest.update(picked.contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def tokenizer_digest(tokenizer: Any) -> str:
    """A digest of ``tokenizer``'s identity: class, vocabulary size, and its vocabulary (a
    Hugging Face tokenizer's ``get_vocab()``) or the ids of a probe text (a built-in one)."""
    digest = hashlib.blake2b(digest_size=16)
    size = getattr(tokenizer, "vocab_size", None)
    digest.update(f"{type(tokenizer).__qualname__}|{size}\n".encode())
    hf = getattr(tokenizer, "hf_tokenizer", None)
    if hf is not None:
        for token, index in sorted(hf.get_vocab().items(), key=lambda item: item[1]):
            digest.update(f"{index}\t{token}\n".encode("utf-8", "surrogatepass"))
    else:
        digest.update(repr(tokenizer).encode())
        digest.update(json.dumps(list(tokenizer.encode(_PROBE))).encode())
    return digest.hexdigest()
