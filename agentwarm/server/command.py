"""The ``serve`` command: an engine over SGLang's native HTTP API (see :mod:`agentwarm.server`).

One definition for both ways to start it: ``agentwarm serve`` (:mod:`agentwarm.cli.serve`
registers it) and ``python -m agentwarm.server``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from agentwarm.engines.base import Engine
from agentwarm.engines.registry import build_engine, disk_tier_options, host_tier_option
from agentwarm.server.app import ServerConfig
from agentwarm.server.engine_options import KvDirOption, KvDiskGbOption, KvHostGbOption
from agentwarm.server.run import run_server
from agentwarm.warmup.options import (
    KeepWarmOption,
    ReadyFileOption,
    RewarmBelowOption,
    WarmupOption,
    load_warmup,
)

__all__ = ("serve",)


def serve(
    model: str = typer.Option(
        "tiny",
        "--model",
        help=(
            "Preset name (tiny, small, 1b; tiny-bytes, small-bytes: byte tokenizer) or a local "
            "checkpoint directory."
        ),
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind; anything but loopback needs --api-key."
    ),
    port: int = typer.Option(30000, "--port", min=0, max=65535, help="TCP port; 0 picks one."),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="AGENTWARM_API_KEY",
        help="Require 'Authorization: Bearer KEY' (not on /health and /metrics).",
    ),
    insecure_no_api_key: bool = typer.Option(
        False,
        "--insecure-no-api-key",
        help="Serve a non-loopback --host without an API key (anyone who reaches it can use it).",
    ),
    max_request_bytes: int | None = typer.Option(
        None,
        "--max-request-bytes",
        min=1024,
        help="Larger bodies get HTTP 413. Default: 16 bytes per token of the model context "
        "+ 64 KiB (192 KiB for 8,192 tokens), at most 8 MiB.",
    ),
    max_new_tokens: int = typer.Option(
        4096, "--max-new-tokens", min=1, help="Largest sampling_params.max_new_tokens accepted."
    ),
    chunk_size: int | None = typer.Option(
        None, "--chunk-size", min=1, help="Prefill chunk in tokens (abort/preemption points)."
    ),
    max_cached_tokens: int | None = typer.Option(
        None, "--max-cached-tokens", min=0, help="Radix cache budget in tokens."
    ),
    engine: str = typer.Option(
        "local", "--engine", help="local (embedded torch engine) or fake (cost model, for tests)."
    ),
    device: str | None = typer.Option(
        None,
        "--device",
        help="--engine local: cpu | cuda | cuda:N (default: $AGENTWARM_DEVICE or cpu).",
    ),
    dtype: str | None = typer.Option(
        None,
        "--dtype",
        help="--engine local: float32 | bfloat16 | float16 (default: $AGENTWARM_DTYPE or float32).",
    ),
    fake_seconds_per_token: float | None = typer.Option(
        None, "--fake-seconds-per-token", min=0.0, help="--engine fake: prefill cost per token."
    ),
    fake_seconds_per_output_token: float | None = typer.Option(
        None, "--fake-seconds-per-output-token", min=0.0, help="--engine fake: cost per output."
    ),
    kv_dir: KvDirOption = None,
    kv_disk_gb: KvDiskGbOption = None,
    kv_host_gb: KvHostGbOption = None,
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn log level."),
    warmup: WarmupOption = None,
    ready_file: ReadyFileOption = None,
    keep_warm: KeepWarmOption = None,
    rewarm_below: RewarmBelowOption = None,
) -> None:
    """Serve the embedded engine over SGLang's native API (/generate, /abort_request, /metrics...).

    Prints 'agentwarm serve: listening on http://HOST:PORT' once it accepts connections.
    """

    settings = load_warmup(  # a bad plan or option fails before binding
        warmup, ready_file=ready_file, keep_warm_s=keep_warm, rewarm_below=rewarm_below
    )
    tier_dir, tier_bytes = disk_tier_options(kv_dir, kv_disk_gb, engine=engine)  # and --kv-dir
    host_bytes = host_tier_option(kv_host_gb, tier_dir)

    def make_engine() -> Engine:
        return build_engine(
            engine,
            model=model,
            chunk_size=chunk_size,
            max_cached_tokens=max_cached_tokens,
            seconds_per_token=fake_seconds_per_token,
            seconds_per_output_token=fake_seconds_per_output_token,
            device=device,
            dtype=dtype,
            kv_dir=tier_dir,
            kv_disk_bytes=tier_bytes,
            kv_host_bytes=host_bytes,
        )

    def ready(url: str) -> None:
        typer.echo(f"agentwarm serve: listening on {url} (engine={engine}, model={model})")

    config = ServerConfig(
        api_key=api_key or None,
        max_request_bytes=max_request_bytes,
        max_new_tokens=max_new_tokens,
        tokenizer_path=model if Path(model).is_dir() else None,
    )
    run_server(
        make_engine,
        host=host,
        port=port,
        config=config,
        log_level=log_level,
        on_ready=ready,
        insecure_no_api_key=insecure_no_api_key,
        warmup=settings,
    )
