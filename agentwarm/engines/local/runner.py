"""The model runner: chunked prefill and decode on top of cached prefix KV, batch size 1.

KV layout
---------
A :data:`KV` is one tensor of shape ``[num_layers, 2, num_kv_heads, seq, head_dim]`` (index 0 of
dim 1 is K, index 1 is V) in the model's dtype and device, holding the K/V of ``seq`` consecutive
tokens (after rotary embedding, so a KV is only valid at the positions it was computed at: a
prefix's KV must be placed at the start of a sequence). Helpers: :func:`kv_len`,
:func:`slice_kv` (a view unless ``copy=True``), :func:`concat_kv`, :func:`kv_nbytes`,
:func:`empty_kv`, and :data:`KV_OPS` (the radix cache's payload operations). A view shares
storage with its base, so whoever stores KV long-term (the radix cache) should store copies, or
evicting one piece frees nothing; ``KV_OPS.slice`` and :meth:`SequenceState.kv` return copies.

Per-request state
-----------------
:class:`SequenceState` holds the KV of tokens ``[0, length)`` of one request in a growable
buffer. Build it once with :meth:`ModelRunner.new_state` from the matched cached prefix (a list of
KV pieces, copied once into the buffer), then call :meth:`ModelRunner.extend` for each prefill
chunk and for each decoded token; the buffer grows by doubling, so a chunk never re-copies the
whole past. :meth:`SequenceState.kv` copies out the KV of a token range for insertion into the
radix cache; :meth:`SequenceState.append_kv` appends cached KV that continues the state's tokens
(e.g. chunks another request computed meanwhile); :meth:`SequenceState.truncate` drops a tail.
:func:`sample` picks the next token (greedy, or temperature with a seeded generator from
:func:`make_generator`).

Rules callers keep
------------------
* All calls for one model come from a single thread (the engine's worker); the runner holds no
  lock. Outside that thread, only the module-level KV helpers may be used.
* ``extend`` appends at position ``state.length``; the ids must be the tokens that follow the
  tokens whose KV the state holds. ``length + len(ids)`` must not exceed ``max_context``.
* ``extend`` returns the float32 logits of the *last* position only (shape ``[vocab]``); the
  lm_head is never applied to other positions. ``want_logits=False`` skips it entirely and
  returns ``None`` (speculative prefill needs no logits).
* If ``extend`` raises, the state is unchanged (KV written past ``length`` is ignored).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import torch
from transformers.cache_utils import Cache, DynamicLayer

from agentwarm.errors import EngineError, InvalidRequest

if TYPE_CHECKING:
    from agentwarm.engines.local.model import LoadedModel
    from agentwarm.engines.tokenizers import Tokenizer

__all__ = (
    "KV",
    "KV_OPS",
    "Interrupted",
    "KVOps",
    "ModelRunner",
    "SequenceState",
    "concat_kv",
    "empty_kv",
    "kv_len",
    "kv_nbytes",
    "make_generator",
    "sample",
    "slice_kv",
)

KV = torch.Tensor
"""K/V of consecutive tokens: ``[num_layers, 2, num_kv_heads, seq, head_dim]``."""

SEQ_DIM = 3
_MIN_CAPACITY = 256


def kv_len(kv: KV) -> int:
    """Number of tokens in ``kv``."""
    return int(kv.shape[SEQ_DIM])


def kv_nbytes(kv: KV) -> int:
    """Bytes of the elements of ``kv`` (of the view, not of a larger base it may share)."""
    return kv.numel() * kv.element_size()


def slice_kv(kv: KV, start: int, end: int, *, copy: bool = False) -> KV:
    """Tokens ``[start, end)`` of ``kv``: a view sharing storage, or a compact copy."""
    if not 0 <= start <= end <= kv_len(kv):
        raise ValueError(f"slice [{start}, {end}) out of range for KV of {kv_len(kv)} tokens")
    view = kv.narrow(SEQ_DIM, start, end - start)
    return view.clone(memory_format=torch.contiguous_format) if copy else view


def concat_kv(parts: Sequence[KV]) -> KV:
    """The KV of ``parts`` one after another, as a new contiguous tensor (one copy).

    A single part is returned as is (no copy). ``parts`` must not be empty.
    """
    if not parts:
        raise ValueError("concat_kv needs at least one part")
    if len(parts) == 1:
        return parts[0]
    with torch.inference_mode():
        return torch.cat(list(parts), dim=SEQ_DIM)


def empty_kv(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> KV:
    """A KV of zero tokens."""
    return torch.empty(num_layers, 2, num_kv_heads, 0, head_dim, dtype=dtype, device=device)


class KVOps:
    """Payload operations for :class:`~agentwarm.engines.radix.RadixCache` nodes holding KV.

    ``slice`` returns compact copies, so a stored piece never keeps a larger tensor alive.
    """

    def length(self, value: KV) -> int:
        return kv_len(value)

    def slice(self, value: KV, start: int, stop: int) -> KV:
        return slice_kv(value, start, stop, copy=True)


KV_OPS = KVOps()


def make_generator(seed: int | None, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device``, seeded with ``seed`` (random if ``None``)."""
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen


