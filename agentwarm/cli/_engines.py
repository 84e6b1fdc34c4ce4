"""Build an engine from the ``--engine`` / ``--model`` options."""

from __future__ import annotations

from pathlib import Path

from agentwarm.engines.base import Engine
from agentwarm.errors import ConfigError
from agentwarm.redact import redact_credentials

__all__ = ("open_engine",)


async def open_engine(spec: str, model: str, *, chunk_size: int | None = None) -> Engine:
    """``local`` (embedded torch engine), ``fake`` (deterministic cost model, no model) or one
    or more comma-separated ``http(s)://`` URLs of SGLang servers / ``agentwarm serve``.

    A URL is probed (``/health``, ``/model_info``) here, so an unreachable server is reported
    before any run starts."""
    if spec == "local":
        from agentwarm.engines.local import LocalEngine

        if chunk_size:
            return LocalEngine(model, chunk_size=chunk_size)
        return LocalEngine(model)
    if spec == "fake":
        from agentwarm.engines.fake import FakeEngine

        return FakeEngine()
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
        tokenizer = model if Path(model).is_dir() else None
        if len(urls) == 1:
            return await sglang.SGLangEngine.from_url(urls[0], tokenizer=tokenizer)
        from agentwarm.engines.routing import MultiWorkerEngine

        return await MultiWorkerEngine.from_urls(urls, tokenizer=tokenizer)
    raise ConfigError(
        f"--engine {redact_credentials(spec)!r} is not valid: use 'local', 'fake', or the URL of "
        "an SGLang server (http://HOST:PORT, several separated by commas)"
    )
