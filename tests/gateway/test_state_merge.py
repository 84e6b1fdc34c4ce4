"""Issue 23 item 9: gateways sharing a state dir lose no learning.

Two gateways (replicas) on one ``--state-dir`` overwrote each other's learning at every
periodic save (the last writer won). A save now re-reads the file under the lock and writes
what is on disk plus what this gateway learned since it loaded or last saved, as the runtime's
predictor store does (tests/predictors/test_store_concurrency.py): transitions merged by the
predictor, shapes and tool-hint counts added, heads united by key with their owners, each
tenant's learning by tag. Driven through the learner's hooks, as the gateway app calls them,
and through two real ``agentwarm gateway`` processes saving periodically into one dir.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentwarm._spec import START
from agentwarm.engines.base import new_rid
from agentwarm.engines.namespace import tenant_tag
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.state import GatewayState, encode_state, load_state, state_path
from agentwarm.gateway.types import ChatCall, Reply
from agentwarm.gateway.upstream import Upstream
from agentwarm.predictors import (
    MarkovPredictor,
    Predictor,
    PredictorStateWarning,
    default_predictor,
)
from tests.conftest_server import GatewayProcess, serve
from tests.gateway.test_shutdown import _learn, _saved_nodes
from tests.waiting import wait_until

SUPERVISOR = "You are the supervisor of an airline support team."
SPECIALISTS = {
    "baggage": "You are the baggage specialist. Answer questions about bags.",
    "refund": "You are the refund specialist. Answer questions about refunds.",
    "refund-v2": "You are the refund specialist, version two.",
}


def plain() -> Predictor:
    return MarkovPredictor(half_life=None)  # undecayed counts: their merge is exact


class Gateway:
    """A learner as one gateway process holds it (no renderer: it learns, never prefetches)."""

    def __init__(self, state_dir: Path, **kw: Any) -> None:
        self.upstream = Upstream(["http://127.0.0.1:9"])
        kw.setdefault("predictor_factory", plain)
        self.learner = Learner(self.upstream, None, state_dir=state_dir, save_interval_s=None, **kw)
        self.runs = 0

    def teach(
        self, specialist: str, times: int, salt: str | None = None, hint: str | None = None
    ) -> None:
        """``times`` runs: the supervisor calls ``transfer_to_<specialist>``, the specialist
        gets the whole conversation (shape ``continue``)."""

        async def runs() -> None:
            for _ in range(times):
                self.runs += 1
                await self._run(specialist, f"{id(self)}-{self.runs}", salt, hint)

        asyncio.run(runs())

    async def _run(self, specialist: str, session: str, salt: str | None, hint: str | None) -> None:
        user = {"role": "user", "content": f"Session {session}: help me."}
        extra = {} if salt is None else {"cache_salt": salt}
        first = ChatCall(
            {"messages": [{"role": "system", "content": SUPERVISOR}, user], **extra},
            new_rid(),
            session_hint=session,
            node_hint="supervisor",
        )
        await self.learner.on_request(first)
        tool = f"transfer_to_{specialist}"
        call = {"id": "c1", "type": "function", "function": {"name": tool, "arguments": "{}"}}
        reply = {"role": "assistant", "content": "", "tool_calls": [call]}
        await self.learner.on_response(first, Reply(200, reply))
        result = {"role": "tool", "tool_call_id": "c1", "content": "transferred"}
        system = {"role": "system", "content": SPECIALISTS[specialist]}
        second = ChatCall(
            {"messages": [system, user, reply, result], **extra},
            new_rid(),
            session_hint=session,
            node_hint=hint or specialist,
        )
        await self.learner.on_request(second)
        await self.learner.on_response(second, Reply(200, {"role": "assistant", "content": "ok"}))

    def save(self) -> None:
        self.learner.save()

    def state(self) -> GatewayState:
        learner = self.learner
        tenants = learner.models.tenants()
        return GatewayState(
            learner.heads, learner.predictor, learner.shapes, learner.tool_hints, tenants
        )

    def close(self) -> None:
        asyncio.run(self.upstream.aclose())


def saved(state_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(state_path(state_dir).read_text(encoding="utf-8"))
    return doc


def contexts(predictor: dict[str, Any]) -> dict[tuple[str, ...], dict[str, float]]:
    return {tuple(ctx): table for ctx, table in predictor["contexts"]}


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    made: list[Gateway] = []

    def make(**kw: Any) -> Gateway:
        made.append(Gateway(tmp_path, **kw))
        return made[-1]

    yield make
    for gw in made:
        gw.close()


def test_two_gateways_saving_alternately_keep_the_sum_of_their_learning(
    tmp_path: Path, gateways: Callable[..., Gateway]
) -> None:
    """Both load the same (empty) dir, learn different paths and save in turns, several times:
    every save adds only what that gateway learned since its previous one."""
    a, b = gateways(), gateways()
    a.teach("baggage", 3)
    a.save()
    b.teach("refund", 2)
    b.save()
    a.teach("baggage", 1)
    a.save()
    b.teach("refund", 1)
    a.save()  # nothing new since its last save: the file keeps b's
    b.save()

    doc = saved(tmp_path)
    assert sorted(h["name"] for h in doc["heads"]["heads"]) == ["baggage", "refund", "supervisor"]
    assert all(h["owners"] == [""] for h in doc["heads"]["heads"])
    predictor = doc["predictor"]
    assert predictor["observations"] == 2 * (4 + 3)
    assert contexts(predictor)[(START,)] == {"supervisor": 7.0}
    assert contexts(predictor)[("supervisor",)] == {"baggage": 4.0, "refund": 3.0}
    assert doc["shapes"] == {"baggage": {"continue": 4}, "refund": {"continue": 3}}
    assert doc["tool_hints"] == {
        "transfer_to_baggage": {"baggage": 4},
        "transfer_to_refund": {"refund": 3},
    }
    # What a fresh gateway loads predicts as one gateway that saw all of it.
    one = Gateway(tmp_path / "one")
    one.teach("baggage", 4)
    one.teach("refund", 3)
    one.close()
    loaded = load_state(tmp_path, plain)
    assert loaded is not None
    for path in ([], ["supervisor"], ["supervisor", "refund"]):
        assert loaded.predictor.predict(path) == one.learner.predictor.predict(path)


def test_a_lone_gateway_saves_exactly_what_it_learned(
    tmp_path: Path, gateways: Callable[..., Gateway]
) -> None:
    a = gateways()
    for times in (3, 2):
        a.teach("baggage", times)
        a.save()
        assert saved(tmp_path) == json.loads(encode_state(a.state()))
    b = gateways()  # loads a's file, then saves on top of it alone
    b.teach("refund", 1)
    b.save()
    doc = saved(tmp_path)
    assert contexts(doc["predictor"])[("supervisor",)] == {"baggage": 5.0, "refund": 1.0}
    assert doc["tool_hints"]["transfer_to_baggage"] == {"baggage": 5}


def test_a_corrupt_file_found_at_save_is_set_aside_and_mine_written(
    tmp_path: Path, gateways: Callable[..., Gateway]
) -> None:
    a = gateways()
    a.teach("baggage", 2)
    a.save()
    state_path(tmp_path).write_text('{"format": "agentwarm.gateway", "version"', encoding="utf-8")
    a.teach("baggage", 1)
    with pytest.warns(PredictorStateWarning, match="gateway.corrupt-"):
        a.save()
    (moved,) = tmp_path.glob("gateway.corrupt-*.json")
    assert moved.read_text(encoding="utf-8").endswith('"version"')  # nothing lost
    doc = saved(tmp_path)
    assert contexts(doc["predictor"])[("supervisor",)] == {"baggage": 3.0}
    assert doc["tool_hints"] == {"transfer_to_baggage": {"baggage": 3}}


def test_each_tenants_learning_is_merged_by_its_tag(
    tmp_path: Path, gateways: Callable[..., Gateway]
) -> None:
    """Not shared (``--no-share-learning``): each tenant's tables merge with the same tenant's
    on disk; a tenant only one gateway saw is kept as it learned it; heads' owners unite."""
    a, b = gateways(share_learning=False), gateways(share_learning=False)
    a.teach("baggage", 2, salt="salt-one")
    a.teach("refund", 1, salt="salt-two")
    a.save()
    b.teach("baggage", 3, salt="salt-one")
    b.teach("refund", 1, salt="salt-three")
    b.save()

    doc = saved(tmp_path)
    one, two, three = (tenant_tag(s) for s in ("salt-one", "salt-two", "salt-three"))
    assert set(doc["tenants"]) == {one, two, three}
    ones = doc["tenants"][one]
    assert contexts(ones["predictor"])[("supervisor",)] == {"baggage": 5.0}
    assert ones["shapes"] == {"baggage": {"continue": 5}}
    assert ones["tool_hints"] == {"transfer_to_baggage": {"baggage": 5}}
    assert contexts(doc["tenants"][two]["predictor"])[("supervisor",)] == {"refund": 1.0}
    assert contexts(doc["tenants"][three]["predictor"])[("supervisor",)] == {"refund": 1.0}
    assert doc["predictor"]["observations"] == 0  # nothing pooled
    owners = {h["name"]: sorted(h["owners"]) for h in doc["heads"]["heads"]}
    assert owners == {
        "supervisor": sorted([one, two, three]),
        "baggage": [one],
        "refund": sorted([two, three]),
    }
    loaded = load_state(tmp_path, plain)
    assert loaded is not None and loaded.heads.owns(three, "refund")


