"""A REGRESSION of the A/B mode names the function that grew: real sides, real py-spy.

The head makes one of three pure-Python functions four times as slow (the step about twice
as slow: a margin a loaded machine keeps). That one test runs on the real clock (py-spy
samples real CPU time, and the verdict rests on it): it is marked ``timing``.

The others check options, messages and wiring on a copy of the project on the fake clock
(FAKE_CLOCK_CONFTEST): each function also advances the clock, clip four times as much in the
head, so the verdicts are exact (ratio 0.500) and no turn waits on real time. Where they name
a function (``perfgate profile``, history mode's own profile), its real work is what py-spy
sees: a step on the fake clock still runs its code. Also: no py-spy is a warning and the
verdict stands; ``-o perfgate_profile=off`` takes none; a bare ``--perfgate-profile``
profiles an unchanged benchmark too, its flame graphs beside the JSON report.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fake_session import FAKE_CLOCK_CONFTEST

pytestmark = pytest.mark.slow

POLICY = """
def normalize(o):
    return [v * 0.5 + 0.1 for v in o]


def clip(a):
    out = []
    for _ in range({repeat}):
        out = [min(1.0, max(-1.0, v)) for v in a]
    return out


def value(o):
    return sum(v * v for v in o)


def act(o):
    return clip(normalize(o)), value(o)
"""
# the same policy on the fake clock: 0.1 ms of fake time per pass over the list, a few times
# its real cost, so a profile's 0.75 s turns (fake) take ~0.1-0.2 s of real work for py-spy to
# sample; clip on line 6 as in POLICY
FAKE_POLICY = """
from conftest import CLOCK
def normalize(o):
    CLOCK.advance(0.0001)
    return [v * 0.5 + 0.1 for v in o]
def clip(a):
    out = []
    for _ in range({repeat}):
        CLOCK.advance(0.0001)
        out = [min(1.0, max(-1.0, v)) for v in a]
    return out


def value(o):
    CLOCK.advance(0.0001)
    return sum(v * v for v in o)


def act(o):
    return clip(normalize(o)), value(o)
"""
TEST = """
from policy import act

X = [i / 100.0 for i in range(200)]


def test_policy(perfgate):
    perfgate.measure(lambda: act(X), transitions=1)
"""
AB = ["--perfgate", "--perfgate-record=false", "--perfgate-threshold=10%",
      "--perfgate-ab-turns=8", "--perfgate-ab-turn-time=0.05", "--perfgate-warmup-max=5",
      "-p", "no:cacheprovider", "-p", "no:randomly"]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@e", "-c", "user.name=t", *args], cwd=repo,
                   check=True, capture_output=True)


def project(top: Path, policy: str, conftest: str | None = None) -> Path:
    """A git project of two commits, base and head: ``policy`` with clip once, then four
    times; ``conftest``: the text of the project's conftest in perf/, in both."""
    (top / "perf").mkdir()
    if conftest is not None:
        (top / "perf" / "conftest.py").write_text(conftest)
        (top / ".gitignore").write_text("__pycache__/\n")
    (top / "perf" / "policy.py").write_text(policy.format(repeat=1))
    (top / "perf" / "test_policy.py").write_text(TEST)
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-qm", "base")
    (top / "perf" / "policy.py").write_text(policy.format(repeat=4))
    git(top, "commit", "-qam", "clip four times")
    return top


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return project(tmp_path_factory.mktemp("profiled"), POLICY)


