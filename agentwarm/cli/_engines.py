"""Build an engine from the ``--engine`` / ``--model`` options."""

from __future__ import annotations

from agentwarm.engines.base import Engine
from agentwarm.errors import ConfigError

__all__ = ("make_engine",)


def make_engine(spec: str, model: str, *, chunk_size: int | None = None) -> Engine:
    """``local`` (embedded torch engine), ``fake`` (deterministic cost model, no model) or one
    or more comma-separated ``http(s)://`` URLs of SGLang servers / ``agentwarm serve``."""
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

        tokenizer = None if model == "tiny" else model
        if len(urls) == 1:
            return sglang.SGLangEngine(urls[0], tokenizer=tokenizer)
        from agentwarm.engines.routing import MultiWorkerEngine

        return MultiWorkerEngine(urls, tokenizer=tokenizer)
    raise ConfigError(
        f"--engine {spec!r} is not valid: use 'local', 'fake', or the URL of an SGLang server "
        "(http://HOST:PORT, several separated by commas)"
    )
