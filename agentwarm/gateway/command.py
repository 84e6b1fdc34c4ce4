"""The ``gateway`` command: its options mapped onto :class:`~agentwarm.gateway.upstream.Upstream`,
:class:`~agentwarm.gateway.app.GatewayConfig` and the hooks (see :mod:`agentwarm.gateway`).

``agentwarm gateway`` (:mod:`agentwarm.cli.gateway` registers it) prints
``agentwarm gateway: listening on http://HOST:PORT`` once it accepts connections; a bad option
ends with one ``error:`` line and exit code 2.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import httpx
import typer

from agentwarm import telemetry as tm
from agentwarm.engines.registry import VLLM_PREFIX, server_kind
from agentwarm.engines.sglang import check_url
from agentwarm.errors import ConfigError
from agentwarm.gateway.app import SHUTDOWN_GRACE_S, GatewayConfig
from agentwarm.gateway.autosave import SAVE_INTERVAL_S
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.liveness import HEALTH_INTERVAL_S, UNRESPONSIVE_AFTER_S
from agentwarm.gateway.prompts import Renderer, load_renderer
from agentwarm.gateway.run import serve_gateway
from agentwarm.gateway.state import check_writable
from agentwarm.gateway.types import Hooks, NoHooks
from agentwarm.gateway.upstream import Upstream
from agentwarm.predictors import default_state_dir
from agentwarm.redact import redact_credentials
from agentwarm.server.security import default_max_request_bytes
from agentwarm.warmup.options import (
    KeepWarmOption,
    ReadyFileOption,
    RewarmBelowOption,
    WarmupOption,
    WarmupSettings,
    load_warmup,
)

__all__ = (
    "build_hooks",
    "detect_upstreams",
    "gateway",
    "gateway_state_dir",
    "gateway_warmup",
    "parse_upstreams",
    "served_model_dir",
)

#: Seconds a worker has to answer the probes of :func:`detect_upstreams`.
DETECT_TIMEOUT_S = 3.0


def build_hooks(
    renderer: Renderer | None,
    state_dir: Path | None,
    upstream: Upstream,
    *,
    share_learning: bool = True,
    save_interval_s: float | None = SAVE_INTERVAL_S,
) -> Hooks:
    """The hooks of ``agentwarm gateway``: a :class:`~agentwarm.gateway.learner.Learner` that
    learns the agent graph from the traffic and prefills through ``upstream``, rendering with
    ``renderer`` (the served model's tokenizer and chat template, from ``--model``), its learned
    state kept in ``state_dir`` (default: :func:`gateway_state_dir`) and saved every
    ``save_interval_s`` seconds, pooled across tenants unless ``share_learning`` is false
    (:mod:`agentwarm.gateway.tenants`). Without a renderer there is nothing to render prompts
    with: a plain proxy (:class:`~agentwarm.gateway.types.NoHooks`)."""
    if renderer is None:
        return NoHooks()
    return Learner(
        upstream,
        renderer,
        state_dir=state_dir or gateway_state_dir(),
        share_learning=share_learning,
        save_interval_s=save_interval_s,
    )


def gateway_state_dir() -> Path:
    """The default state dir of the gateway: ``gateway/`` under
    :func:`~agentwarm.predictors.default_state_dir`."""
    return default_state_dir() / "gateway"


def gateway_warmup(
    settings: WarmupSettings | None, renderer: Renderer | None
) -> WarmupSettings | None:
    """``settings`` rendering chat prefixes with ``--model``'s ``renderer``; ConfigError when
    the plan has chat prefixes and there is no ``--model`` to render them with."""
    if settings is None:
        return None
    if renderer is None:
        if any(p.messages is not None for p in settings.plan):
            raise ConfigError(
                "--warmup: the plan has chat prefixes (messages) and the gateway needs the "
                "served model's tokenizer and chat template to render them: pass --model "
                "(its preset or checkpoint directory), or give a plan of input_ids"
            )
        return settings
    return replace(settings, renderer=renderer.chat)


def parse_upstreams(value: str) -> list[str]:
    """``URL[,URL...]`` as a list (a ``vllm:`` prefix kept: a vLLM server); ConfigError when
    there is none."""
    urls = [part.strip() for part in value.split(",") if part.strip()]
    if not urls:
        raise ConfigError(
            "--upstream needs at least one URL, e.g. --upstream http://127.0.0.1:30000 "
            "(vllm:http://127.0.0.1:8000 for a vLLM server)"
        )
    return [
        VLLM_PREFIX + url.removeprefix(VLLM_PREFIX).strip() if url.startswith(VLLM_PREFIX) else url
        for url in urls
    ]


async def detect_upstreams(urls: list[str]) -> tuple[list[str], list[str]]:
    """``urls`` with ``vllm:`` before each plain URL whose server answers as vLLM does
    (:func:`~agentwarm.engines.registry.server_kind`), and the plain URLs that could not be
    reached yet (they stay plain: spoken to as SGLang). One that answers as neither stays
    plain too (the gateway forwards to any OpenAI-compatible server)."""

    async def one(url: str) -> tuple[str, bool]:
        try:
            check_url(url.removeprefix(VLLM_PREFIX))
        except ValueError:
            return url, True  # not a worker's URL: Upstream says why
        if url.startswith(VLLM_PREFIX):
            return url, True
        try:
            kind = await server_kind(url, timeout_s=DETECT_TIMEOUT_S)
        except ConfigError:
            kind = "neither"
        return (VLLM_PREFIX + url if kind == "vllm" else url), kind is not None

    found = await asyncio.gather(*(one(url) for url in urls))
    return [url for url, _ in found], [url for url, answered in found if not answered]


async def served_model_dir(urls: Sequence[str], *, api_key: str | None) -> str | None:
    """The directory the first answering ``vllm:`` worker loaded its model from, when it is
    on this machine (``/v1/models``' ``root``): what ``--model`` defaults to in front of vLLM."""
    for url in urls:
        if not url.startswith(VLLM_PREFIX):
            continue
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            async with httpx.AsyncClient(timeout=DETECT_TIMEOUT_S, trust_env=False) as http:
                resp = await http.get(url.removeprefix(VLLM_PREFIX) + "/v1/models", headers=headers)
            root = str(resp.json()["data"][0].get("root") or "")
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, AttributeError):
            continue
        if root and Path(root).is_dir():
            return root
    return None


def gateway(
    upstream: str = typer.Option(
        ...,
        "--upstream",
        help="Worker URL(s), comma-separated: SGLang, sglang-router, agentwarm serve, or "
        "vllm:URL for vLLM (a plain URL that answers as vLLM is taken for one).",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="The served model's preset (tiny, small, 1b, ...) or checkpoint directory: its "
        "tokenizer and chat template; also the /v1/models answer when the workers have none.",
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind; anything but loopback needs --api-key."
    ),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="TCP port; 0 picks one."),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="AGENTWARM_API_KEY",
        help="Require 'Authorization: Bearer KEY' of clients (not on /health and /metrics).",
    ),
    upstream_api_key: str | None = typer.Option(
        None,
        "--upstream-api-key",
        envvar="AGENTWARM_UPSTREAM_API_KEY",
        help="Send 'Authorization: Bearer KEY' to the workers.",
    ),
    upstream_timeout: float = typer.Option(
        600.0, "--upstream-timeout", min=0.1, help="Seconds a worker may stay silent mid-reply."
    ),
    health_interval: float = typer.Option(
        HEALTH_INTERVAL_S,
        "--health-interval",
        min=0.01,
        help="Seconds between GET /health probes of a worker that requests wait on in silence.",
    ),
    unresponsive_after: float = typer.Option(
        UNRESPONSIVE_AFTER_S,
        "--unresponsive-after",
        min=0.1,
        help="A worker that answers nothing (no reply byte, no GET /health) for this many "
        "seconds fails its requests (504; new ones 503) until it answers again.",
    ),
    shutdown_grace: float = typer.Option(
        SHUTDOWN_GRACE_S,
        "--shutdown-grace",
        min=0.0,
        help="At SIGTERM, seconds requests in flight may go on; the rest then end with a 503.",
    ),
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="Directory of the learned state (kept across restarts)."),
    ] = None,
    save_interval: float = typer.Option(
        SAVE_INTERVAL_S,
        "--save-interval",
        min=0.01,
        help="Seconds between saves of the learned state (a crash loses at most this much).",
    ),
    trace: Annotated[Path | None, typer.Option("--trace", help="Write spans as JSONL.")] = None,
    otlp: str | None = typer.Option(None, "--otlp", help="OTLP/HTTP endpoint."),
    insecure_no_api_key: bool = typer.Option(
        False,
        "--insecure-no-api-key",
        help="Serve a non-loopback --host without an API key (anyone who reaches it can use it).",
    ),
    max_request_bytes: int | None = typer.Option(
        None,
        "--max-request-bytes",
        min=1024,
        help="Larger bodies get 413 (default: sized by --model's context as agentwarm serve "
        "sizes its own, 8 MiB without --model).",
    ),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn log level."),
    share_learning: bool = typer.Option(
        True,
        "--share-learning/--no-share-learning",
        help="Pool what tenants (cache_salt) teach between identical heads (default: per-user "
        "salts still learn from everyone's runs), or keep one model per tenant. Sessions, "
        "prefetches and heads never cross tenants either way.",
    ),
    warmup: WarmupOption = None,
    ready_file: ReadyFileOption = None,
    keep_warm: KeepWarmOption = None,
    rewarm_below: RewarmBelowOption = None,
) -> None:
    """OpenAI-compatible endpoint in front of SGLang or vLLM workers; prefetches agents' next steps.

    Point a client's base_url at http://HOST:PORT/v1. Prints 'agentwarm gateway: listening on
    http://HOST:PORT' once it accepts connections.
    """
    urls, silent = asyncio.run(detect_upstreams(parse_upstreams(upstream)))
    if not model:
        model = asyncio.run(served_model_dir(urls, api_key=upstream_api_key or None))
        if model:
            typer.echo(f"agentwarm gateway: --model {model} (the vLLM server's own)", err=True)
    renderer = load_renderer(model) if model else None  # a bad --model fails before binding
    if renderer is not None:  # so does a state dir the learning could not be saved in
        check_writable(state_dir or gateway_state_dir())
    settings = gateway_warmup(  # so does a bad plan
        load_warmup(
            warmup, ready_file=ready_file, keep_warm_s=keep_warm, rewarm_below=rewarm_below
        ),
        renderer,
    )
    try:
        up = Upstream(
            urls,
            api_key=upstream_api_key or None,
            timeout=upstream_timeout,
            health_interval=health_interval,
            unresponsive_after=unresponsive_after,
            tokenizer=renderer.chat.tokenizer if renderer else None,
        )
    except ValueError as exc:
        raise ConfigError(f"--upstream: {exc}") from None
    config = GatewayConfig(
        api_key=api_key or None,
        host=host,
        port=port,
        max_request_bytes=max_request_bytes
        or default_max_request_bytes(renderer.chat.max_context if renderer else None),
        model_name=model,
        shutdown_grace_s=shutdown_grace,
    )

    def ready(url: str) -> None:
        typer.echo(f"agentwarm gateway: listening on {url} (upstream={', '.join(up.urls)})")
        for worker in silent:
            typer.echo(
                f"agentwarm gateway: upstream {redact_credentials(worker)} did not answer at "
                "start: it is spoken to as SGLang (prefetches via /generate); name a vLLM "
                "server vllm:URL",
                err=True,
            )
        if renderer is None:
            typer.echo(
                "agentwarm gateway: no --model: proxying only (learning and prefetching need "
                "the served model's tokenizer and chat template: pass its preset or directory)",
                err=True,
            )

    telemetry = tm.configure(trace_file=trace, otlp_endpoint=otlp) if (trace or otlp) else None
    try:
        asyncio.run(
            serve_gateway(
                up,
                lambda u: build_hooks(
                    renderer,
                    state_dir,
                    u,
                    share_learning=share_learning,
                    save_interval_s=save_interval,
                ),
                config=config,
                log_level=log_level,
                on_ready=ready,
                insecure_no_api_key=insecure_no_api_key,
                warmup=settings,
            )
        )
    finally:
        if telemetry is not None:
            telemetry.shutdown()
