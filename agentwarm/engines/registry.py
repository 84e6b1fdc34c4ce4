"""Engines named by options: the one factory behind every ``--engine`` option.

* :func:`build_engine` — an engine in this process, ``local`` (the embedded torch engine) or
  ``fake`` (the deterministic :class:`~agentwarm.engines.fake.FakeEngine`); what
  ``agentwarm serve --engine`` serves.
* :func:`open_engine` — ``local``, ``fake``, one or more comma-separated ``http(s)://`` URLs
  of SGLang servers / ``agentwarm serve``, or ``vllm:URL`` (a vLLM server,
  :class:`~agentwarm.engines.vllm.VLLMEngine`); what ``agentwarm run`` and ``agentwarm bench``
  use. One plain URL is told apart by what the server answers (:func:`server_kind`): SGLang and
  ``agentwarm serve`` have ``/model_info``, vLLM has not but has ``/version``.

The local engine's ``device`` and ``dtype`` (``--device``, ``--dtype``) default to the environment
variables ``AGENTWARM_DEVICE`` and ``AGENTWARM_DTYPE`` when set (else ``cpu``, ``float32``), so
that every command that builds one (``run``, ``bench``, ``serve``) can be put on a GPU alike
(``benchmarks/gpu.sh`` does).

The local engine's disk tier (``--kv-dir DIR [--kv-disk-gb N]``: KV evicted from the radix
cache, and what is still cached at a clean stop, stored under DIR and loaded back, across
restarts; see ``docs/tiered-kv.md``) is checked by :func:`disk_tier_options`: DIR must be a
directory or creatable (it is created with its parents), N a positive number of GiB.

Engine modules are imported on first use, so that naming ``fake`` or a URL pulls in neither torch
nor transformers.
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

from agentwarm.engines.base import Engine
from agentwarm.engines.built import resolve_model
from agentwarm.errors import ConfigError
from agentwarm.redact import redact_credentials

__all__ = (
    "DEVICE_ENV",
    "DTYPE_ENV",
    "EMBEDDED_KINDS",
    "GIB",
    "VLLM_PREFIX",
    "build_engine",
    "disk_tier_options",
    "host_tier_option",
    "open_engine",
    "server_kind",
)

#: Environment variables holding the local engine's default device and dtype.
DEVICE_ENV = "AGENTWARM_DEVICE"
DTYPE_ENV = "AGENTWARM_DTYPE"

#: The engines that run in this process (the other ``--engine`` values are URLs).
EMBEDDED_KINDS = ("local", "fake")
#: ``--engine vllm:URL`` names a vLLM server.
VLLM_PREFIX = "vllm:"
#: ``--kv-disk-gb N`` counts GiB of this many bytes.
GIB = 1 << 30


def build_engine(
    kind: str = "local",
    *,
    model: str = "tiny",
    chunk_size: int | None = None,
    max_cached_tokens: int | None = None,
    seconds_per_token: float | None = None,
    seconds_per_output_token: float | None = None,
    model_name: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    kv_dir: str | Path | None = None,
    kv_disk_bytes: int | None = None,
    kv_host_bytes: int | None = None,
) -> Engine:
    """The engine ``kind`` names: ``local`` (``model`` = a preset name or a checkpoint directory,
    on ``device`` in ``dtype``, with a disk tier under ``kv_dir`` of at most ``kv_disk_bytes``
    when ``kv_dir`` is given, and a host tier of ``kv_host_bytes`` above it) or ``fake`` (named
    ``model_name``, default ``fake-{model}``; the
    ``seconds_per_*`` options are its costs). An option left ``None`` keeps the engine's
    default. Call it inside the event loop. Raises :class:`~agentwarm.errors.ConfigError` for
    any other ``kind``, for ``device``/``dtype``/``kv_dir`` given to an engine other than
    ``local``, or for a ``kv_dir``/``kv_disk_bytes`` :func:`disk_tier_options` refuses."""
    if kind != "local":
        _local_only(device=device, dtype=dtype, kv_dir=kv_dir, kv_disk_gb=kv_disk_bytes)
    if kind == "fake":
        from agentwarm.engines.fake import FakeEngine

        return FakeEngine(
            **_given(
                seconds_per_token=seconds_per_token,
                seconds_per_output_token=seconds_per_output_token,
                chunk_size=chunk_size,
                max_cached_tokens=max_cached_tokens,
                model_name=model_name or f"fake-{model}",
            )
        )
    if kind == "local":
        tier_dir = _check_kv_dir(kv_dir, kv_disk_bytes)  # before torch is imported
        from agentwarm.engines.local import LocalEngine

        return LocalEngine(
            model,
            **_given(
                chunk_size=chunk_size,
                max_cached_tokens=max_cached_tokens,
                device=device or os.environ.get(DEVICE_ENV) or None,
                dtype=dtype or os.environ.get(DTYPE_ENV) or None,
                kv_dir=tier_dir,
                kv_disk_bytes=kv_disk_bytes,
                kv_host_bytes=kv_host_bytes,
            ),
        )
    raise ConfigError(f"unknown engine {kind!r} for agentwarm serve: use 'local' or 'fake'")


async def open_engine(
    spec: str,
    model: str,
    *,
    chunk_size: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    kv_dir: str | Path | None = None,
    kv_disk_bytes: int | None = None,
) -> Engine:
    """The engine of ``--engine spec --model model``: ``local`` (with ``chunk_size``, on
    ``device`` in ``dtype``, its disk tier under ``kv_dir`` within ``kv_disk_bytes``:
    ``--device``/``--dtype``/``--kv-dir``/``--kv-disk-gb``, which no other engine takes), ``fake``
    (its defaults: it ignores ``model`` and ``chunk_size``) or one or more comma-separated
    ``http(s)://`` URLs of SGLang servers / ``agentwarm serve`` (several: a
    :class:`~agentwarm.engines.routing.MultiWorkerEngine`), or ``vllm:URL`` (one vLLM server).

    A URL is probed (``/health``, ``/model_info``) here, so an unreachable server is reported
    before any run starts. Raises :class:`~agentwarm.errors.ConfigError` for a ``spec`` that is
    none of these or a malformed URL."""
    if spec == "local":
        return build_engine(
            "local",
            model=model,
            chunk_size=chunk_size or None,
            device=device,
            dtype=dtype,
            kv_dir=kv_dir,
            kv_disk_bytes=kv_disk_bytes,
        )
    _local_only(device=device, dtype=dtype, kv_dir=kv_dir, kv_disk_gb=kv_disk_bytes)
    if spec == "fake":
        return build_engine("fake", model_name="fake")
    model = resolve_model(model)  # smollm2: the directory scripts/setup_vllm.sh built
    tokenizer = model if Path(model).is_dir() else None
    if spec.startswith(VLLM_PREFIX):
        return await _open_vllm(spec.removeprefix(VLLM_PREFIX).strip(), tokenizer)
    urls = [u.strip() for u in spec.split(",") if u.strip()]
    if urls and all(u.startswith(("http://", "https://")) for u in urls):
        from agentwarm.engines import sglang

        for url in urls:  # before any connection: a malformed URL is the user's to fix
            try:
                sglang.check_url(url)
            except ValueError as exc:
                raise ConfigError(f"--engine: {exc}") from None
        # A local checkpoint dir gives the tokenizer; with a preset name the client asks the
        # server (/model_info's tokenizer_path, else /tokenize).
        if len(urls) == 1:
            if await server_kind(urls[0]) == "vllm":
                return await _open_vllm(urls[0], tokenizer)
            return await sglang.SGLangEngine.from_url(urls[0], tokenizer=tokenizer)
        from agentwarm.engines.routing import MultiWorkerEngine

        return await MultiWorkerEngine.from_urls(urls, tokenizer=tokenizer)
    raise ConfigError(
        f"--engine {redact_credentials(spec)!r} is not valid: use 'local', 'fake', the URL of "
        "an SGLang server (http://HOST:PORT, several separated by commas), or vllm:URL for a vLLM "
        "server (vllm:http://HOST:PORT)"
    )


async def _open_vllm(spec: str, tokenizer: str | None) -> Engine:
    """The :class:`~agentwarm.engines.vllm.VLLMEngine` of ``--engine vllm:URL``; of
    ``vllm:URL,URL...``, a :class:`~agentwarm.engines.routing.MultiWorkerEngine` of one per
    server (sessions routed by hash, as over SGLang workers)."""
    from agentwarm.engines.sglang import check_url
    from agentwarm.engines.vllm import VLLMEngine

    urls = [u.strip().removeprefix(VLLM_PREFIX) for u in spec.split(",") if u.strip()]
    if not urls:
        raise ConfigError("--engine vllm:URL needs a URL, e.g. vllm:http://127.0.0.1:8000")
    for url in urls:
        try:
            check_url(url)
        except ValueError as exc:
            raise ConfigError(f"--engine vllm:URL: {exc}") from None
    if len(urls) == 1:
        return await VLLMEngine.from_url(urls[0], tokenizer=tokenizer)
    from agentwarm.engines.routing import MultiWorkerEngine

    engines = await asyncio.gather(
        *(VLLMEngine.from_url(url, tokenizer=tokenizer) for url in urls), return_exceptions=True
    )
    opened = [e for e in engines if isinstance(e, VLLMEngine)]
    failed = [e for e in engines if isinstance(e, BaseException)]
    if failed:
        await asyncio.gather(*(e.aclose() for e in opened), return_exceptions=True)
        raise failed[0]
    try:
        return MultiWorkerEngine({engine.url: engine for engine in opened})
    except ValueError as exc:
        await asyncio.gather(*(e.aclose() for e in opened), return_exceptions=True)
        raise ConfigError(f"--engine vllm:URL,URL...: {exc}") from None


async def server_kind(url: str, timeout_s: float = 10.0) -> str | None:
    """``"sglang"`` (SGLang, sglang-router or ``agentwarm serve``: ``/model_info`` or
    ``/get_model_info`` answers), ``"vllm"`` (neither, and ``/version`` answers a version), or
    None when the server cannot be reached (the engine's own connection then reports it). Raises
    :class:`~agentwarm.errors.ConfigError`, naming both kinds, for a server that is neither."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as http:
            for path in ("/model_info", "/get_model_info"):  # sglang-router has only the latter
                if (await http.get(url.rstrip("/") + path)).status_code != 404:
                    return "sglang"
            version = await http.get(url.rstrip("/") + "/version")
    except httpx.HTTPError:
        return None
    try:
        known = version.status_code == 200 and "version" in version.json()
    except ValueError:
        known = False
    if known:
        return "vllm"
    raise ConfigError(
        f"--engine {redact_credentials(url)}: the server is neither SGLang / agentwarm serve (no "
        "/model_info nor /get_model_info) nor vLLM (no /version); give the URL of one of them "
        "(vllm:URL names a vLLM server explicitly)"
    )


def disk_tier_options(
    kv_dir: str | Path | None, kv_disk_gb: float | None, *, engine: str = "local"
) -> tuple[Path | None, int | None]:
    """``--kv-dir DIR [--kv-disk-gb N]`` of ``--engine engine`` as ``(directory, budget in
    bytes)``: DIR created (with its parents) when missing, N GiB as bytes (``None``: the tier's
    default budget). Raises :class:`~agentwarm.errors.ConfigError`, naming the flag and the fix,
    for either given to an engine other than ``local``, N not a positive finite number, N
    without DIR, or a DIR that is not a directory and cannot be made one."""
    if engine != "local":
        _local_only(kv_dir=kv_dir, kv_disk_gb=kv_disk_gb)
    budget: int | None = None
    if kv_disk_gb is not None:
        if not (math.isfinite(kv_disk_gb) and kv_disk_gb > 0) or int(kv_disk_gb * GIB) < 1:
            raise ConfigError(
                f"--kv-disk-gb {kv_disk_gb:g}: the disk tier's budget must be a positive number "
                "of GiB, e.g. --kv-disk-gb 16 (leave it out for the default)"
            )
        budget = int(kv_disk_gb * GIB)
    return _check_kv_dir(kv_dir, budget), budget


def host_tier_option(kv_host_gb: float | None, kv_dir: str | Path | None) -> int | None:
    """``--kv-host-gb N`` as bytes (``None``: the engine's default; 0: no host tier). Raises
    :class:`~agentwarm.errors.ConfigError`, naming the flag and the fix, for N not a finite
    number >= 0 or N > 0 without ``--kv-dir``."""
    if kv_host_gb is None:
        return None
    if not (math.isfinite(kv_host_gb) and kv_host_gb >= 0):
        raise ConfigError(
            f"--kv-host-gb {kv_host_gb:g}: the host tier's budget must be a number of GiB >= 0, "
            "e.g. --kv-host-gb 8 (0 turns it off; leave it out for the default)"
        )
    if kv_host_gb and kv_dir is None:
        raise ConfigError(
            "--kv-host-gb sets the host tier, which sits above the disk tier that --kv-dir DIR "
            "turns on: give --kv-dir too"
        )
    return int(kv_host_gb * GIB)


def _check_kv_dir(kv_dir: str | Path | None, kv_disk_bytes: int | None) -> Path | None:
    """``kv_dir`` as an existing directory (made when missing), or ConfigError."""
    if kv_dir is None:
        if kv_disk_bytes is not None:
            raise ConfigError(
                "--kv-disk-gb sets the budget of the disk tier, which --kv-dir DIR turns on: "
                "give --kv-dir too"
            )
        return None
    if kv_disk_bytes is not None and kv_disk_bytes < 1:
        raise ConfigError(
            f"kv_disk_bytes={kv_disk_bytes}: the disk tier's budget must be at least one byte"
        )
    if str(kv_dir).strip() == "":
        raise ConfigError("--kv-dir is empty: give the directory of the disk tier")
    path = Path(kv_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"--kv-dir {path}: it is not a directory; give a directory for the disk tier (it "
            "is created when missing)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--kv-dir {path}: cannot create it ({exc.strerror or exc}); give a directory "
            "that exists or can be created"
        ) from None
    return path


def _local_only(**options: object) -> None:
    """Refuse the local engine's options (``--device``, ``--dtype``, ``--kv-dir``,
    ``--kv-disk-gb``) elsewhere."""
    given = [f"--{name.replace('_', '-')}" for name, value in options.items() if value is not None]
    if given:
        raise ConfigError(
            f"{' and '.join(given)}: for the embedded torch engine only (--engine local)"
        )


def _given(**options: Any) -> dict[str, Any]:
    """``options`` without those left ``None`` (the engine's default applies)."""
    return {name: value for name, value in options.items() if value is not None}
