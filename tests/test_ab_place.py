"""Started from anywhere in the repository, the A/B mode, bisect and ``perfgate compare``
judge the test they judge from the top: a subfolder, an ini file in a parent folder, ``-c``,
``--rootdir`` and ``testpaths``, each against a head twice as slow. Real side processes and
git worktrees; the steps advance the project's fake clock (the scratch project's perf
conftest is FAKE_CLOCK_CONFTEST in every commit), so what is tested, where each run finds the
test and its history, takes no measuring time and the verdicts are exact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_session import FAKE_CLOCK_CONFTEST, SLOW_STEP

from pytest_perfgate.core.gate import Rule
from pytest_perfgate.modes.ab import ABController, ABSetup, Side, SideError, SideSpec
from pytest_perfgate.modes.ab.controller import PLUGIN_ROOT
from pytest_perfgate.modes.mode import BenchCall
from pytest_perfgate.modes.place import Place

pytestmark = pytest.mark.slow

STEP = SLOW_STEP
AB = ["--perfgate", "--perfgate-ab=HEAD~1", "--perfgate-record=false",
      "--perfgate-threshold=10%", "--perfgate-ab-turns=6", "--perfgate-ab-turn-time=0.05",
      "--perfgate-warmup-max=5", "-p", "no:cacheprovider", "-p", "no:randomly"]

# variant: (ini files to write, folder to start in, pytest arguments naming the test)
PLACES = {
    "subfolder": ({}, "perf", ["test_s.py"]),
    "ini in a parent folder": ({"pytest.ini": "[pytest]\n"}, "perf", ["test_s.py"]),
    "-c": ({"cfg/perf.ini": "[pytest]\n"}, "perf", ["-c", "../cfg/perf.ini", "test_s.py"]),
    "--rootdir": ({}, "perf", ["--rootdir=..", "test_s.py"]),
    "testpaths": ({"tox.ini": "[pytest]\ntestpaths = perf\n"}, ".", []),
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


# What these tests check is where each run finds the test, not what an A/B run does after
# a REGRESSION (a py-spy profile, fresh pairs of sides confirming it: test_ab.py, the
# profile tests): their runs leave both out.
QUICK = {"PERFGATE_PROFILE": "off", "PERFGATE_AB_CONFIRM": "false"}


def env(quick: bool = False) -> dict[str, str]:
    """The environment of a run started here; ``quick``: with QUICK."""
    drop = ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")
    kept = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(
        "PERFGATE_")}
    return {**kept, **QUICK} if quick else kept


def make_repo(top: Path, inis: dict[str, str], slows: tuple[float, ...] = (1.0, 2.0)) -> None:
    """One commit per entry of ``slows`` (the step's fake-time factor), ini files and the
    fake clock's conftest in the first."""
    top.mkdir()
    git(top, "init", "-q", "-b", "main")
    git(top, "config", "user.email", "t@example.com")
    git(top, "config", "user.name", "t")
    (top / "perf").mkdir()
    (top / "perf" / "conftest.py").write_text(FAKE_CLOCK_CONFTEST)
    for name, text in inis.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(text)
    for i, slow in enumerate(slows):
        (top / "perf" / "test_s.py").write_text(STEP.format(slow=slow))
        (top / "n.txt").write_text(str(i))
        git(top, "add", "-A")
        git(top, "commit", "-qm", f"commit {i}")


def pytest_in(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env(quick=True),
                          capture_output=True, text=True, timeout=timeout)


def verdicts(report: Path) -> dict[str, str]:
    entries = json.loads(report.read_text())["benchmarks"]
    return {b["result"]["name"]: b["verdict"] for b in entries}


@pytest.mark.parametrize("variant", list(PLACES))
def test_ab_from_anywhere_catches_a_twice_as_slow_head(tmp_path: Path, variant: str) -> None:
    inis, start, args = PLACES[variant]
    top = tmp_path / "repo"
    make_repo(top, inis)
    report = tmp_path / "r.json"
    res = pytest_in(top / start, *AB, f"--perfgate-json={report}", *args)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert verdicts(report) == {"perf.test_s.test_s": "REGRESSION"}, out
    assert "NO BASELINE" not in out
    assert len(git(top, "worktree", "list").splitlines()) == 1  # the base's is gone


def test_a_test_new_in_the_head_has_no_baseline_from_a_folder_new_in_the_head(
        tmp_path: Path) -> None:
    top = tmp_path / "repo"
    make_repo(top, {"pytest.ini": "[pytest]\n"}, (1.0,))
    (top / "perf" / "new").mkdir()
    (top / "perf" / "new" / "test_new.py").write_text(STEP.format(slow=1.0))
    with open(top / "perf" / "test_s.py", "a") as f:
        f.write("\n\ndef test_added(perfgate):\n"
                "    perfgate.measure(lambda: CLOCK.advance(0.002), transitions=8)\n")
    git(top, "add", "-A")
    git(top, "commit", "-qm", "new tests")
    report = tmp_path / "r.json"
    res = pytest_in(top / "perf" / "new", *AB, f"--perfgate-json={report}", "test_new.py",
                    "../test_s.py::test_added")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert verdicts(report) == {"perf.new.test_new.test_s": "NO BASELINE",
                                "perf.test_s.test_added": "NO BASELINE"}, out
    assert "has no test perf/new/test_new.py::test_s (its file perf/new/test_new.py is not " \
           "in that revision (looked for " in " ".join(out.split())
    assert "has no test perf/test_s.py::test_added (its file has no such test there)" in out


def test_a_base_side_that_cannot_find_a_file_it_has_is_an_error(tmp_path: Path) -> None:
    """The base revision has the test's file, but its side (misplaced here on purpose, in
    the wrong folder) could not find it: an infrastructure error naming both places, never
    NO BASELINE."""
    top, tree = tmp_path / "repo", tmp_path / "tree"
    make_repo(top, {"pytest.ini": "[pytest]\n"}, (1.0,))
    shutil.copytree(top / "perf", tree / "perf")
    place = Place.of(top, top / "perf", top, top / "pytest.ini")
    misplaced = SideSpec("base", tmp_path, place=place, tree=tree)
    head = SideSpec("head", top / "perf", place=place)
    ctl = ABController(ABSetup(misplaced, head, "0" * 40, "HEAD~1", PLUGIN_ROOT),
                       lambda: None, lambda j: None, 6, 0.05)  # type: ignore[arg-type,return-value]
    where = (str(top / "perf" / "test_s.py"), "::test_s")
    call = BenchCall("perf.test_s.test_s", "perf/test_s.py::test_s", 8, Rule(),
                     test_file=where)
    side = Side(misplaced, call.test_id, PLUGIN_ROOT, where)
    try:
        side.proc.wait(120)
        with pytest.raises(SideError) as e:
            ctl._absent_from_base(side, call)
    finally:
        side.close()
        side.log.close()
    assert str(e.value).startswith(
        f"the base side could not find test_s.py::test_s in {tmp_path}, although the head "
        f"found test_s.py::test_s in {top / 'perf'} and the base revision has that file")
    assert "file or directory not found: test_s.py::test_s" in str(e.value)


@pytest.mark.parametrize("variant", ["subfolder", "ini in a parent folder", "-c", "--rootdir"])
def test_bisect_from_anywhere_names_the_slow_commit(tmp_path: Path, variant: str) -> None:
    inis, start, args = PLACES[variant]
    top = tmp_path / "repo"
    # one commit after GOOD: one probe, which runs the A/B comparison at the place mapped
    # into the worktree every candidate is checked out into (the search itself: test_bisect*)
    make_repo(top, inis, (1.0, 2.0))
    slow = git(top, "rev-parse", "HEAD")
    res = subprocess.run([sys.executable, "-m", "pytest_perfgate.cli", "bisect", "--turns", "8",
                          "--turn-time", "0.05", "--threshold", "20%", "HEAD~1", "HEAD", *args],
                         cwd=top / start, env=env(quick=True), capture_output=True,
                         text=True, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out  # a step was found
    assert f"first bad commit: HEAD ({slow[:10]})" in out, out
    assert "-> skipped" not in out, out
    # measured, on the fake clock exactly 2x
    assert "-> slower: perf.test_s.test_s throughput ratio 0.500 [0.500-0.500], REGRESSION" \
        in out, out


@pytest.mark.parametrize("variant", ["subfolder", "ini in a parent folder", "-c", "--rootdir"])
def test_compare_from_anywhere_finds_the_history_pytest_kept(tmp_path: Path, variant: str
                                                             ) -> None:
    inis, start, args = PLACES[variant]
    top = tmp_path / "repo"
    make_repo(top, inis)
    here = top / start
    record = ["--perfgate", "--perfgate-machine=box", "--perfgate-windows=6",
              "--perfgate-window-time=0.05", "--perfgate-warmup-max=3", "-p",
              "no:cacheprovider", *args]
    git(top, "checkout", "-q", "--detach", "HEAD~1")
    for _ in range(2):
        res = pytest_in(here, *record)
        assert res.returncode == 0, res.stdout + res.stderr
    git(top, "checkout", "-q", "main")
    res = pytest_in(here, *record)  # the head's run, judged against the two: 2x slower
    assert res.returncode == 1 and "REGRESSION" in res.stdout, res.stdout + res.stderr
    place = [a for a in args if a.startswith("-") or a.endswith(".ini")]
    cmd = [sys.executable, "-m", "pytest_perfgate.cli", "compare", *place, "HEAD~1", "HEAD",
           "--json"]
    res = subprocess.run(cmd, cwd=here, env=env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    body = json.loads(res.stdout)
    # found and compared (never NO BASELINE): both base runs serve, and on the fake clock
    # the head's 2x step is exact
    (bench,) = body["benchmarks"]
    assert bench["outcome"] == "REGRESSION", res.stdout
    assert len(bench["baseline_commits"]) == 2, res.stdout
    assert bench["ratio"] == pytest.approx(0.5), res.stdout


@pytest.mark.parametrize(("base_test", "why"), [
    ("def test_s():\n    assert True\n",
     "the test does not measure it there: not a perf test in that revision"),
    ("import pytest\ndef test_s(perfgate):\n    pytest.skip('not yet')\n",
     "the test skips there"),
])
def test_a_test_that_becomes_a_perf_test_has_no_baseline(tmp_path: Path, base_test: str,
                                                         why: str) -> None:
    """A pull request that turns an existing test into a perf test (or one that skipped in
    the base): NO BASELINE as the docs promise, not a SideError."""
    top = tmp_path / "repo"
    make_repo(top, {"pytest.ini": "[pytest]\n"}, (1.0,))
    (top / "perf" / "test_s.py").write_text(base_test)
    git(top, "commit", "-qam", "a plain test")
    (top / "perf" / "test_s.py").write_text(STEP.format(slow=1.0))
    git(top, "commit", "-qam", "a perf test now")
    report = tmp_path / "r.json"
    res = pytest_in(top / "perf", *AB, f"--perfgate-json={report}", "test_s.py")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert verdicts(report) == {"perf.test_s.test_s": "NO BASELINE"}, out
    assert f"has no test perf/test_s.py::test_s ({why})" in " ".join(out.split())
