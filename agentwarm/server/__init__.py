"""``agentwarm serve``: any engine behind the subset of SGLang's native HTTP API agentwarm uses.

One engine shared by several processes (no GPU needed), and a real HTTP server to test
:class:`~agentwarm.engines.sglang.SGLangEngine` and sglang-router against. See
:mod:`agentwarm.server.app` for the endpoints and their rules. ``build_engine`` is
:func:`agentwarm.engines.registry.build_engine` (the engines ``--engine`` names), re-exported.
"""

from __future__ import annotations

from agentwarm.engines.registry import build_engine
from agentwarm.server.app import ServerConfig, create_app
from agentwarm.server.run import is_loopback, run_server, serve_engine

__all__ = (
    "ServerConfig",
    "build_engine",
    "create_app",
    "is_loopback",
    "run_server",
    "serve_engine",
)
