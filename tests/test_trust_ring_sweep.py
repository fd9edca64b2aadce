"""The stale-segment sweep every ring runs at start-up reads /dev/shm, which every local user
can write: a name another user chose or a file this user does not own is left alone, and
never makes the sweep (and so every ring on the machine) fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from pytest_perfgate.ring.segment import PREFIX, sweep_stale


def _dead_pid() -> int:
    """The id of a process that has just ended (not reused within a test)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(done.stdout)
    assert not psutil.pid_exists(pid)
    return pid


def _segment(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_bytes(b"\0" * 64)
    return path


def test_a_stale_segment_of_this_user_is_removed(tmp_path: Path) -> None:
    name = f"{PREFIX}{_dead_pid()}_{'ab' * 16}"
    path = _segment(tmp_path, name)
    alive = _segment(tmp_path, f"{PREFIX}{os.getpid()}_{'cd' * 16}")
    assert sweep_stale(tmp_path) == [name]
    assert not path.exists() and alive.exists()


@pytest.mark.parametrize("pid_text", [
    "9" * 40,         # psutil.pid_exists raises OverflowError on it
    "99999999999",    # fits a C long, but no kernel gives such a pid
    "\u00b2",         # a digit to str.isdigit, not to int(): ValueError
    "\u0663",         # an Arabic-Indic three: int() reads it, the name is not ours
    "0",              # pid_exists(0) is true: never a creator
    "",
])
def test_a_name_no_ring_makes_is_skipped_not_an_error(tmp_path: Path, pid_text: str) -> None:
    name = f"{PREFIX}{pid_text}_x"
    path = _segment(tmp_path, name)
    assert sweep_stale(tmp_path) == []
    assert path.exists()


def test_the_names_above_would_break_an_unguarded_sweep() -> None:
    """Why the guard is there: what the sweep would otherwise call on them raises."""
    with pytest.raises(OverflowError):
        psutil.pid_exists(int("9" * 40))
    with pytest.raises(ValueError):
        int("\u00b2")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_segment_is_left_alone(tmp_path: Path) -> None:
    name = f"{PREFIX}{_dead_pid()}_{'ef' * 16}"
    path = _segment(tmp_path, name)
    os.chown(path, 65534, 65534)
    assert sweep_stale(tmp_path) == []
    assert path.exists()


def test_a_link_named_like_a_segment_is_left_alone(tmp_path: Path) -> None:
    target = _segment(tmp_path, "target")
    link = tmp_path / f"{PREFIX}{_dead_pid()}_{'01' * 16}"
    link.symlink_to(target)
    assert sweep_stale(tmp_path) == []
    assert link.is_symlink() and target.exists()
