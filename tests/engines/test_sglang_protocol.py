"""The wire format is defined once (``agentwarm.engines.sglang.protocol``): what the client sends
is what the server's request models accept, and SGLang's replies (extra fields and all) read as
``agentwarm serve``'s do.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from agentwarm.engines.sglang import SGLangEngine
from agentwarm.engines.sglang.protocol import (
    FinishReason,
    GenerateReply,
    GenerateRequest,
    MetaInfo,
    finish_message,
    finish_type,
    generate_body,
    meta_info,
    output_delta,
    server_ttft,
    sse_payloads,
    token_counts,
)
from agentwarm.errors import InvalidRequest


def test_a_prefill_body_sends_only_what_it_sets_and_the_server_model_accepts_it() -> None:
    body = generate_body(
        [5, 6, 7],
        max_new_tokens=0,
        temperature=0.7,
        seed=3,
        rid="r" * 32,
        stream=False,
        priority=0,
        namespace="tenant",
    )
    assert body == {
        "input_ids": [5, 6, 7],
        "sampling_params": {"max_new_tokens": 0},
        "rid": "r" * 32,
        "stream": False,
        "priority": 0,
        "cache_salt": "tenant",
        "extra_key": "tenant",
    }
    request = GenerateRequest.model_validate(body)
    assert request.sampling_params is not None
    assert (request.sampling_params.max_new_tokens, request.priority) == (0, 0)
    assert (request.cache_salt, request.extra_key) == ("tenant", "tenant")


def test_a_generate_body_carries_sampling_and_leaves_out_priority_and_empty_namespace() -> None:
    body = generate_body(
        [1],
        max_new_tokens=4,
        temperature=0.5,
        seed=9,
        rid="x",
        stream=True,
        priority=None,
        namespace="",
        salt_fields=("extra_key",),
    )
    assert body == {
        "input_ids": [1],
        "sampling_params": {"max_new_tokens": 4, "temperature": 0.5, "sampling_seed": 9},
        "rid": "x",
        "stream": True,
    }
    assert GenerateRequest.model_validate(body).sampling_params is not None


@pytest.mark.parametrize(
    ("ids", "max_new_tokens", "message"),
    [([], 1, "empty prompt"), ([1], -1, "max_tokens must be >= 0")],
)
def test_bodies_the_server_would_refuse_are_refused_here(
    ids: list[int], max_new_tokens: int, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        generate_body(
            ids,
            max_new_tokens=max_new_tokens,
            temperature=0.0,
            seed=None,
            rid="r",
            stream=False,
            priority=None,
            namespace="",
        )


def test_only_the_two_namespace_fields_can_carry_the_namespace() -> None:
    with pytest.raises(ValueError, match=r"salt_fields must be among .* got \['tenant'\]"):
        SGLangEngine("http://127.0.0.1:1", tokenizer="byte", salt_fields=("tenant",))


def test_sglang_replies_are_read_with_fields_agentwarm_does_not_use() -> None:
    reply = {
        "text": "hi",
        "output_ids": [104, 105],
        "meta_info": {
            "id": "abc",
            "finish_reason": {"type": "stop", "matched": 151645},
            "prompt_tokens": 12,
            "completion_tokens": 2,
            "cached_tokens": 8,
            "e2e_latency": 0.5,
            "weight_version": "default",
            "request_received_ts": 10.0,
            "prefill_finished_ts": 10.25,
        },
    }
    meta = meta_info(reply)
    assert finish_type(meta) == "stop" and server_ttft(meta) == 0.25
    assert token_counts(meta, 99) == (12, 8, None)  # SGLang does not report computed tokens
    assert finish_type(MetaInfo(finish_reason="length")) == "length"
    aborted = MetaInfo(finish_reason=FinishReason(type="abort", message="gone"))
    assert (finish_type(aborted), finish_message(aborted)) == ("abort", "gone")
    empty = meta_info({})
    assert finish_type(empty) is None and server_ttft(empty) is None
    assert token_counts(empty, 7) == (7, 0, None)


def test_stream_events_are_read_as_totals_or_deltas() -> None:
    total = GenerateReply(text="abc", output_ids=[97, 98, 99], meta_info={"completion_tokens": 3})
    assert output_delta(total, [97], "a") == ([98, 99], "bc")
    delta = GenerateReply(text="c", output_ids=[99], meta_info={})
    assert output_delta(delta, [97, 98], "ab") == ([99], "c")


async def _payloads(chunks: list[str]) -> list[str]:
    async def text() -> AsyncIterator[str]:
        for chunk in chunks:
            yield chunk

    return [p async for p in sse_payloads(text())]


async def test_sse_events_end_only_at_cr_lf_or_crlf_whatever_the_text_holds() -> None:
    # vLLM's JSON carries U+2028, U+0085, U+001C... unescaped when a token decodes to one;
    # str.splitlines (and httpx's aiter_lines) split there and cut the event in two.
    texts = ["a\u2028b", "c\x85d", "e\u2029f", "g\x1ch\x0bi\x0cj"]
    events = [json.dumps({"text": t}, ensure_ascii=False) for t in texts]
    stream = "".join(f"data: {e}\r\n\r\n" for e in events) + "data: [DONE]\n\n"
    for size in (1, 2, 3, 7, len(stream)):  # the events split across chunks anywhere
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert [json.loads(p)["text"] for p in await _payloads(chunks)] == texts


async def test_sse_payloads_stop_at_done_and_keep_a_last_line_without_newline() -> None:
    assert await _payloads(["data: 1\rdata: 2\n: comment\nevent: x\ndata:3"]) == ["1", "2", "3"]
    assert await _payloads(["data: 1\n\ndata: [DONE]\n\ndata: 2\n\n"]) == ["1"]
    assert await _payloads(["data: 1\n", "data: [DONE]"]) == ["1"]
