"""The pieces of ``benchmarks/gateway_bench.py``: the replayed requests, the servers, the client.

* :func:`build_replay` — the conversations of a file as the requests an OpenAI client sends:
  one per assistant turn, with the conversation so far, under the head (system prompt + tools)
  of that turn's node in the layout ``agentwarm bench --conversations --layout`` builds
  (:class:`~agentwarm.bench.workload.Workload`), and the think time before it.
* :func:`stack` — a fresh ``agentwarm serve`` app on the engine, served by uvicorn on loopback
  in this event loop, alone (``direct``) or behind the gateway app (``nohooks``: a plain proxy;
  ``learner``: the gateway's learner, which prefetches).
* :func:`ask` — one streamed request with the ``openai`` SDK; TTFT is measured client-side.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import openai
import uvicorn
from starlette.applications import Starlette

from agentwarm.bench.conversations import load_conversations, shared_policy, tools_beside
from agentwarm.bench.inputs import read_tools_file
from agentwarm.bench.workload import EpisodeScript, PromptSizes, ThinkTime, Workload
from agentwarm.chat import FALLBACK, Message
from agentwarm.engines.base import Engine
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.registry import build_engine
from agentwarm.engines.tokenizers import ByteTokenizer
from agentwarm.errors import ConfigError
from agentwarm.gateway.app import GatewayConfig, create_gateway_app
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.prompts import Renderer, load_renderer
from agentwarm.gateway.types import Hooks, NoHooks
from agentwarm.gateway.upstream import Upstream
from agentwarm.server.app import ServerConfig, create_app
from agentwarm.server.run import bind_socket
from agentwarm.warmup.render import ChatRenderer

__all__ = (
    "KINDS",
    "EngineSpec",
    "Replay",
    "Sample",
    "Stack",
    "ask",
    "build_replay",
    "renderer_for",
    "replay",
    "requests_of",
    "served",
    "stack",
)

#: How the client reaches the upstream: straight, through a plain proxy, through the learner.
KINDS = ("direct", "nohooks", "learner")
#: Context of the fake engine, in byte tokens (a long tau-airline conversation is ~60k bytes).
FAKE_CONTEXT = 1 << 17
#: A request that takes longer than this (a cold prompt on a slow CPU) fails the run.
REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """The upstream's engine: ``kind`` (``fake``/``local``), ``model`` and the fake's costs."""

    kind: str = "fake"
    model: str = "small"
    seconds_per_token: float = 2e-5
    seconds_per_output_token: float = 2e-4

    def build(self) -> Engine:
        """A new engine (inside the event loop). The fake one is made here rather than by
        ``build_engine``: its byte tokens make a prompt ~4x longer than a real tokenizer's, so
        it needs a longer context than its default."""
        if self.kind != "fake":
            return build_engine(self.kind, model=self.model)
        return FakeEngine(
            seconds_per_token=self.seconds_per_token,
            seconds_per_output_token=self.seconds_per_output_token,
            max_context=FAKE_CONTEXT,
            model_name=f"fake-{self.model}",
        )


def renderer_for(spec: EngineSpec) -> Renderer:
    """The token ids and chat template the upstream renders with: the fake engine's bytes and
    the fallback template, else the model's (:func:`~agentwarm.gateway.prompts.load_renderer`)."""
    if spec.kind == "fake":
        return Renderer(ChatRenderer(ByteTokenizer().encode, FALLBACK))
    return load_renderer(spec.model)


@dataclass(frozen=True, slots=True)
class Replay:
    """The prompts of one layout and the scripts of the warm-up and measured conversations."""

    workload: Workload
    warmup: tuple[EpisodeScript, ...]
    measured: tuple[EpisodeScript, ...]


def build_replay(
    path: Path,
    layout: str,
    *,
    encode: Any,
    sizes: PromptSizes,
    think: ThinkTime,
    warmup_think: ThinkTime,
    warmup: int,
    conversations: int,
    max_steps: int | None,
    seed: int = 0,
) -> Replay:
    """The first ``warmup`` conversations of ``path`` (think times of ``warmup_think``), then
    the next ``conversations`` (of ``think``), each cut to ``max_steps`` assistant turns; the
    policy is the conversations' system message and the schemas the ``tools.json`` beside
    ``path``, as ``agentwarm bench --conversations`` takes them."""
    convs = load_conversations(path)
    if warmup + conversations > len(convs):
        raise ConfigError(
            f"{path} holds {len(convs)} conversations: --warmup {warmup} plus --conversations "
            f"{conversations} is more; ask for fewer"
        )
    policy, _ = shared_policy(convs)
    tools_file = tools_beside(path)
    workload = Workload.build(
        [c.episode for c in convs],
        encode=encode,
        layout=layout,
        seed=seed,
        sizes=sizes,
        think=think,
        system_text=policy,
        tool_schemas=read_tools_file(tools_file) if tools_file else None,
        conversations={c.episode.id: c.messages for c in convs},
    )
    episodes = [
        replace(c.episode, steps=c.episode.steps[:max_steps]) if max_steps else c.episode
        for c in convs
    ]
    warm = replace(workload, think=warmup_think)
    return Replay(
        workload,
        tuple(warm.script(e) for e in episodes[:warmup]),
        tuple(workload.script(e) for e in episodes[warmup : warmup + conversations]),
    )