def test_the_default_predictor_merges_every_observation(
    tmp_path: Path, gateways: Callable[..., Gateway]
) -> None:
    """The gateway's default predictor (decayed counts, the content model): the observation
    count is exact, both successors are known."""
    a, b = (
        gateways(predictor_factory=default_predictor),
        gateways(predictor_factory=default_predictor),
    )
    a.teach("baggage", 3)
    b.teach("refund", 2)
    a.save()
    b.save()
    path = saved(tmp_path)["predictor"]["path"]
    assert path["observations"] == 2 * (3 + 2)
    assert set(path["known"]) == {"supervisor", "baggage", "refund"}
    billing = contexts(path)[("supervisor",)]
    assert billing["baggage"] == pytest.approx(3, rel=0.05)
    assert billing["refund"] == pytest.approx(2, rel=0.05)


def test_two_heads_named_alike_by_two_gateways_are_both_kept(
    tmp_path: Path, gateways: Callable[..., Gateway]
) -> None:
    """Another gateway gave the name to another head: the file keeps its name, the new head
    gets a free form of it (as one registry names), and the file loads."""
    a, b = gateways(), gateways()
    a.teach("refund", 1)
    b.teach("refund-v2", 1, hint="refund")
    a.save()
    b.save()
    loaded = load_state(tmp_path, plain)
    assert loaded is not None
    keys = {h.name: h.key for h in loaded.heads}
    v2 = b.learner.heads.get("refund")
    assert v2 is not None
    assert (
        keys
        == {
            "supervisor": keys["supervisor"],
            "refund": a.learner.heads.get("refund").key,  # type: ignore[union-attr]
            f"refund-{v2.key[:6]}": v2.key,
        }
    )


