"""Malformed input over the wire to ``agentwarm serve`` (the embedded engine; the chat cases on
the fake engine too): every case is a 4xx JSON error naming the field, on a connection that
stays open, before any engine work; the next request is served."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest_server import ServeProcess, serve

DEEP = 100_000
GEN = b'"sampling_params": {"max_new_tokens": 4}'


def generate(fields: bytes) -> bytes:
    return b'{"input_ids": [1, 2, 3], ' + fields + b"}"


def chat(messages: bytes, extra: bytes = b'"max_tokens": 2') -> bytes:
    return b'{"messages": [' + messages + b"], " + extra + b"}"


USER = b'{"role": "user", "content": "hi"}'
DEEP_ARGUMENTS = json.dumps("[" * 50_000 + "]" * 50_000).encode()
CALL = (
    b'{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", '
    b'"function": {"name": "f", "arguments": ' + DEEP_ARGUMENTS + b"}}]}"
)
DEEP_800 = b"[" * 800 + b"]" * 800


CASES: list[tuple[str, str, bytes, int, tuple[str, ...]]] = [
    # (id, path, body, status, fragments of the error message)
    (
        "deep-array",
        "/generate",
        b'{"input_ids": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        400,
        ("invalid JSON body", "nested too deeply"),
    ),
    (
        "deep-object",
        "/generate",
        generate(GEN + b', "x": ' + b'{"a": ' * DEEP + b"1" + b"}" * DEEP),
        400,
        ("nested too deeply",),
    ),
    (
        "deep-tokenize",
        "/tokenize",
        b'{"prompt": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        400,
        ("nested too deeply",),
    ),
    (
        "deep-abort",
        "/abort_request",
        b'{"rid": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        400,
        ("nested too deeply",),
    ),
    (
        "text-lone-surrogate",
        "/generate",
        b'{"text": "a\\ud800b", ' + GEN + b"}",
        400,
        ("text: ", "lone surrogate '\\ud800' at index 1"),
    ),
    (
        "text-reversed-pair",
        "/generate",
        b'{"text": "\\ude00\\ud83d", ' + GEN + b"}",
        400,
        ("text: ", "lone surrogate"),
    ),
    ("rid-lone-surrogate", "/generate", generate(GEN + b', "rid": "r\\ud800"'), 400, ("rid: ",)),
    (
        "rid-lone-surrogate-stream",
        "/generate",
        generate(GEN + b', "rid": "\\udfff", "stream": true'),
        400,
        ("rid: ", "lone surrogate"),
    ),
    (
        "rid-lone-surrogate-prefill",
        "/generate",
        b'{"input_ids": [1, 2], "rid": "\\ud800", "sampling_params": {"max_new_tokens": 0}}',
        400,
        ("rid: ", "lone surrogate"),
    ),
    (
        "salt-lone-surrogate",
        "/generate",
        generate(b'"cache_salt": "\\ud800"'),
        400,
        ("cache_salt",),
    ),
    ("extra-key-surrogate", "/generate", generate(b'"extra_key": "\\udbff"'), 400, ("extra_key",)),
    (
        "routing-key-surrogate",
        "/generate",
        generate(b'"routing_key": "\\ud800"'),
        400,
        ("routing_key",),
    ),
    ("session-surrogate", "/generate", generate(b'"session_id": "\\ud800"'), 400, ("session_id",)),
    ("tokenize-surrogate", "/tokenize", b'{"prompt": "x\\ud800"}', 400, ("prompt: ", "surrogate")),
    (
        "tokenize-list-surrogate",
        "/tokenize",
        b'{"prompt": ["ok", "\\udc00"]}',
        400,
        ("prompt.1: ", "surrogate"),
    ),
    ("abort-rid-surrogate", "/abort_request", b'{"rid": "\\ud800"}', 400, ("rid: ", "surrogate")),
    (
        "temperature-1e-300",
        "/generate",
        generate(b'"sampling_params": {"max_new_tokens": 4, "temperature": 1e-300}'),
        400,
        ("sampling_params.temperature: ", "use 0 for greedy decoding, or at least 1e-06"),
    ),
    (
        "temperature-denormal",
        "/generate",
        generate(b'"sampling_params": {"max_new_tokens": 4, "temperature": 5e-324}'),
        400,
        ("sampling_params.temperature: ",),
    ),
    (
        "temperature-nan",
        "/generate",
        generate(b'"sampling_params": {"max_new_tokens": 4, "temperature": NaN}'),
        400,
        ("sampling_params.temperature: ",),
    ),
    (
        "temperature-overflow",
        "/generate",
        generate(b'"sampling_params": {"max_new_tokens": 4, "temperature": 1e999}'),
        400,
        ("sampling_params.temperature: ",),
    ),
    (
        "seed-2**70",
        "/generate",
        generate(b'"sampling_params": {"max_new_tokens": 4, "sampling_seed": %d}' % 2**70),
        400,
        ("sampling_params.sampling_seed: ", "less than or equal to 18446744073709551615"),
    ),
    (
        "seed--2**70",
        "/generate",
        generate(b'"sampling_params": {"max_new_tokens": 4, "sampling_seed": %d}' % -(2**70)),
        400,
        ("sampling_params.sampling_seed: ", "greater than or equal to"),
    ),
    ("detokenize-negative", "/detokenize", b'{"tokens": [104, -1]}', 400, ("tokens.1: ",)),
    ("invalid-utf8", "/generate", b'{"text": "\xff\xfe", ' + GEN + b"}", 400, ("invalid JSON",)),
    (
        "huge-token-id",
        "/generate",
        b'{"input_ids": [%d], ' % 10**30 + GEN + b"}",
        400,
        ("token id 1000000000000000000000000000000 outside vocabulary",),
    ),
    ("text-content-type", "/generate", generate(GEN), 415, ("Content-Type",)),
    (
        "deep-field",
        "/generate",
        generate(GEN + b', "x": ' + b'{"a": ' * 800 + b"1" + b"}" * 800),
        400,
        ("x.a.a.a", "nested too deeply", "more than 64 levels"),
    ),
    (
        "ignored-field-surrogate",
        "/generate",
        generate(GEN + b', "note": ["\\\\ud800 is text", "\\ud800"]'),
        400,
        ("note.1: ", "lone surrogate"),
    ),
]

#: Chat requests, refused alike by every engine (the first item of issue 23's list).
CHAT_CASES: list[tuple[str, bytes, int, tuple[str, ...]]] = [
    # (id, body, status, fragments of the error message)
    (
        "tool-arguments-50000-deep",
        chat(USER + b", " + CALL),
        400,
        ("messages[1].tool_calls[0].function.arguments", "nested too deeply", "64 levels"),
    ),
    (
        "tool-arguments-50000-deep-warm",
        chat(USER + b", " + CALL, b'"max_tokens": 0'),
        400,
        ("messages[1].tool_calls[0].function.arguments", "nested too deeply"),
    ),
    (
        "content-lone-surrogate",
        chat(b'{"role": "user", "content": "a\\ud800b"}'),
        400,
        ("messages.0.content: ", "lone surrogate '\\ud800' at index 1"),
    ),
    (
        "content-part-lone-surrogate",
        chat(b'{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}'),
        400,
        ("messages.0.content.0.text: ", "lone surrogate"),
    ),
    (
        "tool-schema-surrogate",
        chat(
            USER,
            b'"max_tokens": 2, "tools": [{"type": "function", "function": {"name": "\\ud800"}}]',
        ),
        400,
        ("tools.0.function.name: ", "lone surrogate"),
    ),
    (
        "content-800-deep",
        chat(b'{"role": "system", "content": ' + DEEP_800 + b"}, " + USER),
        400,
        ("messages.0.content", "nested too deeply", "more than 64 levels"),
    ),
    (
        "tools-800-deep",
        chat(
            USER,
            b'"max_tokens": 2, "tools": [{"type": "function", "function": '
            b'{"name": "f", "parameters": ' + b'{"a": ' * 800 + b"1" + b"}" * 800 + b"}}]",
        ),
        400,
        ("tools.0.function.parameters.a", "nested too deeply"),
    ),
]


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    # The tiny preset on the embedded engine: real tokenizer, sampler and seeded generators.
    # The body limit is raised so that the 100,000-deep documents reach the JSON parser.
    with serve("--engine", "local", "--model", "tiny", "--max-request-bytes", "4000000") as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module", params=["local", "fake"])
def any_engine(request: pytest.FixtureRequest, server: ServeProcess) -> Iterator[ServeProcess]:
    """The local engine's server, then a fake engine's."""
    if request.param == "local":
        yield server
        return
    with serve("--engine", "fake", "--model", "tiny", "--max-request-bytes", "4000000") as proc:
        yield proc


def requests_total(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("sglang:num_requests_total"):
            return float(line.split()[-1])
    raise AssertionError("no sglang:num_requests_total in /metrics")


@pytest.mark.parametrize(
    ("path", "body", "status", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_input_is_a_4xx_naming_the_problem(
    client: httpx.Client, path: str, body: bytes, status: int, fragments: tuple[str, ...]
) -> None:
    before = requests_total(client)
    content_type = "text/plain" if status == 415 else "application/json"
    resp = client.post(path, content=body, headers={"content-type": content_type})
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    assert resp.headers.get("connection") != "close"  # the connection stays usable
    error = resp.json()["error"]
    assert error["code"] == status
    for fragment in fragments:
        assert fragment in error["message"]
    # Rejected before the engine ran anything (a bad rid used to fail only after generating).
    assert requests_total(client) == before
    sampling = {"max_new_tokens": 2, "temperature": 0}
    ok = client.post("/generate", json={"text": "still serving", "sampling_params": sampling})
    assert ok.status_code == 200, ok.text
    assert ok.json()["meta_info"]["finish_reason"]["type"] in ("length", "stop")
    assert requests_total(client) == before + 1


@pytest.mark.parametrize(
    "fields",
    [
        b'"text": "emoji \\ud83d\\ude00 pair"',
        b'"input_ids": [1, 2], "rid": "caf\\u00e9-\\ud83d\\ude00"',
        b'"input_ids": [1, 2], "sampling_params": {"temperature": 0, "max_new_tokens": 2}',
        b'"input_ids": [1, 2], "sampling_params": {"temperature": 1e-6, "max_new_tokens": 2}',
        b'"input_ids": [1], "sampling_params": {"sampling_seed": %d, "max_new_tokens": 2}'
        % (2**64 - 1),
        b'"input_ids": [1], "sampling_params": {"sampling_seed": %d, "max_new_tokens": 2}'
        % -(2**63),
    ],
)
@pytest.mark.slow
def test_edge_values_that_are_valid_are_served(client: httpx.Client, fields: bytes) -> None:
    resp = client.post(
        "/generate", content=b"{" + fields + b"}", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize(
    ("body", "status", "fragments"), [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES]
)
def test_malformed_chat_is_a_4xx_on_every_engine(
    any_engine: ServeProcess, body: bytes, status: int, fragments: tuple[str, ...]
) -> None:
    with httpx.Client(base_url=any_engine.url, timeout=30) as c:
        before = requests_total(c)
        resp = c.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert error["code"] == status
        for fragment in fragments:
            assert fragment in error["message"]
        assert requests_total(c) == before
        ok = c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "a"}], "max_tokens": 2},
        )
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    "body",
    [
        chat(b'{"role": "user", "content": "emoji \\ud83d\\ude00 pair"}'),
        # Nested as deep as the limit allows: 64 levels of arguments, a 60-level tool schema.
        chat(
            USER + b', {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", '
            b'"function": {"name": "f", "arguments": '
            + json.dumps("[" * 64 + "]" * 64).encode()
            + b"}}]}"
        ),
        chat(
            USER,
            b'"max_tokens": 2, "tools": [{"type": "function", "function": '
            b'{"name": "f", "parameters": ' + b'{"a": ' * 60 + b"1" + b"}" * 60 + b"}}]",
        ),
    ],
    ids=["emoji-pair", "arguments-64-deep", "schema-60-deep"],
)
def test_chat_edge_values_that_are_valid_are_served(any_engine: ServeProcess, body: bytes) -> None:
    resp = httpx.post(
        any_engine.url + "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
