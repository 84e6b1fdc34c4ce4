"""Malformed input over the wire to ``agentwarm serve`` (the embedded engine): every case is a
4xx JSON error naming the field, on a connection that stays open, before any engine work; the
next request is served."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest_server import ServeProcess, serve

DEEP = 100_000
GEN = b'"sampling_params": {"max_new_tokens": 4}'


def generate(fields: bytes) -> bytes:
    return b'{"input_ids": [1, 2, 3], ' + fields + b"}"


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
def test_edge_values_that_are_valid_are_served(client: httpx.Client, fields: bytes) -> None:
    resp = client.post(
        "/generate", content=b"{" + fields + b"}", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 200, resp.text