@pytest.mark.slow
def test_two_gateway_processes_on_one_state_dir_keep_both_learnings(tmp_path: Path) -> None:
    """Two real gateways, saving every 0.2 s into one dir, each taught other nodes: the file
    comes to hold all of them while both run, and a restart after both stopped (each saved at
    shutdown, in whichever order) knows all of them."""
    state = tmp_path / "state"
    with serve() as worker:
        args = ["--upstream", worker.url, "--model", "tiny-bytes", "--state-dir", str(state)]
        first = GatewayProcess([*args, "--save-interval", "0.2"])
        second = GatewayProcess([*args, "--save-interval", "0.2"])
        try:
            _learn(first.url, ["planner", "coder"])
            wait_until(lambda: _saved_nodes(state_path(state)) == 2, what="first's 2 nodes")
            _learn(second.url, ["reviewer", "tester"])
            wait_until(lambda: _saved_nodes(state_path(state)) == 4, what="both's 4 nodes")
            _learn(first.url, ["writer"])
            wait_until(lambda: _saved_nodes(state_path(state)) == 5, what="all 5 nodes")
        finally:
            first.stop()
            second.stop()
        third = GatewayProcess(args)
        try:
            stats = httpx.get(f"{third.url}/v1/agentwarm/stats", timeout=10).json()
        finally:
            third.stop()
    assert stats["nodes"] == 5