def requests_of(
    workload: Workload, script: EpisodeScript
) -> Iterator[tuple[float, dict[str, Any]]]:
    """Per assistant turn of ``script``: the think time before it and the request body (its
    node's system prompt and tools, the conversation so far) an OpenAI client sends."""
    conversation: list[Message] = list(script.turns[0])
    for k in range(1, len(script.turns)):
        name = script.names[k]
        body: dict[str, Any] = {
            "messages": [{"role": "system", "content": workload.system[name]}, *conversation]
        }
        if workload.tools[name]:
            body["tools"] = list(workload.tools[name])
        yield script.think_s[k - 1], body
        conversation.extend(script.turns[k])


@contextlib.asynccontextmanager
async def served(app: Starlette) -> AsyncIterator[str]:
    """``app`` served by uvicorn on a free loopback port in this event loop; yields its URL.
    At exit the server stops (its lifespan closes the app's engine or hooks)."""
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5
        )
    )
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:  # uvicorn has no start event: poll its flag
            if task.done():
                await task
                raise RuntimeError("uvicorn stopped before it started serving")
            await asyncio.sleep(0.005)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@dataclass(slots=True)
class Stack:
    """One client's way to an upstream: ``url`` (the upstream's, or the gateway's in front of
    it), the ``learner`` (``learner`` kind only), the gateway app (not ``direct``) and the
    upstream's model name."""

    kind: str
    url: str
    model: str
    learner: Learner | None = None
    gateway: Starlette | None = None
    client: openai.AsyncOpenAI = field(init=False)

    def gateway_summary(self) -> dict[str, Any]:
        """The gateway's own figures (``overhead_p50_s``, ...); ``{}`` for ``direct``."""
        if self.gateway is None:
            return {}
        return dict(self.gateway.state.gateway.metrics.summary())


@contextlib.asynccontextmanager
async def stack(kind: str, spec: EngineSpec, renderer: Renderer | None) -> AsyncIterator[Stack]:
    """A fresh upstream (``spec``'s engine behind ``agentwarm serve``'s app) reached as ``kind``
    (:data:`KINDS`) says, with an ``openai`` client of it; all closed at exit."""
    if kind not in KINDS:
        raise ConfigError(f"unknown stack {kind!r}: use one of {', '.join(KINDS)}")
    async with contextlib.AsyncExitStack() as exits:
        engine = spec.build()
        upstream_url = await exits.enter_async_context(
            served(create_app(engine, ServerConfig(), close_engine=True))
        )
        out = Stack(kind, upstream_url, engine.model_name)
        if kind != "direct":
            upstream = Upstream([upstream_url])
            hooks: Hooks = NoHooks()
            if kind == "learner":
                out.learner = Learner(upstream, renderer)
                hooks = out.learner
            out.gateway = create_gateway_app(upstream, hooks, GatewayConfig())
            out.url = await exits.enter_async_context(served(out.gateway))
        # The SDK's own HTTP client, without proxies from the environment (loopback only).
        http = openai.DefaultAsyncHttpxClient(trust_env=False)
        out.client = openai.AsyncOpenAI(
            base_url=out.url + "/v1",
            api_key="none",
            http_client=http,
            max_retries=0,
            timeout=REQUEST_TIMEOUT_S,
        )
        exits.push_async_callback(out.client.close)
        yield out


@dataclass(frozen=True, slots=True)
class Sample:
    """One request as the client saw it: time to the first content (or tool-call) chunk, to
    the end of the stream, and the usage the upstream reported."""

    ttft_s: float
    total_s: float
    prompt_tokens: int
    cached_tokens: int


async def ask(target: Stack, body: dict[str, Any], *, max_tokens: int) -> Sample:
    """Send ``body`` streamed (with usage) to ``target`` and time it."""
    t0 = time.perf_counter()
    stream = await target.client.chat.completions.create(
        model=target.model,
        messages=cast(Any, body["messages"]),
        tools=cast(Any, body.get("tools", openai.NOT_GIVEN)),
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    ttft: float | None = None
    prompt = cached = 0
    async for chunk in stream:
        if ttft is None and chunk.choices:
            delta = chunk.choices[0].delta
            if delta.content or delta.tool_calls:
                ttft = time.perf_counter() - t0
        if chunk.usage is not None:
            prompt = chunk.usage.prompt_tokens
            details = chunk.usage.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
    total = time.perf_counter() - t0
    return Sample(ttft if ttft is not None else total, total, prompt, cached)


async def replay(
    target: Stack, workload: Workload, scripts: Sequence[EpisodeScript], *, max_tokens: int
) -> list[Sample]:
    """The conversations of ``scripts`` one after another, each request after its think time."""
    samples: list[Sample] = []
    for script in scripts:
        for think_s, body in requests_of(workload, script):
            if think_s > 0:
                await asyncio.sleep(think_s)
            samples.append(await ask(target, body, max_tokens=max_tokens))
    return samples
