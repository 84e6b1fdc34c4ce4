"""The pieces of ``benchmarks/gateway_bench.py``: the replayed requests, the servers, the client.

* :func:`build_replay` — the conversations of a file as the requests an OpenAI client sends:
  one per assistant turn, with the conversation so far, under the head (system prompt + tools)
  of that turn's node in the layout ``agentwarm bench --conversations --layout`` builds
  (:class:`~agentwarm.bench.workload.Workload`), and the think time before it.
* :func:`stack` — a fresh ``agentwarm serve`` app on the engine, served by uvicorn on loopback
  in this event loop, alone (``direct``) or behind the gateway app (``nohooks``: a plain proxy;
  ``learner``: the gateway's learner, which prefetches); or, for ``vllm:URL``, that running
  vLLM server (not started here), each stack in its own ``cache_salt``.
* :func:`ask` — one streamed request with the ``openai`` SDK; TTFT is measured client-side.
* :func:`without_tools` — a request as a server that takes no tools is sent it (the dev vLLM
  server runs without a tool-call parser, and SmolLM2's chat template renders no tool calls).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import uvicorn
from starlette.applications import Starlette

from agentwarm.bench.conversations import load_conversations, shared_policy, tools_beside
from agentwarm.bench.inputs import read_tools_file
from agentwarm.bench.workload import EpisodeScript, PromptSizes, ThinkTime, Workload
from agentwarm.chat import FALLBACK, Message
from agentwarm.engines.base import Engine
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.registry import VLLM_PREFIX, build_engine
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
    "engine_arg",
    "renderer_for",
    "replay",
    "requests_of",
    "served",
    "served_model",
    "stack",
    "without_tools",
)

#: How the client reaches the upstream: straight, through a plain proxy, through the learner.
KINDS = ("direct", "nohooks", "learner")
#: Context of the fake engine, in byte tokens (a long tau-airline conversation is ~60k bytes).
FAKE_CONTEXT = 1 << 17
#: A request that takes longer than this (a cold prompt on a slow CPU) fails the run.
REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """The upstream's engine: ``kind`` (``fake``/``local``/``vllm``), ``model`` (a preset or
    checkpoint directory: the renderer's) and the fake's costs; for ``vllm``, the running
    server's ``url`` and the ``name`` it serves the model as (requests' ``model``)."""

    kind: str = "fake"
    model: str = "small"
    seconds_per_token: float = 2e-5
    seconds_per_output_token: float = 2e-4
    url: str | None = None
    name: str | None = None

    @property
    def takes_tools(self) -> bool:
        """Whether requests carry ``tools`` and tool calls as such (not for ``vllm``: see
        :func:`without_tools`)."""
        return self.kind != "vllm"

    def build(self) -> Engine:
        """A new engine (inside the event loop). The fake one is made here rather than by
        ``build_engine``: its byte tokens make a prompt ~4x longer than a real tokenizer's, so
        it needs a longer context than its default."""
        if self.kind == "vllm":
            raise ConfigError("a vllm upstream is a running server: it is not built here")
        if self.kind != "fake":
            return build_engine(self.kind, model=self.model)
        return FakeEngine(
            seconds_per_token=self.seconds_per_token,
            seconds_per_output_token=self.seconds_per_output_token,
            max_context=FAKE_CONTEXT,
            model_name=f"fake-{self.model}",
        )


def served_model(url: str) -> tuple[str, str]:
    """The model a running vLLM server at ``url`` serves: its name (requests' ``model``) and the
    directory it loaded it from (``/v1/models``' ``root``: the renderer's default, which must be
    a directory here); ConfigError when the server does not answer so."""
    try:
        resp = httpx.get(f"{url}/v1/models", timeout=10, trust_env=False)
        data = resp.json()["data"][0]
        return str(data["id"]), str(data.get("root") or data["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        why = f"{url}/v1/models: no served model ({exc}); is it a vLLM server?"
        raise ConfigError(why) from exc


def engine_arg(value: str) -> str:
    """``--engine``'s value: ``fake``, ``local`` or ``vllm:URL``."""
    if value in ("fake", "local") or (value.startswith(VLLM_PREFIX + "http") and len(value) > 12):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: use fake, local or vllm:http://HOST:PORT")


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
    workload: Workload, script: EpisodeScript, *, tools: bool = True
) -> Iterator[tuple[float, dict[str, Any]]]:
    """Per assistant turn of ``script``: the think time before it and the request body (its
    node's system prompt and tools, the conversation so far) an OpenAI client sends
    (:func:`without_tools` of it unless ``tools``)."""
    conversation: list[Message] = list(script.turns[0])
    for k in range(1, len(script.turns)):
        name = script.names[k]
        body: dict[str, Any] = {
            "messages": [{"role": "system", "content": workload.system[name]}, *conversation]
        }
        if workload.tools[name]:
            body["tools"] = list(workload.tools[name])
        yield script.think_s[k - 1], body if tools else without_tools(body)
        conversation.extend(script.turns[k])


