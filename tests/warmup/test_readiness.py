"""Readiness of a warm-up: the progress JSON of ``/health/ready``, ready once finished unless
every worker failed before warming anything, the ready file removed when a warm-up begins and
when withdrawn, and written (atomically, the same JSON) once ready."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentwarm._spec import PrefetchKind
from agentwarm.warmup.readiness import Readiness
from agentwarm.warmup.warmer import WarmSummary


def summary(worker: str, **fields: object) -> WarmSummary:
    return WarmSummary(worker=worker, kind=PrefetchKind.STATIC, **fields)  # type: ignore[arg-type]


async def test_progress_then_ready_with_the_ready_file(tmp_path: Path) -> None:
    ready_file = tmp_path / "ready.json"
    ready_file.write_text("left from an earlier run\n")
    readiness = Readiness(ready_file=ready_file)
    readiness.begin(["http://a", "http://b"], 2)
    assert not ready_file.exists()
    assert readiness.to_dict() == {
        "ready": False,
        "prefixes": 0,
        "total": 4,
        "workers": {},
        "error": None,
    }
    a = summary("http://a", prefixes=1, tokens=10, computed_tokens=10)
    readiness.update(a)
    assert not readiness.ready
    assert readiness.to_dict()["prefixes"] == 1
    assert readiness.to_dict()["workers"] == {"http://a": a.to_dict()}
    a.prefixes, a.tokens, a.computed_tokens = 2, 25, 25  # the warmer's running summary
    b = summary("http://b", prefixes=1, skipped=1, tokens=7, computed_tokens=0)
    await readiness.finish([a, b])
    assert readiness.ready
    expected = {
        "ready": True,
        "prefixes": 4,
        "total": 4,
        "workers": {"http://a": a.to_dict(), "http://b": b.to_dict()},
        "error": None,
    }
    assert readiness.to_dict() == expected
    assert json.loads(ready_file.read_text()) == expected
    assert [p.name for p in tmp_path.iterdir()] == ["ready.json"]  # no temporary file left
    readiness.withdraw()  # at shutdown
    assert list(tmp_path.iterdir()) == []


async def test_the_ready_file_is_written_before_ready_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe that sees 200 on /health/ready finds the file (CI once read it in between)."""
    from agentwarm.warmup import readiness as module

    readiness = Readiness(ready_file=tmp_path / "ready.json")
    readiness.begin(["http://a"], 1)
    seen: list[bool] = []
    write = module.atomic_write

    def recording(path: Path, data: bytes) -> None:
        seen.append(readiness.ready)
        write(path, data)

    monkeypatch.setattr(module, "atomic_write", recording)
    await readiness.finish([summary("http://a", prefixes=1, tokens=3, computed_tokens=3)])
    assert seen == [False] and readiness.ready
    assert json.loads((tmp_path / "ready.json").read_text()) == readiness.to_dict()


def test_workers_are_listed_in_the_order_the_warm_up_began_with() -> None:
    readiness = Readiness()
    readiness.begin(["http://a", "http://b"], 1)
    readiness.update(summary("http://b", prefixes=1))
    readiness.update(summary("http://a", prefixes=1))
    assert list(readiness.to_dict()["workers"]) == ["http://a", "http://b"]


async def test_a_failed_worker_is_reported_and_does_not_hold_readiness_back() -> None:
    readiness = Readiness()
    readiness.begin(["http://a", "http://b"], 3)
    await readiness.finish(
        [summary("http://a", error="EngineUnavailable: refused"), summary("http://b", prefixes=3)]
    )
    assert readiness.ready
    assert readiness.to_dict()["error"] == "http://a: EngineUnavailable: refused"


async def test_a_worker_failing_mid_way_has_warmed_something() -> None:
    readiness = Readiness()
    readiness.begin(["local"], 3)
    await readiness.finish([summary("local", prefixes=1, error="EngineUnavailable: gone")])
    assert readiness.ready


async def test_not_ready_when_every_worker_failed_before_warming_anything(
    tmp_path: Path,
) -> None:
    ready_file = tmp_path / "ready.json"
    readiness = Readiness(ready_file=ready_file)
    readiness.begin(["http://a", "http://b"], 1)
    await readiness.finish(
        [
            summary("http://a", error="EngineUnavailable: refused"),
            summary("http://b", error="RuntimeError: boom"),
        ]
    )
    assert not readiness.ready
    assert not ready_file.exists()
    assert readiness.to_dict()["error"] == (
        "no worker could be warmed: http://a: EngineUnavailable: refused; "
        "http://b: RuntimeError: boom"
    )
    # A later round (keep-warm) that warms one worker makes it ready.
    await readiness.finish([summary("http://b", prefixes=1)])
    assert readiness.ready
    assert readiness.to_dict()["error"] == "http://a: EngineUnavailable: refused"
    assert json.loads(ready_file.read_text()) == readiness.to_dict()


async def test_a_ready_file_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    readiness = Readiness(ready_file=tmp_path / "gone" / "ready.json")
    readiness.begin(["local"], 0)
    await readiness.finish([])
    assert readiness.ready
    assert "cannot write the ready file" in caplog.text
