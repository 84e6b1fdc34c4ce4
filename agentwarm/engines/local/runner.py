"""The model runner: chunked prefill and decode on top of cached prefix KV, batch size 1.

The KV layout and the per-request :class:`~agentwarm.engines.local.kv.SequenceState` are
described in :mod:`agentwarm.engines.local.kv`. Build a state once with
:meth:`ModelRunner.new_state` from the matched cached prefix (a list of KV pieces, copied once
into the buffer), then call :meth:`ModelRunner.extend` for each prefill chunk and for each
decoded token. :func:`sample` picks the next token (greedy, or temperature with a seeded
generator from :func:`make_generator`).

Rules callers keep
------------------
* All calls for one model come from a single thread (the engine's worker); the runner holds no
  lock. Outside that thread, only the KV helpers of :mod:`~agentwarm.engines.local.kv` may be
  used.
* ``extend`` appends at position ``state.length``; the ids must be the tokens that follow the
  tokens whose KV the state holds. ``length + len(ids)`` must not exceed ``max_context``.
* ``extend`` returns the float32 logits of the *last* position only (shape ``[vocab]``); the
  lm_head is never applied to other positions. ``want_logits=False`` skips it entirely and
  returns ``None`` (speculative prefill needs no logits).
* If ``extend`` raises, the state is unchanged (KV written past ``length`` is ignored).

Devices and dtypes
------------------
The runner works on whatever device and dtype the loaded model has: the KV buffers, the ids and
positions it feeds the model and the sampling generator are created there, and the logits stay
there (float32); the ids go in without blocking (pinned memory), and the only device-to-host
transfer per step is the sampled token id. On CUDA an ``extend`` first waits for the previous
one's kernels, so at most one chunk is queued on the GPU ahead of the scheduler's decisions.
:func:`resolve_device` and :func:`resolve_dtype` turn the user's ``device``/``dtype`` options
(``"cuda"``, ``"bfloat16"``...) into torch objects, failing with the fix when CUDA is asked for
and not available; :func:`cuda_cache_bytes` is the KV budget a CUDA engine defaults to.

``KV`` and ``KV_OPS`` are re-exported here, where ``LocalEngine`` imports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

import torch

from agentwarm.engines.local.kv import (
    KV,
    KV_OPS,
    MIN_CAPACITY,
    SEQ_DIM,
    SequenceState,
    kv_len,
)
from agentwarm.errors import EngineError, InvalidRequest

if TYPE_CHECKING:
    from agentwarm.engines.local.model import LoadedModel
    from agentwarm.engines.tokenizers import Tokenizer

__all__ = (
    "DTYPES",
    "KV",
    "KV_OPS",
    "ModelRunner",
    "cuda_cache_bytes",
    "make_generator",
    "resolve_device",
    "resolve_dtype",
    "sample",
)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}
"""The dtype names ``LocalEngine(dtype=...)`` and ``--dtype`` accept."""


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype named ``dtype`` (a key of :data:`DTYPES` or one of their torch dtypes).

    Raises :class:`~agentwarm.errors.InvalidRequest` for anything else.
    """
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPES.values():
            return dtype
    elif isinstance(dtype, str) and dtype.lower() in DTYPES:
        return DTYPES[dtype.lower()]
    raise InvalidRequest(f"unsupported dtype {dtype!r}: use float32, bfloat16 or float16")


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device named ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``...).

    ``"cuda"`` becomes the current CUDA device with its index (``cuda:0``), the device the
    model's parameters report. Raises :class:`~agentwarm.errors.EngineError` naming the fix
    when CUDA is asked for and ``torch.cuda.is_available()`` is false or the index is out of
    range, and :class:`~agentwarm.errors.InvalidRequest` for a malformed name.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise InvalidRequest(f"unknown device {device!r}: use cpu, cuda or cuda:N") from exc
    if dev.type != "cuda":
        return dev
    if not torch.cuda.is_available():
        build = (
            "a CPU-only build"
            if torch.version.cuda is None
            else f"built for CUDA {torch.version.cuda}"
        )
        raise EngineError(
            f"device {str(device)!r} asked for, but torch.cuda.is_available() is false "
            f"(torch {torch.__version__}, {build}): install a CUDA build of torch on a machine "
            "with an NVIDIA GPU and its driver, or use device 'cpu' (--device cpu)"
        )
    index = torch.cuda.current_device() if dev.index is None else dev.index
    count = torch.cuda.device_count()
    if index >= count:
        raise EngineError(
            f"device {str(device)!r} asked for, but this machine has {count} CUDA device(s): "
            f"use cuda:0 to cuda:{count - 1}"
        )
    return torch.device("cuda", index)


def cuda_cache_bytes(device: torch.device) -> int:
    """The default KV budget of an engine on CUDA ``device``: half of the GPU memory still
    available (free per ``torch.cuda.mem_get_info``, plus what this process's allocator holds
    unused), measured after the weights are loaded. The other half is left for activations,
    the per-request KV buffers and the copies the cache stores."""
    free, _total = torch.cuda.mem_get_info(device)
    spare = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return max(free + spare, 0) // 2


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
        self._in_flight: torch.cuda.Event | None = None

    @property
    def tokenizer(self) -> Tokenizer:
        return self.loaded.tokenizer

    @property
    def eos_token_id(self) -> int | None:
        return self.loaded.eos_token_id

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV one token takes (all layers, K and V), by the dtype's element size."""
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * self.dtype.itemsize

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
        cap = min(max(length + reserve, MIN_CAPACITY), max(self.max_context, length))
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
                input_ids = self._input_ids(ids)
                position_ids = torch.arange(start, start + n, device=self.device).unsqueeze(0)
                self._wait_in_flight()
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
        finally:
            if self.device.type == "cuda":  # also after an interrupt: some layers are queued
                self._mark_in_flight()
        state._advance(n)
        return logits

    def _input_ids(self, ids: Sequence[int]) -> torch.Tensor:
        """``ids`` as a ``[1, n]`` long tensor on the device. On CUDA the copy goes from pinned
        memory without blocking: a plain host-to-device copy would wait for every kernel queued
        before it."""
        host = torch.tensor([list(ids)], dtype=torch.long)
        if self.device.type == "cuda":
            return host.pin_memory().to(self.device, non_blocking=True)
        return host.to(self.device)

    def _mark_in_flight(self) -> None:
        self._in_flight = None
        try:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.device))
        except RuntimeError:  # the device failed; the caller sees the forward's own error
            return
        self._in_flight = event

    def _wait_in_flight(self) -> None:
        """On CUDA, wait for the previous ``extend``'s kernels before queueing more: the CPU
        stays at most one call ahead of the GPU, so an abort or a live request that preempts
        speculative prefill waits for at most one queued chunk (prefill without logits never
        synchronizes otherwise)."""
        if self._in_flight is not None:
            self._in_flight.synchronize()
            self._in_flight = None

    def decode_step(self, state: SequenceState, token_id: int) -> torch.Tensor:
        """Append one token and return the next-token logits (``[vocab]``, float32)."""
        return self.extend(state, (token_id,))

    def forward_full(self, ids: Sequence[int]) -> torch.Tensor:
        """Cold reference: plain ``model(ids)`` without any cache; logits of every position.

        Shape ``[len(ids), vocab]``, float32. For tests and benchmarks, not for serving.
        """
        with torch.inference_mode():
            input_ids = self._input_ids(ids)
            out = self.model(input_ids=input_ids, use_cache=False)
            return out.logits[0].float()
