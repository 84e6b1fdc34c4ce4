"""``POST /v1/chat/completions`` of ``agentwarm serve``: OpenAI's chat endpoint over the engine.

The messages and tools are rendered with the engine's chat template
(:attr:`Engine.chat_template <agentwarm.engines.Engine.chat_template>`, else agentwarm's
fallback format) with the generation prompt — as SGLang's and vLLM's chat endpoints render them —
and the ids go to the engine as a ``/generate`` job (:class:`~agentwarm.server.routes_generate.
GenerateRoutes` runs it, counts it in ``/metrics`` and aborts it when the client goes away).
With ``tools`` and a template whose model family's tool-call format is known
(:attr:`ChatTemplate.family <agentwarm.chat.ChatTemplate.family>`), the calls in the reply come
back as ``tool_calls`` (``finish_reason: "tool_calls"``); a stream then holds the output back and
sends the text and the calls at the end, as one delta each. ``usage.prompt_tokens_details.
cached_tokens`` is the prompt found in the prefix cache of the request's tenant (``cache_salt`` /
``extra_key``, the namespace ``/generate`` isolates by). ``max_tokens: 0`` is a warm request: a
prefill at speculative priority, answered with ``usage`` and no choices. The wire format is
:mod:`~agentwarm.server.chat_protocol`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentwarm.chat import FALLBACK, split_tool_calls
from agentwarm.engines.base import new_rid
from agentwarm.engines.namespace import check_field
from agentwarm.engines.sglang.protocol import (
    ROUTING_KEY_HEADER,
    GenerateReply,
    SamplingParams,
    finish_type,
)
from agentwarm.errors import ConfigError
from agentwarm.server.chat_protocol import (
    ChatRequest,
    chat_chunk,
    chat_completion,
    parse_chat_request,
    usage,
)
from agentwarm.server.http import HTTPError, error_reply, read_json, validate
from agentwarm.server.routes_generate import GenerateRoutes, Job
from agentwarm.server.sse import SSEResponse, sse
from agentwarm.server.state import ServerState

__all__ = ("ChatRoutes",)


class ChatRoutes:
    """The ``/v1/chat/completions`` route; its jobs run through ``generate``."""

    def __init__(self, state: ServerState, generate: GenerateRoutes) -> None:
        self.state = state
        self.generate = generate
        self.template = state.engine.chat_template or FALLBACK

    def routes(self) -> list[Route]:
        return [Route("/v1/chat/completions", self.complete, methods=["POST"])]

    async def complete(self, request: Request) -> Response:
        try:
            req = parse_chat_request(await read_json(request, self.state.max_request_bytes))
            job = self._job(request, req)
        except HTTPError as exc:
            return error_reply(exc)
        if req.stream:
            events = self._events(job, req)
            return SSEResponse(events, abort=lambda: self.state.abort_quietly(job.rid))
        try:
            reply = await self.generate.reply(request, job)
        except HTTPError as exc:
            return error_reply(exc)
        meta = reply["meta_info"]
        used = _usage(reply)
        if job.prefill_only:
            warm = chat_completion(
                job.rid,
                self.state.name,
                content=None,
                tool_calls=[],
                finish_reason=None,
                usage_=used,
                warm=True,
            )
            return JSONResponse(warm)
        content, calls = self._split(req, reply["text"])
        return JSONResponse(
            chat_completion(
                job.rid,
                self.state.name,
                content=content if content or not calls else None,
                tool_calls=calls,
                finish_reason=_finish(finish_type(meta), calls),
                usage_=used,
            )
        )

    def _job(self, request: Request, req: ChatRequest) -> Job:
        try:
            messages = req.chat_messages()
            text = self.template.render(messages, tools=req.tools, add_generation_prompt=True)
        except (ValueError, ConfigError) as exc:
            raise HTTPError(400, str(exc)) from None
        ids = self.state.engine.encode(text)
        limit = self.state.config.max_new_tokens
        wanted = req.limit
        if wanted is not None and wanted > limit:
            raise HTTPError(
                400, f"max_tokens={wanted} exceeds this server's limit of {limit}: ask for less"
            )
        fields: dict[str, Any] = {"max_new_tokens": limit if wanted is None else wanted}
        if req.temperature is not None:
            fields["temperature"] = float(req.temperature)
        if req.seed is not None:
            fields["sampling_seed"] = req.seed
        header = request.headers.get(ROUTING_KEY_HEADER)
        session = header or req.user
        if session:
            try:
                check_field("session (X-SMG-Routing-Key header or user)", session)
            except ValueError as exc:
                raise HTTPError(400, str(exc)) from None
        return Job(
            rid=new_rid(),
            ids=ids,
            sampling=validate(SamplingParams, fields),
            priority=None,
            namespace=req.namespace,
            session=session,
            log_metrics=True,
        )

    def _split(self, req: ChatRequest, text: str) -> tuple[str, list[dict[str, Any]]]:
        """The reply's text and tool calls (none parsed without tools or a known family)."""
        family = self.template.family
        if not req.tools or family is None:
            return text, []
        return split_tool_calls(text, family)

    async def _events(self, job: Job, req: ChatRequest) -> AsyncIterator[bytes]:
        rid, model = job.rid, self.state.name
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        hold = bool(req.tools) and self.template.family is not None  # calls are parsed at the end
        replies = self.generate.replies(job)
        started, sent = False, ""
        try:
            async for reply in replies:
                if job.prefill_only:
                    yield sse(chat_chunk(rid, model, None, usage_=_usage(reply)))
                    continue
                text, finish = reply["text"], finish_type(reply["meta_info"])
                if not hold:
                    if not started:
                        started = True
                        yield sse(chat_chunk(rid, model, {"role": "assistant", "content": ""}))
                    if text.startswith(sent) and len(text) > len(sent):
                        yield sse(chat_chunk(rid, model, {"content": text[len(sent) :]}))
                        sent = text
                if finish is None:
                    continue
                calls: list[dict[str, Any]] = []
                if hold:
                    content, calls = self._split(req, text)
                    yield sse(chat_chunk(rid, model, {"role": "assistant", "content": content}))
                    if calls:
                        numbered = [{"index": i, **call} for i, call in enumerate(calls)]
                        yield sse(chat_chunk(rid, model, {"tool_calls": numbered}))
                yield sse(chat_chunk(rid, model, {}, finish_reason=_finish(finish, calls)))
                if include_usage:
                    yield sse(chat_chunk(rid, model, None, usage_=_usage(reply)))
        except HTTPError as exc:
            yield sse(exc.body())
        finally:
            await replies.aclose()  # type: ignore[attr-defined]
        yield b"data: [DONE]\n\n"


def _usage(reply: GenerateReply) -> dict[str, Any]:
    meta = reply["meta_info"]
    return usage(
        meta.get("prompt_tokens", 0),
        meta.get("completion_tokens", 0),
        meta.get("cached_tokens", 0),
    )


def _finish(kind: str | None, calls: list[dict[str, Any]]) -> str | None:
    """OpenAI's finish reason: ``tool_calls`` when the reply made calls, else the engine's."""
    if calls and kind == "stop":
        return "tool_calls"
    return kind