def sample(
    logits: torch.Tensor,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> int:
    """Pick the next token from last-position ``logits`` (shape ``[vocab]``).

    ``temperature <= 0`` is greedy (argmax; ties go to the lowest id). Otherwise sample from
    ``softmax(logits / temperature)`` with ``generator``, which must live on ``logits.device``.
    """
    if temperature <= 0.0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


class Interrupted(Exception):
    """An :meth:`ModelRunner.extend` stopped between two layers because its state's
    ``interrupt`` said so. Nothing was appended: the state is as before the call."""


class SequenceState:
    """KV of tokens ``[0, length)`` of one request, in a buffer that grows by doubling.

    Created by :meth:`ModelRunner.new_state`; advanced only by :meth:`ModelRunner.extend`.
    ``interrupt``, when set, is called before each layer of an ``extend``; if it returns true
    the forward pass stops there with :class:`Interrupted` (the scheduler uses it to let a live
    request in without waiting for a whole speculative chunk).
    """

    def __init__(self, buffer: KV, length: int, max_context: int) -> None:
        self._buf = buffer
        self._length = length
        self._max_context = max_context
        self.interrupt: Callable[[], bool] | None = None
        self.cache = _StateCache(self, int(buffer.shape[0]))

    @property
    def length(self) -> int:
        """Tokens whose KV the state holds."""
        return self._length

    @property
    def capacity(self) -> int:
        return int(self._buf.shape[SEQ_DIM])

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffer (capacity, not length)."""
        return kv_nbytes(self._buf)

    def kv(self, start: int = 0, end: int | None = None) -> KV:
        """A compact copy of the KV of tokens ``[start, end)`` (default: all), safe to keep."""
        stop = self._length if end is None else end
        if not 0 <= start <= stop <= self._length:
            raise ValueError(f"range [{start}, {stop}) out of range for state of {self._length}")
        with torch.inference_mode():
            return slice_kv(self._buf, start, stop, copy=True)

    def append_kv(self, kv: KV) -> None:
        """Append the KV of the tokens at positions ``[length, length + kv_len(kv))``.

        ``kv`` must have been computed at exactly those positions (e.g. cached nodes that
        continue the prefix this state holds); it is copied into the buffer.
        """
        buf = self._buf
        if (
            kv.dim() != 5
            or kv.shape[:SEQ_DIM] != buf.shape[:SEQ_DIM]
            or kv.shape[-1] != buf.shape[-1]
            or kv.dtype != buf.dtype
            or kv.device != buf.device
        ):
            raise ValueError(
                f"KV of shape {tuple(kv.shape)} {kv.dtype} on {kv.device} does not fit a state "
                f"of shape {tuple(buf.shape)} {buf.dtype} on {buf.device}"
            )
        n = kv_len(kv)
        if self._length + n > self._max_context:
            raise InvalidRequest(
                f"sequence of {self._length + n} tokens exceeds the context of {self._max_context}"
            )
        self.reserve(self._length + n)
        with torch.inference_mode():
            self._buf.narrow(SEQ_DIM, self._length, n).copy_(kv)
        self._length += n

    def truncate(self, length: int) -> None:
        """Forget the KV of tokens from ``length`` on (capacity is kept)."""
        if not 0 <= length <= self._length:
            raise ValueError(f"cannot truncate state of {self._length} tokens to {length}")
        self._length = length

    def reserve(self, length: int) -> None:
        """Make room for ``length`` tokens (grows to at least double, capped at max_context)."""
        cap = self.capacity
        if length <= cap:
            return
        new_cap = min(max(length, 2 * cap, _MIN_CAPACITY), max(self._max_context, length))
        shape = list(self._buf.shape)
        shape[SEQ_DIM] = new_cap
        with torch.inference_mode():
            buf = torch.empty(shape, dtype=self._buf.dtype, device=self._buf.device)
            buf.narrow(SEQ_DIM, 0, self._length).copy_(self._buf.narrow(SEQ_DIM, 0, self._length))
        self._buf = buf

    def _write(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.interrupt is not None and self.interrupt():
            raise Interrupted(f"extend at position {self._length} interrupted at layer {layer}")
        start = self._length
        end = start + int(keys.shape[-2])
        k_buf = self._buf[layer, 0]
        v_buf = self._buf[layer, 1]
        k_buf[:, start:end].copy_(keys[0])
        v_buf[:, start:end].copy_(values[0])
        return k_buf[:, :end].unsqueeze(0), v_buf[:, :end].unsqueeze(0)

    def _advance(self, n: int) -> None:
        self._length += n

    def __repr__(self) -> str:
        return f"SequenceState(length={self._length}, capacity={self.capacity})"


class _StateLayer(DynamicLayer):
    """A transformers cache layer that writes into its :class:`SequenceState` buffer."""

    is_croppable = False

    def __init__(self, state: SequenceState, index: int) -> None:
        super().__init__()
        self._state = state
        self._index = index
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self._state._write(self._index, key_states, value_states)
        self.keys, self.values = keys, values
        return keys, values

    def get_seq_length(self) -> int:
        return self._state.length

    def reset(self) -> None:
        self._state.truncate(0)

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("use SequenceState.truncate")


class _StateCache(Cache):
    def __init__(self, state: SequenceState, num_layers: int) -> None:
        super().__init__(layers=[_StateLayer(state, i) for i in range(num_layers)])


class ModelRunner:
    """Runs a loaded causal LM one request at a time over :class:`SequenceState` objects.

    See the module docstring for the KV layout and the rules callers keep.
    """

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.model = loaded.model
        config = loaded.config.get_text_config(decoder=True)
        self.num_layers = int(config.num_hidden_layers)
        self.num_kv_heads = int(
            getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        )
        self.head_dim = int(
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        self.vocab_size = int(config.vocab_size)
        self.max_context = loaded.max_context
        self.device = loaded.device
        self.dtype = loaded.dtype
        self._base = self.model.get_decoder()

    @property
    def tokenizer(self) -> Tokenizer:
        return self.loaded.tokenizer

    @property
    def eos_token_id(self) -> int | None:
        return self.loaded.eos_token_id

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV one token takes (all layers, K and V)."""
        item = torch.empty((), dtype=self.dtype).element_size()
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * item

    def empty_kv(self) -> KV:
        """A KV of zero tokens with this model's geometry."""
        return empty_kv(
            self.num_layers, self.num_kv_heads, self.head_dim, dtype=self.dtype, device=self.device
        )

    def check_kv(self, kv: KV) -> None:
        """Raise ``ValueError`` unless ``kv`` has this model's geometry, dtype and device."""
        want = (self.num_layers, 2, self.num_kv_heads, self.head_dim)
        got = (*kv.shape[:SEQ_DIM], kv.shape[-1]) if kv.dim() == 5 else tuple(kv.shape)
        if kv.dim() != 5 or got != want or kv.dtype != self.dtype or kv.device != self.device:
            raise ValueError(
                f"KV of shape {tuple(kv.shape)} {kv.dtype} on {kv.device} does not fit the model "
                f"(want [{want[0]}, 2, {want[2]}, seq, {want[3]}] {self.dtype} on {self.device})"
            )

    def new_state(self, prefix: Sequence[KV] = (), *, reserve: int = 0) -> SequenceState:
        """A state holding the concatenation of the ``prefix`` KV pieces (copied once).

        ``reserve`` is the number of further tokens expected (prompt suffix + decode budget), so
        that the buffer need not grow; it is a hint, the state grows as needed.
        """
        length = 0
        for part in prefix:
            self.check_kv(part)
            length += kv_len(part)
        if length > self.max_context:
            raise InvalidRequest(f"prefix of {length} tokens exceeds context of {self.max_context}")
        cap = min(max(length + reserve, _MIN_CAPACITY), max(self.max_context, length))
        with torch.inference_mode():
            buf = torch.empty(
                self.num_layers,
                2,
                self.num_kv_heads,
                cap,
                self.head_dim,
                dtype=self.dtype,
                device=self.device,
            )
            pos = 0
            for part in prefix:
                n = kv_len(part)
                buf.narrow(SEQ_DIM, pos, n).copy_(part)
                pos += n
        return SequenceState(buf, length, self.max_context)

    @overload
    def extend(
        self, state: SequenceState, ids: Sequence[int], *, want_logits: Literal[True] = ...
    ) -> torch.Tensor: ...

    @overload
    def extend(
        self, state: SequenceState, ids: Sequence[int], *, want_logits: bool
    ) -> torch.Tensor | None: ...

    def extend(
        self, state: SequenceState, ids: Sequence[int], *, want_logits: bool = True
    ) -> torch.Tensor | None:
        """Run ``ids`` at positions ``[state.length, state.length + len(ids))``.

        Appends their KV to ``state`` and returns the float32 logits of the last position
        (``[vocab]``), or ``None`` when ``want_logits`` is false. Raises
        :class:`~agentwarm.errors.InvalidRequest` for empty ids, ids outside the vocabulary or a
        sequence past ``max_context``; :class:`~agentwarm.errors.EngineError` if torch fails.
        """
        n = len(ids)
        if n == 0:
            raise InvalidRequest("extend needs at least one token id")
        start = state.length
        if start + n > self.max_context:
            raise InvalidRequest(
                f"sequence of {start + n} tokens exceeds the model context of {self.max_context}"
            )
        lo, hi = min(ids), max(ids)
        if lo < 0 or hi >= self.vocab_size:
            bad = lo if lo < 0 else hi
            raise InvalidRequest(f"token id {bad} outside vocabulary of {self.vocab_size}")
        try:
            with torch.inference_mode():
                input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
                position_ids = torch.arange(start, start + n, device=self.device).unsqueeze(0)
                state.reserve(start + n)
                if want_logits:
                    out = self.model(
                        input_ids=input_ids,
                        position_ids=position_ids,
                        cache=state.cache,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                    logits: torch.Tensor | None = out.logits[0, -1].float()
                else:
                    self._base(
                        input_ids=input_ids,
                        position_ids=position_ids,
                        cache=state.cache,
                        use_cache=True,
                    )
                    logits = None
        except (RuntimeError, ValueError, IndexError) as exc:
            raise EngineError(f"model forward failed at position {start} (+{n}): {exc}") from exc
        state._advance(n)
        return logits

    def decode_step(self, state: SequenceState, token_id: int) -> torch.Tensor:
        """Append one token and return the next-token logits (``[vocab]``, float32)."""
        return self.extend(state, (token_id,))

    def prefill(
        self, state: SequenceState, ids: Sequence[int], *, chunk_size: int = 256
    ) -> torch.Tensor:
        """Extend ``state`` by ``ids`` in chunks of ``chunk_size``; logits of the last position."""
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        if not ids:
            raise InvalidRequest("prefill needs at least one token id")
        logits: torch.Tensor | None = None
        for pos in range(0, len(ids), chunk_size):
            chunk = ids[pos : pos + chunk_size]
            last = pos + chunk_size >= len(ids)
            logits = self.extend(state, chunk, want_logits=last)
        assert logits is not None
        return logits

    def forward_full(self, ids: Sequence[int]) -> torch.Tensor:
        """Cold reference: plain ``model(ids)`` without any cache; logits of every position.

        Shape ``[len(ids), vocab]``, float32. For tests and benchmarks, not for serving.
        """
        with torch.inference_mode():
            input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
            out = self.model(input_ids=input_ids, use_cache=False)
            return out.logits[0].float()
