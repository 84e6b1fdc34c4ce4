"""The settings and the state of one ``agentwarm serve`` server, each with one owner.

* :class:`ServerConfig` — the operator's settings (frozen).
* :class:`ServerState` — what the routes share: the engine (closed by the app's lifespan through
  :meth:`ServerState.close`, which also marks the server as closing), the counters of
  ``/metrics`` (:class:`~agentwarm.server.metrics.ServerMetrics`, recorded by ``/generate``
  only), the in-flight table and the warm-up (``--warmup``: a
  :class:`~agentwarm.warmup.keepwarm.KeepWarm`, started and stopped by the app's lifespan; its
  readiness is what ``/health/ready`` answers).
* :class:`InflightTable` — the rids of the requests ``/generate`` is serving. Only
  :mod:`agentwarm.server.routes_generate` enters and leaves it; the other routes read it
  (abort, ``/get_load``, ``/server_info``, ``/metrics``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import anyio

from agentwarm.engines.base import Engine, EngineStats
from agentwarm.engines.tokenizers import QwenTokenizer
from agentwarm.errors import EngineError
from agentwarm.server.metrics import ServerMetrics
from agentwarm.server.security import default_max_request_bytes
from agentwarm.warmup.keepwarm import KeepWarm
from agentwarm.warmup.options import WarmupSettings

__all__ = ("InflightTable", "ServerConfig", "ServerState", "package_version")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Settings of one server. ``model_path``/``tokenizer_path`` are what ``/model_info`` reports
    (default: the engine's ``model_name``, and the tokenizer directory when one is known);
    ``host`` is the bound host the Host check accepts besides loopback names; ``port`` is only
    reported. ``max_request_bytes=None``: derived from the engine's context length."""

    api_key: str | None = None
    max_request_bytes: int | None = None
    max_new_tokens: int = 4096
    model_path: str | None = None
    tokenizer_path: str | None = None
    health_timeout_s: float = 20.0
    host: str = "127.0.0.1"
    port: int = 0


class InflightTable:
    """The rids ``/generate`` is serving now (one request per rid), in the order they came."""

    def __init__(self) -> None:
        self._rids: dict[str, None] = {}

    def enter(self, rid: str) -> bool:
        """Count a request of ``rid`` in; False (and nothing changed) when one is running."""
        if rid in self._rids:
            return False
        self._rids[rid] = None
        return True

    def leave(self, rid: str) -> None:
        """Count the request of ``rid`` out (after :meth:`enter` returned True)."""
        self._rids.pop(rid, None)

    def __contains__(self, rid: object) -> bool:
        return rid in self._rids

    def __len__(self) -> int:
        return len(self._rids)

    def __iter__(self) -> Iterator[str]:
        """The rids in flight now (a copy: requests may enter or leave while it is read)."""
        return iter(list(self._rids))


class ServerState:
    """What the routes of one server share (see the module docstring for who changes what)."""

    def __init__(
        self, engine: Engine, config: ServerConfig, *, warmup: WarmupSettings | None = None
    ) -> None:
        self.engine = engine
        self.config = config
        self.name = config.model_path or engine.model_name
        self.metrics = ServerMetrics(self.name)
        self.inflight = InflightTable()
        self.started = time.time()
        self.tokenizer_kind, tokenizer_path = _describe_tokenizer(engine)
        self.tokenizer_path = config.tokenizer_path or tokenizer_path
        self.max_request_bytes = config.max_request_bytes or default_max_request_bytes(
            getattr(engine, "max_context", None)
        )
        #: The warm-up of ``--warmup`` (the plan rendered with the engine's own chat template).
        self.keep_warm: KeepWarm | None = (
            warmup.keeper({"local": warmup.warmer(engine)}) if warmup is not None else None
        )
        self._closing = False

    @property
    def closing(self) -> bool:
        """True once the server shuts down (``/health`` answers 503 then)."""
        return self._closing

    def start(self) -> None:
        """Start the warm-up, if any (inside the server's loop)."""
        if self.keep_warm is not None:
            self.keep_warm.start()

    async def close(self, *, close_engine: bool) -> None:
        """Mark the server as closing, stop the warm-up; close the engine if ``close_engine``."""
        self._closing = True
        if self.keep_warm is not None:
            await self.keep_warm.aclose()
        if close_engine:
            await self.engine.aclose()

    async def stats(self) -> EngineStats | None:
        """The engine's stats, or None (logged) when it cannot give them."""
        try:
            return await self.engine.stats()
        except EngineError as exc:
            log.warning("engine stats failed: %s", exc)
            return None

    async def abort_quietly(self, rid: str) -> None:
        """Abort ``rid`` in the engine, shielded from cancellation; a failure is only logged."""
        with anyio.CancelScope(shield=True):
            try:
                await self.engine.abort(rid)
            except EngineError as exc:
                log.warning("abort of %s after client disconnect failed: %s", rid, exc)

    def extension(self) -> dict[str, Any]:
        """The ``agentwarm`` block of ``/model_info`` and ``/server_info``."""
        return {
            "version": package_version(),
            "engine": type(self.engine).__name__,
            "tokenizer": self.tokenizer_kind,
            "supports_promotion": bool(getattr(self.engine, "supports_promotion", False)),
            "preempts_speculation": bool(getattr(self.engine, "preempts_speculation", False)),
        }


def _describe_tokenizer(engine: Engine) -> tuple[str | None, str | None]:
    """(``"byte"`` | ``"qwen2.5"`` | ``"hf"`` | ``None``, tokenizer directory or ``None``)."""
    sample = "agentwarm é ✓\n{}"
    try:
        raw = list(sample.encode("utf-8"))
        if engine.encode(sample) == raw and engine.decode(raw) == sample:
            return "byte", None
    except Exception:  # an engine without a tokenizer cannot describe one
        return None, None
    tokenizer = getattr(engine, "tokenizer", None)
    if isinstance(tokenizer, QwenTokenizer):
        return "qwen2.5", None
    hf = getattr(tokenizer, "hf_tokenizer", None)
    path = getattr(hf, "name_or_path", None) or getattr(engine, "tokenizer_path", None)
    return ("hf" if hf is not None else None), (str(path) if path else None)


def package_version() -> str:
    """This package's version (``0+unknown`` when it is not installed)."""
    try:
        return metadata.version("agentwarm")
    except metadata.PackageNotFoundError:
        return "0+unknown"
