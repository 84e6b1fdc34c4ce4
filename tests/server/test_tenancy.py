"""Tenant isolation of ``agentwarm serve``: ``cache_salt``/``extra_key`` → namespace, limits.

The namespace rule lives in :mod:`agentwarm.engines.namespace`; these tests go through the app
(httpx.ASGITransport in front of a FakeEngine) so they check what a client sees: the
``cached_tokens`` of a request in another tenant's namespace — and over the wire against
``agentwarm serve --engine fake --model tiny`` for the chat endpoint.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.namespace import MAX_PART_BYTES, namespace_key
from agentwarm.engines.sglang import SGLangEngine
from agentwarm.server import ServerConfig, create_app
from tests.conftest_server import serve

BASE = "http://127.0.0.1"
PROMPT = [7, 8, 9] * 200  # 600 tokens


def fake() -> FakeEngine:
    return FakeEngine(seconds_per_token=0.0, seconds_per_output_token=0.0)


def client_for(engine: FakeEngine) -> httpx.AsyncClient:
    app = create_app(engine, ServerConfig(), close_engine=False)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


def tenant(salt: str | None, key: str | None) -> dict[str, str]:
    fields = {"cache_salt": salt, "extra_key": key}
    return {k: v for k, v in fields.items() if v is not None}


async def prefill(client: httpx.AsyncClient, ids: list[int], **fields: str) -> dict[str, Any]:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}, **fields}
    resp = await client.post("/generate", json=body)
    assert resp.status_code == 200, resp.text
    meta: dict[str, Any] = resp.json()["meta_info"]
    return meta


def same_tenant(a: tuple[str | None, str | None], b: tuple[str | None, str | None]) -> bool:
    """The documented equivalence: empty means unset, equal values count once, order counts."""

    def canon(pair: tuple[str | None, str | None]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for p in pair if p))

    return canon(a) == canon(b)


# Parts that stress a separator-joined encoding: separators, prefixes of each other, empties.
PART = st.one_of(
    st.none(),
    st.sampled_from(["", "a", "b", "a|b", "|", "b|", "|a", "a\x01b", "1:a", "ab"]),
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), max_size=6),
)
PAIR = st.tuples(PART, PART)


async def test_pipe_in_a_salt_is_not_a_second_field() -> None:
    """Reproduced: ``cache_salt="a|b"`` shared 599/600 tokens with ``("a", "b")``."""
    engine = fake()
    async with client_for(engine) as client:
        assert (await prefill(client, PROMPT, cache_salt="a|b"))["cached_tokens"] == 0
        other = await prefill(client, PROMPT, cache_salt="a", extra_key="b")
        assert (other["prompt_tokens"], other["cached_tokens"]) == (600, 0)
        again = await prefill(client, PROMPT, cache_salt="a", extra_key="b")
        assert again["cached_tokens"] == 600  # the pair is a namespace of its own
    assert len(engine.cache.namespaces) == 2
    await engine.aclose()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=PAIR, second=PAIR)
@example(first=("a|b", None), second=("a", "b"))
@example(first=(None, "x"), second=("x", "x"))
def test_distinct_tenants_never_share_cached_tokens(
    first: tuple[str | None, str | None], second: tuple[str | None, str | None]
) -> None:
    ids = [5, 6, 7, 8, 9, 10, 11, 12]

    async def scenario() -> int:
        engine = fake()
        async with client_for(engine) as client:
            await prefill(client, ids, **tenant(*first))
            cached = (await prefill(client, ids, **tenant(*second)))["cached_tokens"]
        await engine.aclose()
        return int(cached)

    assert asyncio.run(scenario()) == (len(ids) if same_tenant(first, second) else 0)


@settings(max_examples=500, deadline=None)
@given(first=PAIR, second=PAIR)
@example(first=("a|b", None), second=("a", "b"))
def test_namespace_key_is_injective_on_tenants(
    first: tuple[str | None, str | None], second: tuple[str | None, str | None]
) -> None:
    assert (namespace_key(*first) == namespace_key(*second)) == same_tenant(first, second)


async def test_sglang_client_namespace_is_the_same_tenant_on_the_server() -> None:
    """SGLangEngine sends its namespace as both fields (or one): the server sees one value."""
    engine = fake()
    app = create_app(engine, ServerConfig(), close_engine=False)
    both = SGLangEngine(BASE, tokenizer="byte", transport=httpx.ASGITransport(app=app))
    only_extra = SGLangEngine(
        BASE, tokenizer="byte", salt_fields=("extra_key",), transport=httpx.ASGITransport(app=app)
    )
    first = await both.prefill(PROMPT, namespace="a|b")
    assert first.cached_tokens == 0
    assert (await only_extra.prefill(PROMPT, namespace="a|b")).cached_tokens == 600
    async with client_for(engine) as client:
        assert (await prefill(client, PROMPT, cache_salt="a|b"))["cached_tokens"] == 600
        pair = await prefill(client, PROMPT, cache_salt="a", extra_key="b")
        assert pair["cached_tokens"] == 0
    await both.aclose()
    await only_extra.aclose()
    await engine.aclose()


@pytest.mark.parametrize("field", ["cache_salt", "extra_key"])
async def test_namespace_fields_are_bounded(field: str) -> None:
    engine = fake()
    async with client_for(engine) as client:
        body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 0}}
        at_limit = "é" * (MAX_PART_BYTES // 2)  # 256 bytes of UTF-8
        ok = await client.post("/generate", json={**body, field: at_limit})
        assert ok.status_code == 200
        over = await client.post("/generate", json={**body, field: at_limit + "x"})
        assert over.status_code == 400
        message = over.json()["error"]["message"]
        assert f"{field} is 257 bytes; the limit is 256 bytes" in message
        nul = await client.post("/generate", json={**body, field: "a\0b"})
        assert nul.status_code == 400
        assert f"{field} must not contain NUL" in nul.json()["error"]["message"]
        huge = await client.post("/generate", json={**body, field: "s" * 4_000_000})
        assert huge.status_code in (400, 413)  # the body limit may refuse it first
    assert engine.cache.namespaces == (at_limit,)
    await engine.aclose()


async def test_namespace_bookkeeping_stays_within_the_cache_budget() -> None:
    """100 tenants through a 64-token cache: only tenants with a cached prefix are kept.

    Speculative prefills are pinned, so the first 8 tenants keep the budget and the other 92
    cache nothing: none of them may stay in the namespace bookkeeping."""
    engine = FakeEngine(seconds_per_token=0.0, seconds_per_output_token=0.0, max_cached_tokens=64)
    async with client_for(engine) as client:
        for i in range(100):
            await prefill(client, [1, 2, 3, 4, 5, 6, 7, 8], cache_salt=f"tenant-{i}")
        assert engine.cache.total_tokens == 64
        assert len(engine.cache.namespaces) == 8  # 8 tenants x 8 tokens fill the budget
        assert set(engine.cache.namespaces) == {f"tenant-{i}" for i in range(8)}
        engine.cache.check_integrity()
        assert (await client.post("/flush_cache")).status_code == 200
    assert engine.cache.namespaces == ()
    await engine.aclose()


def chat_cached(url: str, **fields: str) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of one chat request with ``fields`` (salts) to ``url``."""
    body = {
        "messages": [
            {"role": "system", "content": "You are tenant A's private assistant. " * 20},
            {"role": "user", "content": "What is on my calendar today?"},
        ],
        "max_tokens": 1,
        **fields,
    }
    resp = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    used = resp.json()["usage"]
    return used["prompt_tokens"], used["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.slow
def test_chat_completions_isolate_tenants_by_cache_salt_and_extra_key() -> None:
    """Reproduced: tenant B's first chat request (salt B) found 577/578 tokens of A's cached."""
    with serve("--model", "tiny") as server:
        prompt, cached = chat_cached(server.url, cache_salt="tenant-a")
        assert cached == 0 and prompt > 100
        assert chat_cached(server.url, cache_salt="tenant-b") == (prompt, 0)
        assert chat_cached(server.url) == (prompt, 0)  # the default tenant is one too
        assert chat_cached(server.url, cache_salt="tenant-b")[1] >= prompt - 1
        assert chat_cached(server.url, extra_key="tenant-b")[1] >= prompt - 1  # same namespace
        assert chat_cached(server.url, cache_salt="tenant-b", extra_key="x") == (prompt, 0)
        assert chat_cached(server.url, cache_salt="tenant-a")[1] >= prompt - 1
        bad = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "cache_salt": "a\0b"},
            timeout=60,
        )
        assert bad.status_code == 400
        assert "cache_salt must not contain NUL" in bad.json()["error"]["message"]


async def test_sglang_client_sends_a_pair_namespace_as_its_two_fields() -> None:
    """A namespace of a (cache_salt, extra_key) pair (the gateway prefetches in its clients')
    goes as the pair: the server refuses a NUL in either field, and joins them again."""
    engine = fake()
    app = create_app(engine, ServerConfig(), close_engine=False)
    client = SGLangEngine(BASE, tokenizer="byte", transport=httpx.ASGITransport(app=app))
    first = await client.prefill(PROMPT, namespace=namespace_key("a", "b"))
    assert (first.prompt_tokens, first.cached_tokens) == (600, 0)
    async with client_for(engine) as http:
        assert (await prefill(http, PROMPT, cache_salt="a", extra_key="b"))["cached_tokens"] == 600
        assert (await prefill(http, PROMPT, cache_salt="a"))["cached_tokens"] == 0
    assert engine.cache.namespaces == (namespace_key("a", "b"), "a")
    await client.aclose()
    await engine.aclose()
