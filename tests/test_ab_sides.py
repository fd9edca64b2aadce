"""The A/B controller sets up no perf test: the sides run it (real side processes, their
steps on the project's fake clock: no measuring time)."""

from __future__ import annotations

import pytest
from fake_session import FAKE_CLOCK_CONFTEST
from helpers import ARGS, git

from pytest_perfgate.modes.ab.side_test import Announced, HeadEnd

pytestmark = pytest.mark.slow  # real side processes and git worktrees

CONFTEST = FAKE_CLOCK_CONFTEST + """
import os, sys
import pytest

def _note(what):
    with open(os.environ["SETUPS"], "a") as f:
        f.write(f"{what} {os.getpid()} {sys.argv[0]}\\n")

@pytest.fixture
def pool():
    _note("pool")
    yield "pool"
    _note("pool-closed")

@pytest.fixture(autouse=True)
def every_test():
    _note("autouse")
"""

TEST = """
import pytest
from conftest import CLOCK

def test_walk(perfgate, pool):
    assert pool == "pool"
    {before}
    perfgate.measure(lambda: CLOCK.advance(0.002), transitions=8, extra={{"pool": pool}})
    {after}

def test_plain():
    pass
"""


@pytest.fixture(autouse=True)
def _setups_file(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SETUPS", str(pytester.path / "setups.txt"))  # base side's too


def project(p: pytest.Pytester, before: str = "pass", after: str = "pass") -> None:
    """A repository whose base and head have the same perf test, with a fixture and an
    autouse fixture that write each set-up's process to $SETUPS (the base side runs in a
    worktree elsewhere)."""
    git(p, "init", "-q")
    git(p, "config", "user.email", "t@example.com")
    git(p, "config", "user.name", "t")
    p.makeini("[pytest]\nperfgate_results_dir = results\n")
    p.makeconftest(CONFTEST)
    p.makepyfile(test_perf=TEST.format(before="pass", after="pass"))
    (p.path / ".gitignore").write_text("setups.txt\nresults/\n")
    git(p, "add", "-A")
    git(p, "commit", "-qm", "base")
    p.makepyfile(test_perf=TEST.format(before=before, after=after))
    git(p, "commit", "--allow-empty", "-qam", "head")


def setups(p: pytest.Pytester) -> list[list[str]]:
    path = p.path / "setups.txt"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_the_controller_sets_up_no_fixture_of_a_perf_test(pytester: pytest.Pytester) -> None:
    project(pytester)
    res = pytester.runpytest_subprocess(*ARGS, "test_perf.py::test_walk", timeout=300)
    res.assert_outcomes(passed=1)
    rows = setups(pytester)
    pools = [r for r in rows if r[0] == "pool"]
    # one set-up per side, both in side processes (started as `python -c ...`), none in
    # the controller, and each torn down there
    assert len(pools) == 2 and {r[2] for r in pools} == {"-c"}, rows
    assert len({r[1] for r in pools}) == 2, rows
    assert sorted(r[1] for r in rows if r[0] == "pool-closed") == sorted(r[1] for r in pools)
    assert [r for r in rows if r[0] == "autouse" and r[2] != "-c"] == [], rows
    assert "perfgate" in res.stdout.str() and "REGRESSION" not in res.stdout.str()


def test_other_tests_still_run_in_the_controller(pytester: pytest.Pytester) -> None:
    project(pytester)
    res = pytester.runpytest_subprocess(*ARGS, "test_perf.py::test_plain", timeout=300)
    res.assert_outcomes(passed=1)
    rows = setups(pytester)
    assert len(rows) == 1 and rows[0][0] == "autouse" and rows[0][2] != "-c", rows


def test_a_test_failing_in_the_head_fails_with_the_heads_output(
        pytester: pytest.Pytester) -> None:
    project(pytester, after="assert 1 == 2, 'the head broke it'")
    res = pytester.runpytest_subprocess(*ARGS, "test_perf.py::test_walk", timeout=300)
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "the test failed in the head side (" in out, out
    assert "the head broke it" in out, out
    assert "REGRESSION" not in out


def test_a_test_skipping_in_the_head_is_skipped_with_its_reason(
        pytester: pytest.Pytester) -> None:
    project(pytester, before="pytest.skip('no simulator here')")
    res = pytester.runpytest_subprocess(*ARGS, "-rs", "test_perf.py::test_walk", timeout=300)
    res.assert_outcomes(skipped=1)
    assert "no simulator here" in res.stdout.str()


def test_an_announcement_carries_what_the_controller_judges_by() -> None:
    a = Announced.of(("bench", "walk", 8, {"threshold": 0.05, "unit": "frames/s",
                                           "extra": {"pool": 4}}))
    assert a == Announced("walk", 8, 0.05, "frames/s", {"pool": 4})
    assert Announced.of(("bench", "walk", 8)) == Announced("walk", 8)  # an older side


@pytest.mark.parametrize(("code", "words"), [
    (0, None), (1, "the test failed in the head side (python -m pytest x)"),
    (3, "ended abnormally [exit code 3]"), (-9, "ended abnormally [killed by SIGKILL]")])
def test_how_the_head_ended_reads(code: int, words: str | None) -> None:
    failed = HeadEnd(code, "python -m pytest x", "tail").failed
    assert failed is None if words is None else (words in str(failed) and "tail" in failed)
