"""The Debouncer: one prefill per key per window (the latest prefix), superseded prefills
aborted unless extended, failures logged and counted, flush and close. Windows end when the
test says so (an injected ``sleep``), never after real time."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

import agentwarm
from agentwarm.engines.fake import FakeEngine
from agentwarm.errors import ConfigError
from agentwarm.warmup.explicit import renderer_for
from tests.waiting import until
from tests.warmup.gate_engine import GateEngine

A = [1, 2, 3, 4]
AB = [*A, 5, 6]
ABC = [*AB, 7, 8]
OTHER = [9, 9, 9]


class Windows:
    """The debouncer's ``sleep``: each window stays open until :meth:`end` closes it."""

    def __init__(self) -> None:
        self.open: list[asyncio.Future[None]] = []
        self.delays: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        fut = asyncio.get_running_loop().create_future()
        self.open.append(fut)
        await fut

    async def end(self, n: int = 1) -> None:
        """Wait until ``n`` windows are open, then end them all."""
        await until(lambda: len([f for f in self.open if not f.done()]) >= n, what="windows")
        for fut in self.open:
            if not fut.done():
                fut.set_result(None)
        self.open.clear()


def debouncer(engine: GateEngine, windows: Windows, **kwargs: object) -> agentwarm.Debouncer:
    return agentwarm.Debouncer(engine, sleep=windows.sleep, **kwargs)  # type: ignore[arg-type]


async def sent(engine: GateEngine, n: int) -> None:
    await until(lambda: len(engine.calls) >= n, what=f"{n} prefills sent")


async def test_only_the_latest_prefix_of_a_window_is_sent() -> None:
    engine, windows = GateEngine(), Windows()
    d = debouncer(engine, windows, namespace="ns", ttl_s=45.0, delay_s=0.25)
    d.warm("s1", ids=A)
    d.warm("s1", ids=AB)
    d.warm("s1", ids=ABC)
    assert d.pending == 1
    await windows.end()
    await d.flush()
    assert windows.delays == [0.25]
    ((ids, params),) = engine.calls
    assert ids == ABC
    assert (params.session, params.namespace, params.pin_ttl_s) == ("s1", "ns", 45.0)
    assert d.counts() == {"sent": 1, "coalesced": 2, "aborted": 0, "failed": 0, "dropped": 0}


async def test_keys_are_debounced_apart() -> None:
    engine, windows = GateEngine(), Windows()
    d = debouncer(engine, windows)
    d.warm("s1", ids=A)
    d.warm("s2", text="hello")
    d.warm("s1", ids=AB)
    await windows.end(2)
    await d.flush()
    assert sorted((p.session, tuple(ids)) for ids, p in engine.calls) == [
        ("s1", tuple(AB)),
        ("s2", tuple(b"hello")),
    ]
    assert (d.sent, d.coalesced) == (2, 1)


async def test_a_running_prefill_superseded_by_another_prefix_is_aborted() -> None:
    engine, windows = GateEngine(auto=False), Windows()
    d = debouncer(engine, windows)
    d.warm("s1", ids=A)
    await windows.end()
    await sent(engine, 1)
    d.warm("s1", ids=OTHER)  # the user rewrote the message: A is no use
    await windows.end()
    await sent(engine, 2)
    assert engine.aborts == [engine.rid(0)]
    engine.release(engine.rid(1))
    await d.flush()
    assert [ids for ids, _ in engine.calls] == [A, OTHER]
    assert d.counts() == {"sent": 2, "coalesced": 0, "aborted": 1, "failed": 0, "dropped": 0}


async def test_a_running_prefill_extended_by_the_newer_prefix_runs_on() -> None:
    engine, windows = GateEngine(auto=False), Windows()
    d = debouncer(engine, windows)
    d.warm("s1", ids=A)
    await windows.end()
    await sent(engine, 1)
    d.warm("s1", ids=AB)  # the user typed on: A is the start of AB
    await windows.end()
    await sent(engine, 2)
    d.warm("s1", ids=AB)  # the same prefix as one running: not sent twice
    await windows.end()
    await until(lambda: d.coalesced == 1, what="the repeat coalesced")
    assert engine.aborts == []
    engine.release(engine.rid(0))
    engine.release(engine.rid(1))
    await d.flush()
    assert [ids for ids, _ in engine.calls] == [A, AB]
    assert d.counts() == {"sent": 2, "coalesced": 1, "aborted": 0, "failed": 0, "dropped": 0}


