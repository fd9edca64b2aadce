"""A shallow clone (actions/checkout's default depth of 1) holds none of the commits the
history's runs measured: git cannot place them, so every run would be NO BASELINE forever.
The verdict says so and how to fetch the history; a commit missing from a complete clone is
not told to unshallow (git refuses that there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import CONFTEST, PERF_TEST

from pytest_perfgate.history.vcs import is_shallow
from pytest_perfgate.modes.remeasure import missing_commit

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
ARGS = ["-m", "pytest", "--perfgate", "--perfgate-machine=box", "--perfgate-windows=6",
        "--perfgate-window-time=0.05", "--perfgate-remeasure=false", "-p", "no:cacheprovider"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _perf(cwd: Path, seed: int) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    done = subprocess.run([sys.executable, *ARGS], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**env, "PERF_SEED": str(seed), "SLOW": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    return " ".join(done.stdout.split())


def _origin(tmp_path: Path) -> Path:
    """A project with two commits measured (their runs in results/) and a third commit."""
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "conftest.py").write_text(CONFTEST)
    (origin / "test_perf.py").write_text(PERF_TEST)
    (origin / "pytest.ini").write_text("[pytest]\nperfgate_results_dir = results\n")
    (origin / ".gitignore").write_text("results/\n")
    _git(origin, "init", "-q")
    for i in range(3):
        (origin / "step.txt").write_text(f"{i}\n")
        _git(origin, "add", "-A")
        _git(origin, "commit", "-qm", f"c{i}")
        if i < 2:
            _perf(origin, i)
    return origin


def test_a_shallow_clone_says_so_and_how_to_fetch_the_history(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{origin}", str(clone))
    shutil.copytree(origin / "results", clone / "results")  # the history branch, restored
    assert is_shallow(clone) and not is_shallow(origin)
    out = _perf(clone, 7)
    assert "NO BASELINE" in out
    assert ("This clone is shallow, so the runs of 2 other commit(s) cannot be placed in its "
            "history: fetch the history: git fetch --unshallow (in a workflow: "
            "actions/checkout with fetch-depth: 0, as the shipped perfgate.yml does)") in out
    _git(clone, "fetch", "-q", "--unshallow")
    assert "NO BASELINE" not in _perf(clone, 8)  # judged once the history is there


def test_a_missing_baseline_commit_is_told_apart_from_a_shallow_clone(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{origin}", str(shallow))
    gone = "ab" * 20  # rebased away: in no clone at all
    why_complete = missing_commit(origin, gone)
    why_shallow = missing_commit(shallow, gone)
    assert "unshallow" not in why_complete and why_complete == (
        f"the baseline commit {gone[:10]} is not in this clone (rebased away, or on a branch "
        f"never fetched): fetch it (git fetch origin {gone}), or record runs of this "
        "branch's own commits")
    assert why_shallow.startswith(f"the baseline commit {gone[:10]} is not in this clone, "
                                  "which is shallow: fetch the history: git fetch --unshallow")
