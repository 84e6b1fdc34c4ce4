"""Tenants through the gateway (the app in-process with its learner, in front of a real
``agentwarm serve``): a tenant is its ``cache_salt`` / ``extra_key``. Its sessions are its own
(the same ``user`` under another salt is another session), its prefetches and warm requests go to
the upstream in its namespace (checked on the upstream: another tenant's identical request finds
nothing cached), it is never prefetched a head it did not send, and learning is pooled between
identical heads unless ``share_learning=False``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentwarm._spec import START
from agentwarm.engines.namespace import tenant_tag
from agentwarm.gateway.heads import Head
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.types import ChatCall
from agentwarm.predictors.context import predict_with
from tests.conftest_server import ServeProcess, serve
from tests.gateway.test_learner import Gateway, make_gateway

ROUTER = "You are the router of a travel agency. Send each customer to the right desk."
HOTELS = "You are the hotel desk. Book rooms and answer questions about hotel stays."
PRIVATE = "You are tenant B's private desk: the merger of Alpha and Beta is due on Friday."
HANDOFF = {"type": "function", "function": {"name": "transfer", "parameters": {"type": "object"}}}


@pytest.fixture
def upstream_server() -> Iterator[ServeProcess]:
    """A fresh upstream per test: what one test cached never answers another's checks."""
    with serve() as server:  # --engine fake: byte tokens, the fallback chat format
        yield server


@pytest.fixture
def tenants() -> tuple[str, str]:
    """Salts of tenants A and B."""
    return "tenant-a", "tenant-b"


def salted(salt: str | None) -> dict[str, str]:
    return {} if salt is None else {"cache_salt": salt}


def opening(run: str) -> dict[str, str]:
    return {"role": "user", "content": f"Run {run}: I need a room in Lisbon for two nights."}