@pytest.fixture(scope="module")
def fake_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same project on the fake clock: exact verdicts (the head's step: 0.500)."""
    return project(tmp_path_factory.mktemp("profiled-fake"), FAKE_POLICY, FAKE_CLOCK_CONFTEST)


def pytest_run(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("PERFGATE_") and k not in ("PYTEST_ADDOPTS",
                                                            "PYTEST_XDIST_WORKER")}
    return subprocess.run([sys.executable, "-m", "pytest", *AB, *args, "test_policy.py"],
                          cwd=repo / "perf", capture_output=True, text=True, timeout=600,
                          env={**clean, **env})


@pytest.mark.timing  # a verdict on the real clock; py-spy samples real CPU time
@pytest.mark.usefixtures("py_spy_attaches")
def test_a_regression_names_the_function_that_grew(repo: Path) -> None:
    done = pytest_run(repo, "--perfgate-ab=HEAD~1", f"--perfgate-json={repo}/out/r.json")
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    assert "perfgate REGRESSION" in out
    why = out.split("why (py-spy, 6 turn pairs")[1].splitlines()
    assert why[1].lstrip().startswith("clip (perf/policy.py:6)"), out[-3000:]
    assert "changed" in why[1]
    entry = json.loads((repo / "out" / "r.json").read_text())["benchmarks"][0]
    profile = entry["result"]["extra"]["profile"]
    assert profile["grew"][0]["function"] == "clip"
    assert profile["grew"][0]["share"] > 0.5
    diff = Path(profile["files"]["diff"])
    assert diff.is_file() and diff.parent.parent == repo / "out" / "profiles"
    assert "clip (perf/policy.py:6)" in diff.read_text()


def test_without_py_spy_the_verdict_stands_with_a_warning(fake_repo: Path) -> None:
    done = pytest_run(fake_repo, "--perfgate-ab=HEAD~1", PERFGATE_PY_SPY="")
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    assert "perfgate REGRESSION" in out
    assert "0.500 [0.500-0.500]" in out  # the fake clock: 0.3 -> 0.6 ms per step, exactly
    assert "why (py-spy" not in out
    assert "no profile: PERFGATE_PY_SPY='' is not an executable py-spy" in out


@pytest.mark.usefixtures("py_spy_attaches")
def test_off_takes_none_and_a_bare_flag_profiles_an_unchanged_benchmark(fake_repo: Path
                                                                        ) -> None:
    off = pytest_run(fake_repo, "--perfgate-ab=HEAD~1", "-o", "perfgate_profile=off")
    assert off.returncode == 1 and "why (py-spy" not in off.stdout, off.stdout[-3000:]
    assert "no profile" not in off.stdout and "perfgate REGRESSION" in off.stdout
    same = pytest_run(fake_repo, "--perfgate-ab=HEAD", "--perfgate-profile",
                      f"--perfgate-json={fake_repo}/same/r.json")
    assert same.returncode == 0, same.stdout[-3000:]
    assert "1.000 [1.000-1.000]" in same.stdout
    profile = json.loads((fake_repo / "same" / "r.json").read_text())[
        "benchmarks"][0]["result"]["extra"]["profile"]
    assert profile["pairs"] == 6 and Path(profile["files"]["base"]).is_file()
    assert not any(n["changed"] for n in profile["grew"])  # nothing changed: none named so


def perfgate(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    return subprocess.run([sys.executable, "-m", "pytest_perfgate.cli", "profile", *args],
                          cwd=repo / "perf", capture_output=True, text=True, timeout=600,
                          env=clean)


@pytest.mark.usefixtures("py_spy_attaches")
def test_perfgate_profile_of_a_revision_names_the_function(fake_repo: Path) -> None:
    repo = fake_repo
    done = perfgate(repo, "--turns=6", "HEAD~1", "HEAD", "test_policy.py", *AB[-4:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "why (py-spy" in line)
    assert lines[at + 1].lstrip().startswith("clip (perf/policy.py:6)"), done.stdout
    assert (repo / ".perfgate" / "profiles").is_dir()


def test_perfgate_profile_usage_errors(fake_repo: Path) -> None:
    repo = fake_repo
    bad = perfgate(repo, "nosuchrev", ".")
    assert bad.returncode == 2 and "BASE 'nosuchrev': not a commit" in bad.stderr
    bad = perfgate(repo, "HEAD~1", "nosuchrev")
    assert bad.returncode == 2 and "HEAD 'nosuchrev': not a commit" in bad.stderr


@pytest.mark.usefixtures("py_spy_attaches")
def test_history_mode_profiles_its_own_run_on_request(fake_repo: Path) -> None:
    repo = fake_repo
    done = pytest_run(repo, "--perfgate-profile", f"--perfgate-json={repo}/hist/r.json",
                      "--perfgate-windows=3", "--perfgate-window-time=0.2")
    assert done.returncode == 0, done.stdout[-3000:]
    profile = json.loads((repo / "hist" / "r.json").read_text())[
        "benchmarks"][0]["result"]["extra"]["profile"]
    # four times the others' work (its list comprehension: py-spy names code objects)
    assert profile["spent"][0]["function"].startswith("clip"), profile
    assert Path(profile["files"]["run"]).is_file()
    assert "where the time goes (py-spy, 6 windows" in done.stdout


BENCHMARK_TEST = """
from policy import act

X = [i / 100.0 for i in range(200)]


def test_policy(benchmark):
    benchmark(act, X)
"""


@pytest.mark.usefixtures("py_spy_attaches")
def test_a_benchmark_in_calls_is_profiled_per_call(tmp_path: Path) -> None:
    """pytest-benchmark's ``benchmark`` under perfgate measures calls/s: its profile's times
    are per call, not per env-step."""
    repo = project(tmp_path, FAKE_POLICY, FAKE_CLOCK_CONFTEST)
    (repo / "perf" / "test_policy.py").write_text(BENCHMARK_TEST)
    done = pytest_run(repo, "--perfgate-profile", "--perfgate-windows=3",
                      "--perfgate-window-time=0.2")
    assert done.returncode == 0, done.stdout[-3000:]
    out = done.stdout.splitlines()
    at = next(i for i, line in enumerate(out) if "where the time goes" in line)
    assert out[at].endswith("where the time goes (py-spy, 6 windows after the measurement; "
                            "sampled time per call):"), out[at]
    assert re.search(r"s/call \(\d+%\)", out[at + 1]), out[at + 1]
    assert "flame graph (collapsed stacks, ns per call): " in done.stdout
    assert "env-step" not in "\n".join(out[at:]) and "/step" not in "\n".join(out[at:])


@pytest.mark.slow  # real processes: a profile run started, then stopped from outside
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=["kill", "term", "int"])
def test_a_stopped_perfgate_profile_leaves_nothing_running(repo: Path,
                                                           sig: signal.Signals) -> None:
    """Killed outright, or stopped as a cancelled job or Ctrl-C stops it, `perfgate
    profile` leaves no process (its pytest, their sides) and no worktree behind: its pytest
    dies with it (the kernel's parent-death signal) and unwinds as on Ctrl-C."""
    import psutil

    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    proc = subprocess.Popen([sys.executable, "-m", "pytest_perfgate.cli", "profile",
                             "--turns=96", "HEAD~1", ".", "test_policy.py",
                             "--perfgate-ab-turn-time=0.2"], cwd=repo / "perf", env=clean,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True,  # SIGINT as a terminal delivers it:
                            # a background runner passes it on ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    kids: list[psutil.Process] = []
    while time.monotonic() < deadline:  # its pytest and both sides run
        kids = psutil.Process(proc.pid).children(recursive=True)
        if sum("PERFGATE_SIDE" in " ".join(_environ_keys(k)) for k in kids) >= 2:
            break
        assert proc.poll() is None, "perfgate profile ended before its sides started"
        time.sleep(0.2)
    else:
        pytest.fail("the sides never started")
    os.kill(proc.pid, sig)
    proc.wait(150)  # its pytest is given 60 s to end its sides and remove its worktree
    _, alive = psutil.wait_procs(kids, timeout=60)
    assert alive == [], [p.cmdline() for p in alive]
    listed = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True,
                            text=True).stdout.splitlines()
    assert len(listed) == 1, listed


def _environ_keys(p: Any) -> list[str]:
    try:
        return list(p.environ())
    except Exception:  # ended meanwhile, or not ours to read
        return []
