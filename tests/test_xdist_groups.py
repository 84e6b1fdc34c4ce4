"""The README's test command (``-n 2 --dist loadgroup``) relies on tests/conftest.py's groups: a
file's tests on one worker, every test of the real vLLM server on one worker (one server). If a
pytest or pytest-xdist upgrade stops xdist from applying the groups (pytest 9.2 did), both
workers start a vLLM server and the suite takes three times as long: this test fails first."""

from __future__ import annotations

import pytest


def test_under_xdist_this_test_is_in_its_files_group(request: pytest.FixtureRequest) -> None:
    if not hasattr(request.config, "workerinput") or request.config.getvalue("dist") != "no":
        pytest.skip("not on a pytest-xdist worker")
    if not request.config.getvalue("loadgroup"):
        pytest.skip("not run with --dist loadgroup")
    assert request.node.nodeid.endswith("@tests/test_xdist_groups.py"), request.node.nodeid