def desk_messages(system: str, run: str, reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The desk's request after the router's ``reply``: the whole conversation handed on."""
    handoff = {"role": "user", "content": "Transferred."}
    return [{"role": "system", "content": system}, opening(run), reply, handoff]


async def ask(
    gw: Gateway, messages: list[dict[str, Any]], *, user: str, salt: str | None, **body: Any
) -> tuple[ChatCall, dict[str, Any]]:
    """One request through the gateway; its call once ``on_response`` and its prefetches ended."""
    resp = await gw.http.post(
        "http://127.0.0.1/v1/chat/completions",
        json={"model": "fake", "messages": messages, "max_tokens": 4, "user": user, **body}
        | salted(salt),
    )
    assert resp.status_code == 200, resp.text
    return await gw.hooks.responded.get(), resp.json()


async def run(gw: Gateway, run_id: str, desk: str, *, salt: str | None) -> ChatCall:
    """Router → ``desk`` in one session (``user`` = the run); the desk's call."""
    router = [{"role": "system", "content": ROUTER}, opening(run_id)]
    _, first = await ask(gw, router, user=run_id, salt=salt, tools=[HANDOFF])
    reply = {"role": "assistant", "content": first["choices"][0]["message"]["content"]}
    call, _ = await ask(gw, desk_messages(desk, run_id, reply), user=run_id, salt=salt)
    return call


def cached_on_upstream(url: str, messages: list[dict[str, Any]], salt: str | None) -> int:
    """The cached tokens the upstream reports for ``messages`` in ``salt``'s namespace."""
    body = {"messages": messages, "max_tokens": 1} | salted(salt)
    resp = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return int(resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def head_of(learner: Learner, system: str) -> Head:
    return next(h for h in learner.heads if h.system[0]["content"] == system)


def node_of(learner: Learner, system: str) -> str:
    return head_of(learner, system).name


def prefetched(learner: Learner, session: str | None) -> dict[str, list[Any]]:
    """The prefetches the learner sent for ``session``, by node."""
    out: dict[str, list[Any]] = {}
    for pf in learner._prefetches:
        if pf.session == session and pf.outcome != "dropped":
            out.setdefault(pf.node, []).append(pf)
    return out


async def test_a_prefetch_is_sent_in_the_namespace_of_the_session_it_serves(
    upstream_server: ServeProcess, tmp_path: Path, tenants: tuple[str, str]
) -> None:
    """Reproduced: the gateway prefilled a salted tenant's next step in the default namespace."""
    a, b = tenants
    gw = make_gateway(upstream_server.url, tmp_path)
    try:
        for i in range(2):
            await run(gw, f"a-{i}", HOTELS, salt=a)
        router = [{"role": "system", "content": ROUTER}, opening("a-2")]
        call, first = await ask(gw, router, user="a-2", salt=a, tools=[HANDOFF])
        learner = gw.hooks.learner
        sent = prefetched(learner, call.session)[node_of(learner, HOTELS)]
        assert len(sent) == 1 and sent[0].outcome is None  # pending, its request ended
        reply = {"role": "assistant", "content": first["choices"][0]["message"]["content"]}
        desk = desk_messages(HOTELS, "a-2", reply)  # only the prefetch can have cached it
        assert cached_on_upstream(upstream_server.url, desk, b) == 0
        assert cached_on_upstream(upstream_server.url, desk, None) == 0
        assert cached_on_upstream(upstream_server.url, desk, a) >= sent[0].tokens
    finally:
        await gw.aclose()


async def test_a_warm_request_is_prefilled_in_its_tenants_namespace(
    upstream_server: ServeProcess, tmp_path: Path, tenants: tuple[str, str]
) -> None:
    a, b = tenants
    gw = make_gateway(upstream_server.url, tmp_path)
    try:
        messages = [{"role": "system", "content": HOTELS}, opening("warm")]
        body = {"model": "fake", "messages": messages, "max_tokens": 0, "cache_salt": a}
        resp = await gw.http.post("http://127.0.0.1/v1/chat/completions", json=body)
        assert resp.status_code == 200, resp.text
        warmed = resp.json()["usage"]["prompt_tokens"]
        assert warmed > 16 and resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert cached_on_upstream(upstream_server.url, messages, b) == 0
        assert cached_on_upstream(upstream_server.url, messages, None) == 0
        assert cached_on_upstream(upstream_server.url, messages, a) >= warmed
    finally:
        await gw.aclose()


async def test_the_same_user_under_another_salt_is_another_session(
    upstream_server: ServeProcess, tmp_path: Path, tenants: tuple[str, str]
) -> None:
    """Reproduced: tenant B with A's ``user`` joined A's session: B's step was recorded after
    A's node and A's prefetch was wasted."""
    a, b = tenants
    gw = make_gateway(upstream_server.url, tmp_path)
    try:
        for i in range(2):
            await run(gw, f"a-{i}", HOTELS, salt=a)
        learner = gw.hooks.learner
        hotels = node_of(learner, HOTELS)
        router = [{"role": "system", "content": ROUTER}, opening("shared")]
        a_call, first = await ask(gw, router, user="alice", salt=a, tools=[HANDOFF])
        (pending,) = prefetched(learner, a_call.session)[hotels]
        b_call, _ = await ask(gw, router, user="alice", salt=b, tools=[HANDOFF])
        assert b_call.session != a_call.session
        assert learner._steps[-1].from_node == START  # B's first step, not after A's router
        assert pending.outcome is None  # B's request settled nothing of A's
        reply = {"role": "assistant", "content": first["choices"][0]["message"]["content"]}
        await ask(gw, desk_messages(HOTELS, "shared", reply), user="alice", salt=a)
        assert pending.outcome == "hit"
        assert learner._steps[-1].from_node == node_of(learner, ROUTER)
        # No salt is the default tenant: a third session.
        c_call, _ = await ask(gw, router, user="alice", salt=None, tools=[HANDOFF])
        assert c_call.session not in (a_call.session, b_call.session)
    finally:
        await gw.aclose()


async def test_a_tenant_is_never_prefetched_a_head_it_did_not_send(
    upstream_server: ServeProcess, tmp_path: Path, tenants: tuple[str, str]
) -> None:
    """Reproduced: after B taught router → B-private, A's next router request made the gateway
    prefill B's private head inside A's session."""
    a, b = tenants
    gw = make_gateway(upstream_server.url, tmp_path)
    try:
        await run(gw, "a-0", HOTELS, salt=a)  # A knows the router and the hotel desk
        for i in range(3):
            await run(gw, f"b-{i}", PRIVATE, salt=b)
        learner = gw.hooks.learner
        private, hotels = node_of(learner, PRIVATE), node_of(learner, HOTELS)
        router = [{"role": "system", "content": ROUTER}, opening("a-1")]
        call, _ = await ask(gw, router, user="a-1", salt=a, tools=[HANDOFF])
        sent = prefetched(learner, call.session)
        assert private not in sent
        assert hotels in sent  # what A can reach is prefetched, though B's runs outnumber A's
        # On the upstream, A's namespace holds of B's head only what A's router prompt shares.
        renderer = learner.renderer
        assert renderer is not None
        mine = renderer.prefix_ids(head_of(learner, ROUTER), [opening("a-1")])
        theirs = renderer.prefix_ids(head_of(learner, PRIVATE), [opening("a-1")])
        shared = next(i for i, (x, y) in enumerate(zip(mine, theirs, strict=False)) if x != y)
        assert shared < len(theirs) // 4
        private_head = [{"role": "system", "content": PRIVATE}, opening("a-1")]
        assert cached_on_upstream(upstream_server.url, private_head, a) <= shared
    finally:
        await gw.aclose()


async def b_learns(gw: Gateway, b: str) -> list[tuple[str, float]]:
    """B sends the hotel desk's head, then the router's (in two sessions: it never teaches the
    transition); B's ranking after the router, of the nodes it sent."""
    desk = [{"role": "system", "content": HOTELS}, opening("b-0")]
    await ask(gw, desk, user="b-0", salt=b)
    router = [{"role": "system", "content": ROUTER}, opening("b-1")]
    await ask(gw, router, user="b-1", salt=b, tools=[HANDOFF])
    learner, tag = gw.hooks.learner, tenant_tag(b)
    ranked = predict_with(learner.models.of(tag).predictor, [node_of(learner, ROUTER)])
    return learner.heads.own_predictions(ranked, tag)


@pytest.mark.parametrize("share", [True, False])
async def test_learning_is_pooled_between_identical_heads_unless_turned_off(
    upstream_server: ServeProcess, tmp_path: Path, tenants: tuple[str, str], share: bool
) -> None:
    """A teaches router → hotels 3 times; B sent both heads, never that transition. Pooled, B
    predicts the hotel desk after the router more than it would alone, and it is prefetched in
    B's namespace; not shared, A's traffic changes nothing of B's predictions."""
    a, b = tenants
    alone = make_gateway(upstream_server.url, tmp_path / "alone", share_learning=share)
    try:
        baseline = dict(await b_learns(alone, b))
    finally:
        await alone.aclose()
    gw = make_gateway(upstream_server.url, tmp_path / "both", share_learning=share)
    try:
        for i in range(3):
            await run(gw, f"a-{i}", HOTELS, salt=a)
        learner = gw.hooks.learner
        hotels = node_of(learner, HOTELS)
        ranked = dict(await b_learns(gw, b))
        if share:
            assert ranked[hotels] > baseline.get(hotels, 0.0) + 0.2
            sent = [pf for pf in learner._prefetches if pf.session.startswith("b-1~")]
            assert {(pf.node, pf.namespace) for pf in sent} == {(hotels, b)}
        else:
            assert ranked == baseline
            own = learner.models.of(tenant_tag(a)).predictor  # A's model learned it
            assert own.predict([node_of(learner, ROUTER)])[0][0] == hotels
    finally:
        await gw.aclose()
