"""The conftest that test projects get for plugin runs on a fake clock: deterministic
timings, and no outside-load guard (a shared test machine would trip it). Tests append
their own hooks to it; :func:`scratch_repo` makes such a project outside pytester."""

import subprocess
from pathlib import Path

# a perf test whose step takes SLOW times 2 ms of the project's fake clock
SLOW_STEP = """
from conftest import CLOCK
SLOW = {slow}
def test_s(perfgate):
    perfgate.measure(lambda: CLOCK.advance(0.002 * SLOW), transitions=8)
"""

FAKE_CLOCK_CONFTEST = """
import os
import pytest
from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.plugin.hooks import gate_session

CLOCK = FakeClock()

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    s = gate_session(config)
    s.clock = CLOCK
    s.load_probe = NullProbe()
    fake_configure(config)

def fake_configure(config):  # a test's conftest may redefine this
    pass
"""


def scratch_repo(where: Path, step: str = SLOW_STEP) -> Path:
    """A git project at ``where/repo`` on the fake clock, its perf test ``test_s.py`` in
    ``perf`` (``step`` formatted with ``slow=1.0``) committed as its base; results go to
    ``results/``."""
    repo = where / "repo"
    (repo / "perf").mkdir(parents=True)

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (repo / "pytest.ini").write_text("[pytest]\nperfgate_results_dir = results\n")
    (repo / ".gitignore").write_text("results/\n__pycache__/\n")
    (repo / "conftest.py").write_text(FAKE_CLOCK_CONFTEST)
    (repo / "perf" / "test_s.py").write_text(step.format(slow=1.0))
    git("add", "-A")
    git("commit", "-qm", "base")
    return repo