async def test_flush_sends_what_is_pending_without_waiting_for_the_window() -> None:
    engine, windows = GateEngine(), Windows()
    d = debouncer(engine, windows)
    d.warm("s1", ids=A)
    await until(lambda: windows.open, what="the window opened")
    await d.flush()
    assert [ids for ids, _ in engine.calls] == [A]
    assert (d.sent, d.pending) == (1, 0)
    assert windows.open[0].cancelled()  # the window's timer is gone
    await d.flush()
    assert d.sent == 1


async def test_failures_are_logged_and_counted_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine, windows = GateEngine(fail=True), Windows()
    d = debouncer(engine, windows)
    with caplog.at_level(logging.WARNING, logger="agentwarm.warmup.debounce"):
        d.warm("s1", ids=A)
        d.warm("s2", messages=[])  # renders to nothing
        await d.flush()
    assert d.counts() == {"sent": 1, "coalesced": 0, "aborted": 0, "failed": 2, "dropped": 0}
    messages = sorted(r.getMessage() for r in caplog.records)
    assert messages[0].startswith("warm of 's1' failed: the test engine is down")
    assert messages[1].startswith("warm of 's2' not sent: warm: the messages render to no")


async def test_a_bad_form_raises_at_the_call() -> None:
    d = debouncer(GateEngine(), Windows())
    with pytest.raises(ConfigError, match="exactly one of messages=, text= or ids="):
        d.warm("s1", ids=A, text="a")
    assert d.pending == 0


async def test_aclose_drops_the_pending_and_aborts_the_running() -> None:
    engine, windows = GateEngine(auto=False), Windows()
    d = debouncer(engine, windows)
    d.warm("s1", ids=A)
    await windows.end()
    await sent(engine, 1)
    d.warm("s2", ids=AB)
    await d.aclose()
    assert engine.aborts == [engine.rid(0)]
    assert d.counts() == {"sent": 1, "coalesced": 0, "aborted": 1, "failed": 0, "dropped": 1}
    d.warm("s3", ids=A)  # closed: ignored
    assert d.pending == 0 and len(engine.calls) == 1
    await d.aclose()


async def test_the_latest_prefix_is_cached_on_a_real_engine() -> None:
    windows = Windows()
    async with FakeEngine() as engine:
        d = agentwarm.Debouncer(engine, sleep=windows.sleep)
        d.warm("s1", text="The user is typing: I want")
        d.warm("s1", text="The user is typing: I want to change my flight")
        await windows.end()
        await d.flush()
        ids = engine.encode("The user is typing: I want to change my flight")
        stats = await engine.stats()
        assert (stats.requests, stats.cached_tokens, stats.computed_tokens) == (
            1,
            len(ids),
            len(ids),
        )
        live = await engine.generate([*ids, *engine.encode(" to Monday")], session="s1")
        assert live.cached_tokens == len(ids)


class ThreadEngine(GateEngine):
    """A GateEngine whose ``encode`` records the thread it runs in."""

    def __init__(self) -> None:
        super().__init__()
        self.encode_threads: set[int] = set()

    def encode(self, text: str) -> list[int]:
        self.encode_threads.add(threading.get_ident())
        return super().encode(text)


async def test_prefixes_are_rendered_off_the_event_loop_by_one_renderer() -> None:
    engine, windows = ThreadEngine(), Windows()
    d = debouncer(engine, windows)
    system = {"role": "system", "content": "You are the airline's booking agent."}
    d.warm("s1", messages=[system, {"role": "user", "content": "I want"}])
    d.warm("s2", text="The user is typing")
    await windows.end(2)
    await d.flush()
    assert d.counts() == {"sent": 2, "coalesced": 0, "aborted": 0, "failed": 0, "dropped": 0}
    assert engine.encode_threads and threading.get_ident() not in engine.encode_threads
    assert renderer_for(engine)._pieces  # the engine's one renderer rendered the messages
