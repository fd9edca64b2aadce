"""A/B runs leave nothing behind: SIGTERM unwinds a real run (sides ended, worktree removed),
a SIGKILLed run's worktree is swept at the next start, and a hung side is reported within a
bound proportionate to the turn, stated in the error."""

from __future__ import annotations

import contextlib
import json
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
from helpers import ARGS, FAKE_STEP, git, repo

from pytest_perfgate.modes.ab import remote as ab_remote
from pytest_perfgate.modes.ab import worktree as ab_worktree
from pytest_perfgate.modes.ab.checkout import MARKER, PREFIX, sweep_stale

pytestmark = pytest.mark.slow  # real side processes, git worktrees and signals


def worktrees(path: Path) -> list[str]:
    out = subprocess.run(["git", "worktree", "list"], cwd=path, capture_output=True,
                         text=True, check=True).stdout
    return out.strip().splitlines()


def sides_of(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [c for c in proc.children(recursive=True)
                if "pytest_perfgate.plugin.hooks" in " ".join(c.cmdline())]
    except psutil.Error:
        return []


def test_sigterm_ends_the_sides_and_removes_the_worktree(pytester: pytest.Pytester,
                                                         tmp_path: Path) -> None:
    repo(pytester, "time.sleep(0.002 * SLOW)")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    args = [a for a in ARGS if not a.startswith("--perfgate-ab-turn")]
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args, "--perfgate-ab-turns=2000",
                             "--perfgate-ab-turn-time=0.05"], cwd=pytester.path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while len(sides := sides_of(me)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(sides) == 2, "the sides never started"
    assert len(worktrees(pytester.path)) == 2 and list(tmpdir.glob(PREFIX + "*"))
    time.sleep(3)  # into the measurement
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "SIGTERM: the A/B run was stopped; cleaning up" in out
    assert worktrees(pytester.path) == worktrees(pytester.path)[:1]
    assert list(tmpdir.iterdir()) == [], "the base worktree's folder was left in TMPDIR"
    _gone, alive = psutil.wait_procs(sides, timeout=5)
    assert alive == []


def test_killed_runs_worktree_is_swept_at_the_next_start(pytester: pytest.Pytester,
                                                         tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    repo(pytester, "time.sleep(0.001)")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    hold = ("import sys, time; from pathlib import Path; "
            "from pytest_perfgate.modes.ab.checkout import worktree\n"
            "with worktree(Path('.'), 'HEAD') as p:\n"
            "    print(p, flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", hold], cwd=pytester.path, text=True,
                            env={**os.environ, "TMPDIR": str(tmpdir)}, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    stale = Path(proc.stdout.readline().strip())
    proc.kill()  # SIGKILL: nothing runs, the worktree stays
    proc.communicate(timeout=30)  # also closes its stdout pipe
    assert stale.is_dir() and len(worktrees(pytester.path)) == 2
    owner = json.loads((stale.parent / MARKER).read_text())
    assert owner["pid"] == proc.pid and owner["repo"] == str(pytester.path.resolve())
    # Never ours to remove: a folder without the marker, and one whose owner still runs.
    unmarked = tmpdir / (PREFIX + "unmarked")
    unmarked.mkdir()
    live = tmpdir / (PREFIX + "live")
    live.mkdir()
    (live / MARKER).write_text(json.dumps({**owner, "pid": os.getpid(), "start": None}))

    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    with ab_worktree(pytester.path, "HEAD~1") as path:  # the next A/B start sweeps
        assert not stale.parent.exists()
        assert len(worktrees(pytester.path)) == 2  # the main one and this run's own
        assert path.is_dir()
    assert worktrees(pytester.path) == worktrees(pytester.path)[:1]
    assert sorted(p.name for p in tmpdir.iterdir()) == [live.name, unmarked.name]
    assert sweep_stale(pytester.path) == []


# The controller's hang bound, made short for the test: the project's conftest sets the floor
# of remote.window_bound (a module constant read at each window) in every process of the run.
SHORT_FLOOR = FAKE_CLOCK_CONFTEST + """
from pytest_perfgate.modes.ab import remote
remote.WINDOW_FLOOR_S = 2.0
"""


@pytest.mark.timing  # it asserts a real-time bound on the report of a real hang
def test_hung_side_is_reported_within_the_stated_bound(pytester: pytest.Pytester) -> None:
    assert ab_remote.window_bound(0.05) == pytest.approx(15.5)  # the product's own bound
    # The head's step hangs at its 201st call (0.4 s of fake time): past its first (start-up)
    # window, in its second warm-up window (0.25 s), whose bound is the floor + 10 x that.
    repo(pytester, "N.append(1); CLOCK.advance(0.002) if len(N) <= 200 else time.sleep(3600)",
         base_body=FAKE_STEP, fake_clock=True)
    pytester.makeconftest(SHORT_FLOOR)
    git(pytester, "commit", "-qam", "head", "--amend")
    text = (pytester.path / "test_perf.py").read_text().replace("SLOW = ", "N = []\nSLOW = ")
    (pytester.path / "test_perf.py").write_text(text)
    t0 = time.monotonic()
    res = pytester.runpytest_subprocess(*ARGS, timeout=300)
    took = time.monotonic() - t0
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*head side (*) sent nothing for 4.5 s (the bound for a 0.25 s "
                              "window: 2 s + 10 x the window; a step that takes longer needs "
                              "a longer --perfgate-ab-turn-time) while we waited for a window's "
                              "result, so it counts as hung*"])
    assert "REGRESSION" not in res.stdout.str()
    # reported within the bound plus start-up, never after a side's exit timeout (30 s) or
    # start-up bound (180 s)
    assert took < 25, f"a hung side took {took:.0f} s to report (bound: 4.5 s)"
    assert worktrees(pytester.path) == worktrees(pytester.path)[:1]


@pytest.mark.parametrize("pid", [99999999999999999999, -5, True, "123", 1 << 23])
def test_a_planted_owner_file_breaks_no_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            pid: object) -> None:
    """The temp dir is shared: a marker naming no process perfgate could have started (a
    pid past the kernel's limit overflowed psutil) is not ours, and is left alone."""
    git_dir = tmp_path / "repo"
    git_dir.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=git_dir, check=True)
    planted = tmp_path / (PREFIX + "planted")
    planted.mkdir()
    (planted / MARKER).write_text(json.dumps({"pid": pid, "start": None,
                                              "host": os.uname().nodename}))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert sweep_stale(git_dir) == []
    assert planted.is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_or_a_linked_worktree_folder_is_never_swept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git_dir = tmp_path / "repo"
    git_dir.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=git_dir, check=True)
    dead = {"pid": 4_000_000, "start": None, "host": os.uname().nodename}  # no such process
    theirs = tmp_path / (PREFIX + "theirs")
    theirs.mkdir()
    (theirs / MARKER).write_text(json.dumps(dead))
    os.chown(theirs, 65534, 65534)
    os.chown(theirs / MARKER, 65534, 65534)
    target = tmp_path / "precious"
    target.mkdir()
    (target / MARKER).write_text(json.dumps(dead))
    (tmp_path / (PREFIX + "link")).symlink_to(target)
    mine = tmp_path / (PREFIX + "mine")
    mine.mkdir()
    (mine / MARKER).write_text(json.dumps(dead))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert sweep_stale(git_dir) == [mine]
    assert theirs.is_dir() and target.is_dir() and not mine.exists()


