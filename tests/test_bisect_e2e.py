"""perfgate bisect on a real scratch repository: real A/B probes, a commit whose set-up
fails, and a stopped run.

Naming the slow commit runs on the project's fake clock (FAKE_CLOCK_CONFTEST in every
commit, so each probe's pytest and its A/B sides use it): each step advances it 4 ms per
unit of work, so a probe measures in little real time and its ratio is exact (4x the work:
0.250). The step also sorts an array per unit of work, real CPU time that py-spy can see
grow in the profile of the step found. The stopped and killed runs need a probe that is
still running when they stop it: their steps sort real numpy arrays (real time), a 4x
slowdown against a 50% threshold."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from fake_session import FAKE_CLOCK_CONFTEST

from pytest_perfgate.modes.ab import worktree as ab_worktree

pytestmark = pytest.mark.slow  # real probes: pytest, side processes, git worktrees

PERF = """
import numpy as np
{clock}WORK = {work}
X = np.random.default_rng(0).random(20_000)
def test_walk(perfgate):
    def step():
        for _ in range(WORK):
            np.sort(X)
{tick}    perfgate.measure(step, transitions=8)
"""
# on the fake clock: 4 ms of fake time per unit of work, more than its real time (one sort of
# 20k numbers): a turn takes little real time, and py-spy still sees the step's sorts grow
FAKE = {"clock": "from conftest import CLOCK\n", "tick": "            CLOCK.advance(0.004)\n"}
REAL = {"clock": "", "tick": ""}
ARGS = ["--turns", "24", "--turn-time", "0.05", "--threshold", "50%",
        "--setup", "test ! -e broken"]
FAKE_ARGS = ["--turns", "8", "--turn-time", "0.05", "--threshold", "10%",
             "--setup", "test ! -e broken"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def scratch(repo: Path, works: list[int], broken: int | None = None,
            fake_clock: bool = False) -> list[str]:
    """One commit per entry of ``works`` (the step's numpy work); ``broken``'s set-up fails.
    ``fake_clock``: every commit has FAKE_CLOCK_CONFTEST and steps that advance it."""
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "pytest.ini").write_text("[pytest]\nperfgate_machine = bisect\n")
    if fake_clock:
        (repo / "conftest.py").write_text(FAKE_CLOCK_CONFTEST)
        (repo / ".gitignore").write_text("__pycache__/\n")
    hashes = []
    for i, work in enumerate(works):
        (repo / "test_perf.py").write_text(PERF.format(work=work, **(FAKE if fake_clock else REAL)))
        (repo / "n.txt").write_text(str(i))
        marker = repo / "broken"
        if i == broken:
            marker.write_text("the build fails here")
        elif marker.exists():
            marker.unlink()
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"commit {i}" + (" (slow)" if i and work > works[i - 1]
                                                    else ""))
        hashes.append(git(repo, "rev-parse", "HEAD"))
    return hashes


def bisect(repo: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pytest_perfgate.cli", "bisect", *args],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def probing(repo: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """A bisect started, once its first probe runs; what it printed until then."""
    proc = bisect(repo, *args)
    assert proc.stdout is not None
    seen = ""
    while "[probe 1/" not in seen:
        line = proc.stdout.readline()
        assert line, seen
        seen += line
    return proc, seen


def no_leftovers(repo: Path) -> None:
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    kids = [c for c in psutil.Process().children(recursive=True)
            if "pytest_perfgate" in " ".join(c.cmdline())]
    assert kids == []
    tmp = Path(tempfile.gettempdir())
    markers = [*tmp.glob("perfgate-base-*/perfgate-ab-owner.json"),
               *tmp.glob("perfgate-bisect-*/perfgate-base-*/perfgate-ab-owner.json")]
    assert [m for m in markers if str(repo) in _read(m)] == []


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:  # another run's, removed meanwhile
        return ""


def test_names_the_slow_commit_and_skips_the_broken_one(tmp_path: Path,
                                                        request: pytest.FixtureRequest) -> None:
    try:  # where py-spy can attach, the step found also says why, its files kept
        request.getfixturevalue("py_spy_attaches")
        profiled = True
    except pytest.skip.Exception:
        profiled = False
    c = scratch(tmp_path, [1, 1, 1, 1, 4, 4], broken=2, fake_clock=True)
    slow, parent, broken = c[4], c[3], c[2]
    proc = bisect(tmp_path, *FAKE_ARGS, c[0], "HEAD", "test_perf.py")
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    assert f'first bad commit: {slow[:10]} "commit 4 (slow)"' in out
    assert f"its own step against its parent {parent[:10]}: test_perf.test_walk throughput " \
           "ratio 0.250 [0.250-0.250], REGRESSION" in out  # the fake clock: 4x the work, exactly
    assert f"reproduce: git checkout --detach {slow[:12]} && test ! -e broken && python " \
           f"-m pytest --perfgate --perfgate-ab={parent[:12]} --perfgate-ab-turns=8" in out
    assert f"skipped {broken[:10]} \"commit 2\": the set-up command 'test ! -e broken' " \
           "failed here (exit 1)" in out
    assert "estimate: ~6 probes" in out and "[probe 1/~6] HEAD (" in out
    if profiled:
        why = out.split("why (py-spy, 6 turn pairs")[1].splitlines()
        assert why[1].lstrip().startswith("test_walk.<locals>.step (test_perf.py:7)"), out
        files = [Path(f) for f in out.split("flame graphs (collapsed stacks, ns per "
                                            "env-step): ")[1].splitlines()[0].split(", ")]
        assert [f.name for f in files] == ["base.folded", "head.folded", "diff.folded"]
        assert all(f.is_file() for f in files), files
        assert files[0].parent.parent.parent.parent == tmp_path / ".perfgate" / "profiles"
        assert files[0].parent.parent.name == f"{slow[:10]}-vs-{parent[:10]}"
    no_leftovers(tmp_path)


def test_a_stopped_run_removes_its_worktrees(tmp_path: Path) -> None:
    c = scratch(tmp_path, [1, 1, 4])
    proc, seen = probing(tmp_path, *ARGS, c[0], "HEAD", "test_perf.py")
    deadline = time.monotonic() + 120  # the probe's A/B run has made its base worktree
    while len(git(tmp_path, "worktree", "list").splitlines()) < 3:
        assert time.monotonic() < deadline and proc.poll() is None, seen
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, seen + out
    assert "perfgate bisect: stopped (0 probes finished in " in out
    assert "the running probe was stopped and the worktrees removed" in out
    no_leftovers(tmp_path)


def test_a_killed_run_leaves_nothing_running_and_its_folders_are_swept(tmp_path: Path) -> None:
    """SIGKILL runs no clean-up in bisect: its probe's pytest and that probe's A/B sides
    end with it (the kernel's parent-death signal), and the next start sweeps its worktree
    and its perfgate-bisect-* folder."""
    c = scratch(tmp_path, [1, 1, 4])
    proc = bisect(tmp_path, *ARGS, c[0], "HEAD", "test_perf.py")
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 180
    sides: list[psutil.Process] = []
    while len(sides) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        with contextlib.suppress(psutil.Error):
            sides = [k for k in me.children(recursive=True)
                     if "pytest_perfgate.plugin.hooks" in " ".join(k.cmdline())]
        time.sleep(0.2)
    started = me.children(recursive=True)
    folders = [Path(line.split()[0]).parents[1] for line in
               git(tmp_path, "worktree", "list").splitlines()[1:]]
    proc.kill()
    proc.communicate(timeout=30)
    _gone, alive = psutil.wait_procs(started, timeout=90)
    assert alive == [], [p.pid for p in alive]
    bisect_folder = next(f for f in folders if f.name.startswith("perfgate-bisect-"))
    assert bisect_folder.exists()  # nothing ran to remove it
    with ab_worktree(tmp_path, "HEAD"):  # the next A/B start (or bisect) sweeps
        assert not bisect_folder.exists()
    no_leftovers(tmp_path)


def test_a_second_bisect_of_the_repository_is_refused_naming_the_first(tmp_path: Path
                                                                        ) -> None:
    """Two bisections of one repository would measure each other: the second is a usage
    error naming the first; the lock ends with its holder, even one killed outright."""
    c = scratch(tmp_path, [1, 1, 4])
    first, _ = probing(tmp_path, *ARGS, c[0], "HEAD", "test_perf.py")
    second = bisect(tmp_path, *ARGS, c[0], "HEAD", "test_perf.py")
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 2, out
    assert (f"perfgate bisect: error: another perfgate bisect (pid {first.pid}) is running in "
            "this repository: two at once measure each other's load; wait for it to end or "
            f"stop it (kill -INT {first.pid}), then start again") in out, out
    assert "Traceback" not in out
    started = psutil.Process(first.pid).children(recursive=True)
    first.kill()  # no clean-up runs: the kernel releases the lock
    first.communicate(timeout=30)
    _gone, alive = psutil.wait_procs(started, timeout=90)  # its probe ends with it
    assert alive == [], [p.pid for p in alive]
    third, seen = probing(tmp_path, *ARGS, c[0], "HEAD", "test_perf.py")
    os.kill(third.pid, signal.SIGTERM)
    out, _ = third.communicate(timeout=180)
    assert third.returncode == 130, seen + out
    with ab_worktree(tmp_path, "HEAD"):  # what the killed run left is swept at a start
        pass
    no_leftovers(tmp_path)
