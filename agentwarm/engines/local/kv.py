"""The KV of the embedded engine: its tensor layout, the helpers and the cache's payload
operations on it, and :class:`SequenceState`, the growable KV buffer of one request.

KV layout
---------
A :data:`KV` is one tensor of shape ``[num_layers, 2, num_kv_heads, seq, head_dim]`` (index 0 of
dim 1 is K, index 1 is V) in the model's dtype and device, holding the K/V of ``seq`` consecutive
tokens (after rotary embedding, so a KV is only valid at the positions it was computed at: a
prefix's KV must be placed at the start of a sequence). Helpers: :func:`kv_len`,
:func:`slice_kv` (a view unless ``copy=True``) and :data:`KV_OPS` (the radix cache's payload
operations). A view shares storage with its base, so whoever stores KV long-term (the radix
cache) should store copies, or evicting one piece frees nothing; ``KV_OPS.slice`` and
:meth:`SequenceState.kv` return copies.

Per-request state
-----------------
:class:`SequenceState` holds the KV of tokens ``[0, length)`` of one request in a growable
buffer; :class:`~agentwarm.engines.local.runner.ModelRunner` builds it and advances it. The
buffer grows by doubling, so a chunk never re-copies the whole past.
:meth:`SequenceState.kv` copies out the KV of a token range for insertion into the radix cache;
:meth:`SequenceState.truncate` drops a tail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

__all__ = (
    "KV",
    "KV_OPS",
    "Interrupted",
    "KVOps",
    "SequenceState",
    "kv_len",
    "slice_kv",
)

KV = torch.Tensor
"""K/V of consecutive tokens: ``[num_layers, 2, num_kv_heads, seq, head_dim]``."""

SEQ_DIM = 3
MIN_CAPACITY = 256
"""The smallest buffer a state allocates, in tokens."""


def kv_len(kv: KV) -> int:
    """Number of tokens in ``kv``."""
    return int(kv.shape[SEQ_DIM])


def slice_kv(kv: KV, start: int, end: int, *, copy: bool = False) -> KV:
    """Tokens ``[start, end)`` of ``kv``: a view sharing storage, or a compact copy."""
    if not 0 <= start <= end <= kv_len(kv):
        raise ValueError(f"slice [{start}, {end}) out of range for KV of {kv_len(kv)} tokens")
    view = kv.narrow(SEQ_DIM, start, end - start)
    return view.clone(memory_format=torch.contiguous_format) if copy else view


class KVOps:
    """Payload operations for :class:`~agentwarm.engines.radix.RadixCache` nodes holding KV.

    ``slice`` returns compact copies, so a stored piece never keeps a larger tensor alive.
    """

    def length(self, value: KV) -> int:
        return kv_len(value)

    def slice(self, value: KV, start: int, stop: int) -> KV:
        return slice_kv(value, start, stop, copy=True)


KV_OPS = KVOps()


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

    def kv(self, start: int = 0, end: int | None = None) -> KV:
        """A compact copy of the KV of tokens ``[start, end)`` (default: all), safe to keep."""
        stop = self._length if end is None else end
        if not 0 <= start <= stop <= self._length:
            raise ValueError(f"range [{start}, {stop}) out of range for state of {self._length}")
        with torch.inference_mode():
            return slice_kv(self._buf, start, stop, copy=True)

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
        new_cap = min(max(length, 2 * cap, MIN_CAPACITY), max(self._max_context, length))
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
