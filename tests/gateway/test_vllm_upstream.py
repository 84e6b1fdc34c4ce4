"""The gateway's vLLM workers without a vLLM server (the real server's tests are in
``tests/vllm/test_gateway.py``): how ``--upstream`` names them, how a plain URL is told apart,
the body a vLLM worker gets (its tenant as ``cache_salt``) and the live gate of its engine."""

from __future__ import annotations

import pytest

from agentwarm.engines.sglang import SGLangEngine
from agentwarm.engines.vllm import VLLMEngine
from agentwarm.errors import ConfigError
from agentwarm.gateway.command import detect_upstreams, parse_upstreams
from agentwarm.gateway.upstream import Upstream, vllm_chat_body
from tests.conftest_server import free_port, http_server
from tests.engines.test_server_kind import answering


def test_upstreams_keep_their_vllm_prefix() -> None:
    assert parse_upstreams(" vllm: http://a:1 , http://b:2 ") == ["vllm:http://a:1", "http://b:2"]
    with pytest.raises(ConfigError, match=r"vllm:http://127\.0\.0\.1:8000 for a vLLM server"):
        parse_upstreams(" , ")


async def test_a_vllm_worker_is_named_by_its_url_and_prefetches_through_vllmengine() -> None:
    up = Upstream(["vllm:http://127.0.0.1:1", "http://127.0.0.1:2"])
    try:
        assert up.urls == ("http://127.0.0.1:1", "http://127.0.0.1:2")
        assert up.is_vllm("http://127.0.0.1:1") and not up.is_vllm("http://127.0.0.1:2")
        vllm, sglang = up.engine(up.urls[0]), up.engine(up.urls[1])
        assert isinstance(vllm, VLLMEngine) and isinstance(sglang, SGLangEngine)
        assert up.engine(up.urls[0]) is vllm  # one client per worker
        leave = up.live(up.urls[0])
        assert vllm.live.waiting == 1
        leave()
        leave()
        assert vllm.live.waiting == 0
        up.live(up.urls[1])()  # SGLang preempts prefills itself: no gate, nothing to end
    finally:
        await up.aclose()
    with pytest.raises(ValueError, match="given twice"):
        Upstream(["vllm:http://127.0.0.1:1", "http://127.0.0.1:1"])


@pytest.mark.parametrize(
    ("body", "salt"),
    [
        ({}, None),
        ({"cache_salt": "a"}, "a"),
        ({"extra_key": "k"}, "k"),
        ({"cache_salt": "a", "extra_key": "a"}, "a"),
        ({"cache_salt": "a", "extra_key": "k"}, "a\0k"),
    ],
)
def test_a_vllm_worker_gets_the_tenant_as_its_cache_salt(
    body: dict[str, str], salt: str | None
) -> None:
    sent = vllm_chat_body({"messages": [], **body})
    assert sent.get("cache_salt") == salt
    assert sent["messages"] == [] and sent.get("extra_key") == body.get("extra_key")


async def test_a_plain_url_that_answers_as_vllm_becomes_a_vllm_worker() -> None:
    down = f"http://127.0.0.1:{free_port()}"
    with (
        http_server(answering({"/version": {"version": "0.32.0"}})) as vllm,
        http_server(answering({"/model_info": {"model_path": "m"}})) as sglang,
        http_server(answering({})) as other,
    ):
        urls, silent = await detect_upstreams([vllm, sglang, other, down, f"vllm:{down}"])
    assert urls == [f"vllm:{vllm}", sglang, other, down, f"vllm:{down}"]
    assert silent == [down]  # not reachable at start: spoken to as SGLang, said once listening
