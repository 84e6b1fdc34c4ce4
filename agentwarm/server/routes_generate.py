"""``POST /generate`` of ``agentwarm serve``: SGLang's native generate endpoint, plain and
streamed.

``input_ids`` or ``text``; ``sampling_params.max_new_tokens: 0`` is a prefill-only request
(``Engine.prefill``, priority SPECULATIVE unless given), anything else a generation (priority
LIVE unless given). ``stream: true`` answers SSE ``data: {json}`` events, each with the whole
output so far (SGLang's default), then ``data: [DONE]``. A client that disconnects aborts its
request. This module is the only writer of the in-flight table and of the request counters of
``/metrics`` (:class:`~agentwarm.server.state.ServerState`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentwarm.engines.base import Completion, GenerateParams, PrefillStatus, Priority, new_rid
from agentwarm.engines.namespace import check_field, namespace_key
from agentwarm.engines.sglang.cache_details import cached_tokens_details
from agentwarm.engines.sglang.protocol import (
    ROUTING_KEY_HEADER,
    FinishReason,
    GenerateReply,
    GenerateRequest,
    MetaInfo,
    SamplingParams,
)
from agentwarm.errors import EngineError, RequestAborted
from agentwarm.server.http import (
    HTTPError,
    engine_error,
    error_reply,
    internal_error,
    read_json,
    validate,
)
from agentwarm.server.sse import SSEResponse, disconnected, sse
from agentwarm.server.state import ServerState

__all__ = ("GenerateRoutes", "Job")

_ABORT = FinishReason(type="abort", message="Abort before completion")


@dataclass(frozen=True, slots=True)
class Job:
    """One engine request of ``/generate`` (or of ``/v1/chat/completions``, which renders its
    messages to ``ids`` and hands the job to :meth:`GenerateRoutes.reply` /
    :meth:`GenerateRoutes.replies`)."""

    rid: str
    ids: list[int]
    sampling: SamplingParams
    priority: int | None
    namespace: str
    session: str | None
    log_metrics: bool

    @property
    def max_new_tokens(self) -> int:
        return self.sampling.max_new_tokens or 0

    @property
    def prefill_only(self) -> bool:
        return self.max_new_tokens == 0

    def generate_params(self) -> GenerateParams:
        """The engine request (``generate_with`` / ``stream_with``) of this job."""
        return GenerateParams(
            max_tokens=self.max_new_tokens,
            temperature=self.sampling.temperature,
            priority=Priority.LIVE if self.priority is None else self.priority,
            rid=self.rid,
            namespace=self.namespace,
            session=self.session,
            seed=self.sampling.sampling_seed,
        )


class GenerateRoutes:
    """The ``/generate`` route over ``state``'s engine."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.engine = state.engine

    def routes(self) -> list[Route]:
        return [Route("/generate", self.generate, methods=["POST", "PUT"])]

    async def generate(self, request: Request) -> Response:
        try:
            req = validate(GenerateRequest, await read_json(request, self.state.max_request_bytes))
            job = self._job(request, req)
        except HTTPError as exc:
            return error_reply(exc)
        if req.stream:
            return SSEResponse(self._events(job), abort=lambda: self.state.abort_quietly(job.rid))
        try:
            return JSONResponse(await self.reply(request, job))
        except HTTPError as exc:
            return error_reply(exc)

    async def reply(self, request: Request, job: Job) -> GenerateReply:
        """Run ``job`` to its reply; abort it if the client of ``request`` disconnects first.
        Raises :class:`~agentwarm.server.http.HTTPError` (a rid already running: 400)."""
        self._enter(job)
        try:
            return await self._until_disconnect(request, job.rid, self._run(job))
        finally:
            self.state.inflight.leave(job.rid)

    async def replies(self, job: Job) -> AsyncIterator[GenerateReply]:
        """Run ``job`` streamed: a reply with the whole output so far per chunk, the last with
        its finish reason (a prefill-only job: that one only). Raises
        :class:`~agentwarm.server.http.HTTPError` (a rid already running: 400)."""
        self._enter(job)
        try:
            if job.prefill_only:
                yield await self._run(job)
            else:
                async for event in self._stream_generate(job):
                    yield event
        finally:
            self.state.inflight.leave(job.rid)

    def _enter(self, job: Job) -> None:
        if not self.state.inflight.enter(job.rid):
            raise HTTPError(400, f"duplicate rid {job.rid!r}: a request with it is running")

    def _job(self, request: Request, req: GenerateRequest) -> Job:
        if req.text is not None and req.input_ids is not None:
            raise HTTPError(400, "give either text or input_ids, not both")
        if isinstance(req.text, list) or (req.input_ids and isinstance(req.input_ids[0], list)):
            raise HTTPError(400, "batch requests are not supported: send one prompt per request")
        if isinstance(req.rid, list):
            raise HTTPError(400, "rid must be a string (batch requests are not supported)")
        if req.text is not None:
            ids = self.engine.encode(req.text)
        elif req.input_ids is not None:
            ids = [int(i) for i in req.input_ids]  # type: ignore[arg-type]
        else:
            raise HTTPError(400, "missing input: give input_ids (a list of token ids) or text")
        if not ids:
            raise HTTPError(400, "empty prompt: input_ids/text must give at least one token")
        if min(ids) < 0:
            raise HTTPError(400, f"input_ids must be >= 0, got {min(ids)}")
        sampling = req.sampling_params or SamplingParams()
        limit = self.state.config.max_new_tokens
        if sampling.max_new_tokens is None:
            sampling = sampling.model_copy(update={"max_new_tokens": min(128, limit)})
        elif sampling.max_new_tokens > limit:
            raise HTTPError(
                400,
                f"sampling_params.max_new_tokens={sampling.max_new_tokens} exceeds this server's "
                f"limit of {limit}",
            )
        namespace = namespace_key(req.cache_salt, req.extra_key)
        header = request.headers.get(ROUTING_KEY_HEADER)
        if header:
            try:
                check_field("X-SMG-Routing-Key header", header)
            except ValueError as exc:
                raise HTTPError(400, str(exc)) from None
        session = header or req.routing_key or req.session_id
        return Job(
            rid=req.rid or new_rid(),
            ids=ids,
            sampling=sampling,
            priority=req.priority,
            namespace=namespace,
            session=session,
            log_metrics=req.log_metrics,
        )

    async def _run(self, job: Job) -> GenerateReply:
        start = time.perf_counter()
        try:
            if job.prefill_only:
                result = await self.engine.prefill(
                    job.ids,
                    priority=Priority.SPECULATIVE if job.priority is None else job.priority,
                    rid=job.rid,
                    namespace=job.namespace,
                    session=job.session,
                )
                aborted = result.status is PrefillStatus.ABORTED
                finish = _ABORT if aborted else FinishReason(type="length", length=0)
                prompt, cached = result.prompt_tokens, result.cached_tokens
                computed = result.computed_tokens
                by_source = result.cached_tokens_by_source
                self._record(job, prompt, cached, computed, 0, aborted, by_source)
                e2e = time.perf_counter() - start
                reply = _reply(job.rid, "", [], prompt, cached, computed, finish, e2e)
                return _with_sources(reply, result.cached_tokens_by_source)
            completion = await self.engine.generate_with(job.ids, job.generate_params())
        except RequestAborted as exc:
            cached, computed = exc.cached_tokens, exc.computed_tokens
            self._record(job, len(job.ids), cached, computed, 0, True)
            finish = FinishReason(type="abort", message=str(exc) or "aborted")
            e2e = time.perf_counter() - start
            return _reply(job.rid, "", [], len(job.ids), cached, computed, finish, e2e)
        except asyncio.CancelledError:  # the handler went away before the engine answered
            self._record(job, len(job.ids), 0, 0, 0, True)
            raise
        except EngineError as exc:
            raise engine_error(exc) from exc
        except Exception as exc:  # an engine bug must not look like a dropped connection
            raise internal_error(exc) from exc
        self._record_completion(job, completion)
        return _completion_reply(job.rid, completion, time.perf_counter() - start)

    async def _events(self, job: Job) -> AsyncIterator[bytes]:
        replies = self.replies(job)
        try:
            async for event in replies:
                yield sse(event)
        except HTTPError as exc:
            yield sse(exc.body())
        finally:
            await replies.aclose()  # type: ignore[attr-defined]
        yield b"data: [DONE]\n\n"

    async def _stream_generate(self, job: Job) -> AsyncIterator[GenerateReply]:
        start = time.perf_counter()
        out_ids: list[int] = []
        text = ""
        stream = self.engine.stream_with(job.ids, job.generate_params())
        recorded = False
        try:
            async for chunk in stream:
                out_ids.extend(chunk.token_ids)
                text += chunk.text
                if chunk.completion is not None:
                    recorded = True
                    self._record_completion(job, chunk.completion)
                    e2e = time.perf_counter() - start
                    yield _completion_reply(job.rid, chunk.completion, e2e)
                    return
                yield GenerateReply(
                    text=text,
                    output_ids=list(out_ids),
                    meta_info=MetaInfo(
                        id=job.rid,
                        prompt_tokens=len(job.ids),
                        completion_tokens=len(out_ids),
                        finish_reason=None,
                    ),
                )
        except RequestAborted as exc:
            recorded = True
            cached, computed = exc.cached_tokens, exc.computed_tokens
            self._record(job, len(job.ids), cached, computed, len(out_ids), True)
            finish = FinishReason(type="abort", message=str(exc) or "aborted")
            e2e = time.perf_counter() - start
            yield _reply(job.rid, text, out_ids, len(job.ids), cached, computed, finish, e2e)
            return
        except (GeneratorExit, asyncio.CancelledError):
            # Closed before the engine reported an outcome (the drain after an abort timed out,
            # or shutdown): still an aborted request, with no processed prompt tokens known.
            if not recorded:
                self._record(job, len(job.ids), 0, 0, len(out_ids), True)
            raise
        except EngineError as exc:
            raise engine_error(exc) from exc
        except Exception as exc:  # an engine bug must not look like a dropped connection
            raise internal_error(exc) from exc
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()  # type: ignore[attr-defined]
        raise HTTPError(500, "engine stream ended without a completion", "InternalServerError")

    async def _until_disconnect(
        self, request: Request, rid: str, work: Awaitable[GenerateReply]
    ) -> GenerateReply:
        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(disconnected(request.receive))
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await self.state.abort_quietly(rid)
            return await task
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()

    def _record(
        self,
        job: Job,
        prompt: int,
        cached: int,
        computed: int,
        generated: int,
        aborted: bool,
        by_source: Mapping[str, int] | None = None,
    ) -> None:
        if job.log_metrics:
            self.state.metrics.record(
                prompt_tokens=prompt,
                cached_tokens=cached,
                computed_tokens=computed,
                generation_tokens=generated,
                aborted=aborted,
                prefill_only=job.prefill_only,
                cached_by_source=by_source,
            )

    def _record_completion(self, job: Job, completion: Completion) -> None:
        aborted = completion.finish_reason == "abort"
        self._record(
            job,
            completion.prompt_tokens,
            completion.cached_tokens,
            completion.computed_tokens,
            len(completion.token_ids),
            aborted,
            completion.cached_tokens_by_source,
        )