def without_tools(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` for a server that takes no ``tools`` (a vLLM server without
    ``--enable-auto-tool-choice``, a chat template without tool calls): the node's tool schemas
    as JSON lines at the end of its system prompt, each assistant tool call as a JSON line of
    its name and arguments in the message's text; tool results stay ``tool`` messages (of text).
    The heads stay one per node and about as long; only the wire format of tools changes."""
    messages: list[dict[str, Any]] = []
    for m in body["messages"]:
        msg = {k: v for k, v in m.items() if k != "tool_calls"}
        calls = [
            json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
            for c in m.get("tool_calls") or ()
        ]
        msg["content"] = "\n".join([t for t in (m.get("content") or "",) if t] + calls)
        messages.append(msg)
    if tools := body.get("tools"):
        listed = "\n".join(json.dumps(t, sort_keys=True) for t in tools)
        messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n# Tools\n{listed}"}
    return {k: v for k, v in body.items() if k not in ("messages", "tools")} | {
        "messages": messages
    }


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
    #: The ``cache_salt`` every request carries (``None``: none).
    salt: str | None = None
    client: openai.AsyncOpenAI = field(init=False)

    def gateway_summary(self) -> dict[str, Any]:
        """The gateway's own figures (``overhead_p50_s``, ...); ``{}`` for ``direct``."""
        if self.gateway is None:
            return {}
        return dict(self.gateway.state.gateway.metrics.summary())


@contextlib.asynccontextmanager
async def stack(
    kind: str, spec: EngineSpec, renderer: Renderer | None, *, salt: str | None = None
) -> AsyncIterator[Stack]:
    """A fresh upstream (``spec``'s engine behind ``agentwarm serve``'s app; for ``vllm``, the
    running server at ``spec.url``, shared: ``salt`` then keeps this stack's cache apart)
    reached as ``kind`` (:data:`KINDS`) says, with an ``openai`` client of it whose requests
    carry ``salt`` as their ``cache_salt``; all closed at exit."""
    if kind not in KINDS:
        raise ConfigError(f"unknown stack {kind!r}: use one of {', '.join(KINDS)}")
    async with contextlib.AsyncExitStack() as exits:
        if spec.kind == "vllm":
            if not spec.url or not spec.name:
                raise ConfigError("a vllm upstream needs the server's URL and model name")
            out = Stack(kind, spec.url, spec.name, salt=salt)
            workers = [VLLM_PREFIX + spec.url]
        else:
            engine = spec.build()
            upstream_url = await exits.enter_async_context(
                served(create_app(engine, ServerConfig(), close_engine=True))
            )
            out = Stack(kind, upstream_url, engine.model_name, salt=salt)
            workers = [upstream_url]
        if kind != "direct":
            tokenizer = renderer.chat.tokenizer if renderer is not None else None
            upstream = Upstream(workers, tokenizer=tokenizer)
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
    the end of the stream, and the usage the upstream reported; ``error``: why it failed (an
    error of the ``openai`` SDK: an HTTP status, a broken connection), its times then moot."""

    ttft_s: float
    total_s: float
    prompt_tokens: int
    cached_tokens: int
    error: str | None = None
    #: The reply's streamed text (its content deltas).
    text: str = ""


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
        extra_body={"cache_salt": target.salt} if target.salt else None,
    )
    ttft: float | None = None
    prompt = cached = 0
    text: list[str] = []
    async for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            if ttft is None and (delta.content or delta.tool_calls):
                ttft = time.perf_counter() - t0
            text.append(delta.content or "")
        if chunk.usage is not None:
            prompt = chunk.usage.prompt_tokens
            details = chunk.usage.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
    total = time.perf_counter() - t0
    return Sample(ttft if ttft is not None else total, total, prompt, cached, text="".join(text))


async def replay(
    target: Stack,
    workload: Workload,
    scripts: Sequence[EpisodeScript],
    *,
    max_tokens: int,
    tools: bool = True,
    after: Callable[[dict[str, Any], str], None] | None = None,
) -> list[Sample]:
    """The conversations of ``scripts`` one after another, each request after its think time
    (:func:`without_tools` unless ``tools``); a request the SDK raises for is a sample with its
    ``error``. ``after(body, text)`` is called when a reply has ended (not after an error)."""
    samples: list[Sample] = []
    for script in scripts:
        for think_s, body in requests_of(workload, script, tools=tools):
            if think_s > 0:
                await asyncio.sleep(think_s)
            t0 = time.perf_counter()
            try:
                samples.append(await ask(target, body, max_tokens=max_tokens))
                if after is not None:
                    after(body, samples[-1].text)
            except openai.APIError as exc:  # counted as the client's error; the replay goes on
                spent = time.perf_counter() - t0
                samples.append(Sample(spent, spent, 0, 0, error=f"{type(exc).__name__}: {exc}"))
    return samples
