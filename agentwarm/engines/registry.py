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

Engine modules are imported on first use, so that naming ``fake`` or a URL pulls in neither torch
nor transformers.
"""

from __future__ import annotations

import asyncio
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
    "VLLM_PREFIX",
    "build_engine",
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
) -> Engine:
    """The engine ``kind`` names: ``local`` (``model`` = a preset name or a checkpoint directory,
    on ``device`` in ``dtype``) or ``fake`` (named ``model_name``, default ``fake-{model}``; the
    ``seconds_per_*`` options are its costs). An option left ``None`` keeps the engine's
    default. Call it inside the event loop. Raises :class:`~agentwarm.errors.ConfigError` for
    any other ``kind``, or for ``device``/``dtype`` given to an engine other than ``local``."""
    if kind != "local":
        _local_only(device=device, dtype=dtype)
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
        from agentwarm.engines.local import LocalEngine

        return LocalEngine(
            model,
            **_given(
                chunk_size=chunk_size,
                max_cached_tokens=max_cached_tokens,
                device=device or os.environ.get(DEVICE_ENV) or None,
                dtype=dtype or os.environ.get(DTYPE_ENV) or None,
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
) -> Engine:
    """The engine of ``--engine spec --model model``: ``local`` (with ``chunk_size``, on
    ``device`` in ``dtype``: ``--device``/``--dtype``, which no other engine takes), ``fake``
    (its defaults: it ignores ``model`` and ``chunk_size``) or one or more comma-separated
    ``http(s)://`` URLs of SGLang servers / ``agentwarm serve`` (several: a
    :class:`~agentwarm.engines.routing.MultiWorkerEngine`), or ``vllm:URL`` (one vLLM server).

    A URL is probed (``/health``, ``/model_info``) here, so an unreachable server is reported
    before any run starts. Raises :class:`~agentwarm.errors.ConfigError` for a ``spec`` that is
    none of these or a malformed URL."""
    if spec == "local":
        return build_engine(
            "local", model=model, chunk_size=chunk_size or None, device=device, dtype=dtype
        )
    _local_only(device=device, dtype=dtype)
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


def _local_only(**options: str | None) -> None:
    """Refuse the local engine's placement options (``--device``, ``--dtype``) elsewhere."""
    given = [f"--{name}" for name, value in options.items() if value is not None]
    if given:
        raise ConfigError(
            f"{' and '.join(given)}: for the embedded torch engine only (--engine local)"
        )


def _given(**options: Any) -> dict[str, Any]:
    """``options`` without those left ``None`` (the engine's default applies)."""
    return {name: value for name, value in options.items() if value is not None}
