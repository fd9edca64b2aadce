"""History mode that decides: when the record cannot resolve the threshold, the newest
baseline commit is measured again in A/B turns beside this tree. Real side processes and git
worktrees, on the project's fake clock (FAKE_CLOCK_CONFTEST, committed, so the re-measured
commit's sides run on it too): one recorded run never resolves anything, so the re-measure
always runs, and its paired verdict is exact (a 2x slower head measures 0.500)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_session import SLOW_STEP, scratch_repo

pytestmark = pytest.mark.slow  # real side processes and worktrees (on the fake clock)

STEP = SLOW_STEP
# a perf test with two measure() calls: "warm" the same everywhere, "walk" SLOW times slower
TWO_CALLS = """
from conftest import CLOCK
SLOW = {slow}
def test_walk(perfgate):
    perfgate.measure(lambda: CLOCK.advance(0.002), transitions=8, name="warm")
    perfgate.measure(lambda: CLOCK.advance(0.002 * SLOW), transitions=8, name="walk")
"""
RUN = ["--perfgate", "--perfgate-machine=box", "--perfgate-threshold=10%",
       "--perfgate-windows=4", "--perfgate-window-time=0.1", "--perfgate-warmup-max=5",
       "--perfgate-ab-turns=8", "--perfgate-ab-turn-time=0.05", "-p", "no:cacheprovider",
       "-p", "no:randomly"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PERFGATE_") and k not in ("PYTEST_ADDOPTS",)}


def pytest_in(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *RUN, *args], cwd=repo, env=env(),
                          capture_output=True, text=True, timeout=600)


def scratch(tmp_path: Path, head_slow: float, step: str = STEP) -> Path:
    """A base commit with one recorded run (too few to resolve anything), then the head
    (``step``: the test file, formatted with the head's ``slow``)."""
    repo = scratch_repo(tmp_path, step)
    done = pytest_in(repo, "perf")
    assert done.returncode == 0, done.stdout + done.stderr
    (repo / "perf" / "test_s.py").write_text(step.format(slow=head_slow))
    (repo / "n.txt").write_text("head")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "head")
    return repo


def verdict(repo: Path, report: Path, *args: str) -> tuple[dict[str, object], str]:
    done = pytest_in(repo, f"--perfgate-json={report}", *args, "perf")
    (entry,) = json.loads(report.read_text())["benchmarks"]
    return entry, done.stdout + done.stderr


def test_a_twice_as_slow_head_is_a_regression_though_the_record_cannot_tell(
        tmp_path: Path) -> None:
    repo = scratch(tmp_path, 2.0)
    base = git(repo, "rev-parse", "HEAD~1")
    entry, out = verdict(repo, tmp_path / "r.json")
    assert entry["verdict"] == "REGRESSION", out
    assert (entry["ratio"], entry["ci"]) == (0.5, [0.5, 0.5]), out  # the fake clock: exact
    words = " ".join(out.split())
    assert "re-measured: the record could not resolve the threshold (" in words
    assert f"so the baseline commit {base[:10]} was measured again in alternating turns" in words
    assert entry["baseline_commits"] == [base] and entry["remeasured"] is True
    # one set of figures: steps/s over the baseline shown is the paired ratio
    assert entry["steps_per_s"] / entry["baseline_steps_per_s"] == pytest.approx(  # type: ignore[operator]
        entry["ratio"])
    # the run is recorded as before: two history runs now
    assert len(list((repo / "results" / "box" / "perfgate").glob("*.pgrun"))) == 2
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # the worktree is gone


def test_an_unchanged_head_is_not_a_regression(tmp_path: Path) -> None:
    repo = scratch(tmp_path, 1.0)
    entry, out = verdict(repo, tmp_path / "r.json")
    # the fake clock: the same code measures exactly the same, so the pairs resolve 10%
    assert (entry["verdict"], entry["ratio"]) == ("OK", 1.0), out
    assert str(entry["message"]).startswith("re-measured: the record could not resolve")


@pytest.mark.parametrize("how", ["off", "dirty"])
def test_where_it_cannot_re_measure_the_verdict_names_why(tmp_path: Path, how: str) -> None:
    repo = scratch(tmp_path, 2.0)
    args: tuple[str, ...] = ()
    if how == "off":
        args = ("--perfgate-remeasure=false",)
    else:
        (repo / "n.txt").write_text("uncommitted")
    entry, out = verdict(repo, tmp_path / "r.json", *args)
    assert entry["verdict"] == "INCONCLUSIVE", out
    assert entry["remeasured"] is False, out
    words = " ".join(out.split())
    if how == "dirty":
        assert "Not re-measured: the working tree has uncommitted changes" in words
    else:
        assert "re-measured: the record" not in words and "not re-measured" not in words


def test_a_tests_later_measure_call_is_re_measured_past_its_earlier_one(
        tmp_path: Path) -> None:
    # the sides started for "walk" pass "warm" first, as the test runs
    repo = scratch(tmp_path, 2.0, TWO_CALLS)
    done = pytest_in(repo, f"--perfgate-json={tmp_path / 'r.json'}", "perf")
    out = done.stdout + done.stderr
    got = {e["benchmark"].rpartition(".")[2]: e
           for e in json.loads((tmp_path / "r.json").read_text())["benchmarks"]}
    assert got["walk"]["verdict"] == "REGRESSION", out
    assert str(got["walk"]["message"]).startswith("re-measured: the record could not"), out
    assert got["walk"]["ratio"] == 0.5, out
    assert (got["warm"]["verdict"], got["warm"]["ratio"]) == ("OK", 1.0), out
