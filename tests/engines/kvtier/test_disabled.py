"""A directory the tier cannot use, or a disk that fails a write: the tier turns itself off with
one warning, the caller never sees an exception, and reads stay safe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from agentwarm.engines.kvtier.keys import namespace_dir
from tests.engines.kvtier.helpers import open_tier, prefix_kv, tier_warnings

ROOT = Path(__file__).resolve().parents[3]
IDS = list(range(8))
as_root = os.geteuid() == 0


def _writes_through_chmod() -> bool:
    """Whether this process writes into a directory of mode 0o500 (root with
    CAP_DAC_OVERRIDE does; root without it, e.g. under ``setpriv --bounding-set
    -dac_override``, does not)."""
    with tempfile.TemporaryDirectory() as where:
        locked = Path(where) / "locked"
        locked.mkdir(mode=0o500)
        try:
            (locked / "probe").write_bytes(b"")
        except PermissionError:
            return False
        finally:
            locked.chmod(0o700)
        return True


chmod_binds = pytest.mark.skipif(
    as_root and _writes_through_chmod(), reason="root with CAP_DAC_OVERRIDE writes through 0o500"
)


def assert_off_but_harmless(tier: object, caplog: pytest.LogCaptureFixture, said: str) -> None:
    from agentwarm.engines.kvtier import DiskTier

    assert isinstance(tier, DiskTier)
    assert not tier.enabled and not tier.stats().enabled
    tier.write("", IDS, prefix_kv("", IDS), 0)  # no exception, nothing queued
    tier.flush()
    assert tier.stored_prefix("", IDS) == 0
    assert tier.read("", IDS, 0, 8) is None
    [warning] = tier_warnings(caplog)
    assert said in warning and "the tier is off" in warning
    tier.close()


def test_a_path_that_is_a_file_turns_the_tier_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "kv"
    path.write_text("a file")
    assert_off_but_harmless(open_tier(path), caplog, "ENOTDIR")
    assert path.read_text() == "a file"


def test_a_path_under_a_file_turns_the_tier_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("x")
    assert_off_but_harmless(open_tier(tmp_path / "file" / "kv"), caplog, "ENOTDIR")


@chmod_binds
def test_an_unwritable_directory_turns_the_tier_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tmp_path.chmod(0o500)
    try:
        assert_off_but_harmless(open_tier(tmp_path / "kv"), caplog, "EACCES")
    finally:
        tmp_path.chmod(0o700)


@chmod_binds
def test_a_directory_made_unwritable_later_stops_writes_and_keeps_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tier = open_tier(tmp_path)
    tier.write("", IDS, prefix_kv("", IDS), 0)
    tier.flush()
    (tier.root / namespace_dir("")).chmod(0o500)
    try:
        other = list(range(50, 58))
        tier.write("", other, prefix_kv("", other), 0)
        tier.flush()
        assert not tier.enabled
        assert tier.stored_prefix("", other) == 0
        kv = tier.read("", IDS, 0, 8)
        assert kv is not None and torch.equal(kv, prefix_kv("", IDS))
        [warning] = tier_warnings(caplog)
        assert "EACCES" in warning
    finally:
        (tier.root / namespace_dir("")).chmod(0o700)
    tier.close()


def test_a_failing_write_turns_the_tier_off_and_reads_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tier = open_tier(tmp_path)
    tier.write("", IDS, prefix_kv("", IDS), 0)
    tier.flush()
    (tier.root / namespace_dir("tenant-a")).write_text("in the way")  # its dir cannot be made
    tier.write("tenant-a", IDS, prefix_kv("tenant-a", IDS), 0)
    tier.flush()
    assert not tier.enabled
    [warning] = tier_warnings(caplog)
    assert "cannot write a block: EEXIST" in warning and "the tier is off" in warning
    tier.write("", list(range(40, 48)), prefix_kv("", list(range(40, 48))), 0)
    tier.flush()
    assert tier.stats().blocks_written == 2  # the first write only
    kv = tier.read("", IDS, 0, 8)  # what is stored stays readable, verified as ever
    assert kv is not None and torch.equal(kv, prefix_kv("", IDS))
    tier.close()
    assert not list(tier.root.rglob("*.tmp"))


_FULL_DISK = """
import errno, json, os, subprocess, sys
from pathlib import Path
mnt = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
from tests.engines.kvtier.helpers import open_tier, prefix_kv
ids, more = list(range(8)), list(range(50, 58))
out = {}
tier = open_tier(mnt)
out["budget_capped"] = tier.max_bytes < 256 << 10
tier.write("", ids, prefix_kv("", ids), 0)
tier.flush()
fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError as exc:
    out["filler"] = errno.errorcode[exc.errno]
os.close(fd)
tier.write("", more, prefix_kv("", more), 0)
tier.flush()
out["enabled"] = tier.enabled
out["more"] = tier.stored_prefix("", more)
kv = tier.read("", ids, 0, 8)
out["read"] = kv is not None and bool((kv == prefix_kv("", ids)).all())
out["tmp_left"] = len(list(mnt.rglob("*.tmp")))
tier.close()
subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
ro = open_tier(mnt)
out["ro_enabled"] = ro.enabled
kv = ro.read("", ids, 0, 8)
out["ro_read"] = kv is not None and bool((kv == prefix_kv("", ids)).all())
ro.close()
print("RESULT " + json.dumps(out))
"""


def _unshare() -> list[str] | None:
    """A command prefix that runs in a private mount namespace where ``mount`` works."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return None
    prefix = ["unshare", "--mount", "--propagation", "private"]
    if not as_root:
        prefix = ["unshare", "--user", "--map-root-user", "--mount"]
    probe = [*prefix, "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", "/mnt"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        return None
    return prefix


@pytest.mark.slow
def test_a_full_disk_and_a_read_only_disk_for_real(tmp_path: Path) -> None:
    """ENOSPC and EROFS from a real 256 KiB tmpfs in a private mount namespace (no mocks)."""
    prefix = _unshare()
    if prefix is None:
        pytest.skip("needs unshare and mount (a private mount namespace) for a real tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [*prefix, sys.executable, "-c", _FULL_DISK, str(mnt)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    [line] = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))
    assert out == {
        "budget_capped": True,
        "filler": "ENOSPC",
        "enabled": False,
        "more": 0,
        "read": True,
        "tmp_left": 0,
        "ro_enabled": False,
        "ro_read": True,
    }
    warnings = [x for x in run.stderr.splitlines() if "kv tier" in x]
    assert len(warnings) == 2, run.stderr  # one per tier: ENOSPC, then EROFS at open
    assert "ENOSPC" in warnings[0] and "EROFS" in warnings[1]