def _reply(
    rid: str,
    text: str,
    out_ids: Sequence[int],
    prompt: int,
    cached: int,
    computed: int,
    finish: FinishReason,
    e2e: float,
    ttft: float | None = None,
) -> GenerateReply:
    meta = MetaInfo(
        id=rid,
        finish_reason=finish,
        prompt_tokens=prompt,
        completion_tokens=len(out_ids),
        cached_tokens=cached,
        computed_tokens=computed,
        e2e_latency=e2e,
    )
    if ttft is not None:
        meta["ttft"] = ttft
    return GenerateReply(text=text, output_ids=list(out_ids), meta_info=meta)


def _completion_reply(rid: str, completion: Completion, e2e: float) -> GenerateReply:
    ids = list(completion.token_ids)
    if completion.finish_reason == "length":
        finish = FinishReason(type="length", length=len(ids))
    elif completion.finish_reason == "abort":
        finish = FinishReason(**_ABORT)
    else:
        finish = FinishReason(type="stop", matched=ids[-1] if ids else None)
    reply = _reply(
        rid,
        completion.text,
        ids,
        completion.prompt_tokens,
        completion.cached_tokens,
        completion.computed_tokens,
        finish,
        e2e,
        completion.ttft_s,
    )
    return _with_sources(reply, completion.cached_tokens_by_source)


def _with_sources(reply: GenerateReply, by_source: Mapping[str, int]) -> GenerateReply:
    """``reply`` with SGLang's ``meta_info.cached_tokens_details`` when the engine split its
    cached tokens by tier (the disk tier's as ``storage``)."""
    details = cached_tokens_details(by_source)
    if details is not None:
        reply["meta_info"]["cached_tokens_details"] = details
    return reply