def _grandchildren(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if p.info["cmdline"] == tag.split():
                found.append(p)
    return found


def test_a_stopped_setup_command_takes_its_children_with_it(tmp_path: Path) -> None:
    """SIGTERM during --perfgate-ab-setup / bisect --setup: the command's children end
    too, not only its shell."""
    ready = tmp_path / "ready"
    script = ("import sys; from pytest_perfgate.core import group\n"
              "from pytest_perfgate.modes.ab.checkout import term_as_interrupt\n"
              "term_as_interrupt()\n"
              f"group.run('sleep 45.123 & sleep 45.123 & touch {ready}; wait', '.')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert len(_grandchildren("sleep 45.123")) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert "KeyboardInterrupt: SIGTERM" in err
    deadline = time.monotonic() + 20
    while _grandchildren("sleep 45.123") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _grandchildren("sleep 45.123") == []


def test_a_child_ends_when_perfgate_is_killed_outright(tmp_path: Path) -> None:
    """SIGKILL runs no clean-up: the kernel ends what perfgate started (A/B sides, a
    bisection's probe) through the parent-death signal."""
    script = ("import sys, time; from pytest_perfgate.core import group\n"
              "p = group.popen(['sleep', '46.321'])\n"
              "print(p.pid, flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = psutil.Process(int(proc.stdout.readline()))
    assert "46.321" in " ".join(child.cmdline())
    proc.kill()
    proc.communicate(timeout=30)
    _gone, alive = psutil.wait_procs([child], timeout=20)
    assert alive == []


def test_every_process_perfgate_starts_goes_through_the_one_supervisor() -> None:
    """A child started by a bare Popen outlives a killed perfgate (no parent-death signal)
    and shares its terminal's process group: every long-lived child (A/B sides, probes,
    profiles, counting workers, hogs, asv publish, py-spy) starts through core/group.py."""
    import ast

    import pytest_perfgate

    root = Path(pytest_perfgate.__file__).parent
    bare = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "core" / "group.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                keywords = {k.arg for k in node.keywords}
                if name.endswith("Popen") or "start_new_session" in keywords:
                    bare.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    assert bare == []
