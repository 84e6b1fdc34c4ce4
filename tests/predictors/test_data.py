from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from agentwarm.data import TAU2_RETAIL_STEPS, load_trajectories
from agentwarm.errors import ConfigError


def test_packaged_tau2_retail_steps() -> None:
    runs = load_trajectories()
    assert len(runs) == 114
    assert sum(len(r) for r in runs) == 550
    assert runs[0] == [
        "find_user_id_by_name_zip",
        "get_order_details",
        "get_product_details",
        "get_product_details",
        "exchange_delivered_order_items",
    ]
    assert len({s for r in runs for s in r}) == 15


def test_packaged_file_holds_only_ids_and_steps() -> None:
    text = resources.files("agentwarm.data").joinpath(TAU2_RETAIL_STEPS).read_text("utf-8")
    for line in text.splitlines():
        assert set(json.loads(line)) == {"task_id", "steps"}
    notice = resources.files("agentwarm.data").joinpath("NOTICE.md").read_text("utf-8")
    assert "MIT License" in notice and "Sierra Research" in notice


def test_loads_a_given_file_skipping_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text('{"steps": ["a", "b"]}\n\n{"steps": [], "extra": 1}\n')
    assert load_trajectories(path) == [["a", "b"], []]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ('{"steps": ["a"]}\n{oops\n', ":2: not JSON"),
        ('{"steps": "abc"}\n', ":1: expected"),
        ('{"steps": ["a", 3]}\n', ":1: expected"),
        ('{"task_id": "1"}\n', ":1: expected"),
        ('\n\n["a"]\n', ":3: expected"),
    ],
)
def test_malformed_lines_name_the_line(tmp_path: Path, body: str, where: str) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(body)
    with pytest.raises(ConfigError, match=f"runs.jsonl{where}"):
        load_trajectories(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.jsonl"):
        load_trajectories(tmp_path / "nope.jsonl")
