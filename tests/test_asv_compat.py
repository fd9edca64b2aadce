"""asv's own `compare` and `publish` accept our results dir and read the direction right.

Runs the real asv (same interpreter, `python -m asv`) against a temporary git repo with two
commits; the second commit is recorded 30% slower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_perfgate.core.results import BenchRecord, PhaseSummary, RunRecord
from pytest_perfgate.history.files import default_results_dir
from pytest_perfgate.history.store import History
from pytest_perfgate.history.vcs import git_info

pytest.importorskip("asv")
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
META = {"machine": "ci-box", "cpu_model": "Test CPU", "cpu_logical": 2, "mem_total": 2 ** 33,
        "system": "Linux", "kernel": "6.1", "arch": "x86_64", "python": "3.11.7",
        "versions": {"numpy": "2.0", "mujoco-core": "4.0.1"}}
BENCH = "tests/perf/test_humanoid.py::test_batch[256]"
ASV_NAME = "tests.perf.test_humanoid.py.test_batch[256].track_s_per_step"
PHASE = "tests.perf.test_humanoid.py.test_batch[256].phase.physics"


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _bench(scale: float, seed: int) -> BenchRecord:
    samples = tuple(scale * (30.0 + 0.05 * ((i * 7 + seed) % 9)) for i in range(8))
    return BenchRecord(name=BENCH, samples=samples, rate=1e6 / (scale * 30.0),
                       transitions=256, phases={"physics": PhaseSummary(6.0 * scale, 0.8, 1.9)})


def _record(history: History, repo: Path, run_id: str, scale: float, started: float) -> str:
    info = git_info(repo)
    assert info.available, info
    run = RunRecord(run_id, started, info.commit, info.commit_date_ms, info.branch, info.dirty,
                    "ci-box", "fp", META, {BENCH: _bench(scale, len(run_id))})
    history.record(run, {BENCH: {"code": "def test_batch(perfgate): ..."}})
    return info.commit


@pytest.fixture(scope="module")
def asv_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    repo = tmp_path_factory.mktemp("proj")
    _run(["git", "init", "-q", "-b", "main", str(repo)], repo)
    (repo / "asv.conf.json").write_text(
        '{\n  // asv accepts comments; so must we\n  "version": 1, "project": "demo",\n'
        '  "repo": ".", "branches": ["main"], "environment_type": "existing",\n'
        '  "pythons": ["same"], "results_dir": "asv/results", "html_dir": "asv/html",\n}\n')
    (repo / ".gitignore").write_text("asv/\n")
    commits = []
    for i, scale in enumerate((1.0, 1.3)):
        (repo / "step.py").write_text(f"SLOWDOWN = {scale}\n")
        _run([*GIT, "add", "-A"], repo)
        assert _run([*GIT, "commit", "-q", "-m", f"c{i}"], repo).returncode == 0
        results = default_results_dir(repo)
        commits.append(_record(History(results, "ci-box"), repo, f"run{i}", scale, 1000.0 + i))
    return repo, commits[0], commits[1]


def test_results_dir_comes_from_asv_conf(asv_project: tuple[Path, str, str]) -> None:
    repo, c1, _ = asv_project
    results = default_results_dir(repo)
    assert results == (repo / "asv" / "results").resolve()
    data = json.loads((results / "ci-box" / f"{c1[:8]}-virtualenv-py3.11.json").read_text())
    assert data["params"] == {"machine": "ci-box", "os": "Linux", "arch": "x86_64",
                              "cpu": "Test CPU", "num_cpu": "2", "ram": "8GiB",
                              "python": "3.11"}
    assert data["results"][ASV_NAME][3] == 1000000  # started_at in ms


@pytest.mark.slow  # runs asv in a subprocess
def test_asv_compare_shows_slower_commit_as_worse(asv_project: tuple[Path, str, str]) -> None:
    repo, c1, c2 = asv_project
    proc = _run([sys.executable, "-m", "asv", "compare", c1, c2, "--machine", "ci-box",
                 "--config", str(repo / "asv.conf.json")], repo)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split("|")[-2].strip(): line for line in proc.stdout.splitlines()
             if line.count("|") >= 5}
    gated = lines[ASV_NAME]
    assert gated.split("|")[1].strip() == "+", proc.stdout  # worse: 30% more s per env-step
    assert "1.3" in gated.split("|")[4], proc.stdout
    assert "μs" in gated or "us" in gated.split("|")[2], proc.stdout  # ~30 us, not minutes
    assert lines[PHASE].split("|")[1].strip() == "+", proc.stdout  # a phase slower: worse
    assert "ms" in lines[PHASE].split("|")[2], proc.stdout
    assert not any("steps_per_s" in name for name in lines), proc.stdout  # not exported
    assert "Error" not in proc.stderr and "Skipping" not in proc.stderr, proc.stderr


@pytest.mark.slow  # runs asv in a subprocess
def test_asv_publish_builds_graphs_for_our_benchmarks(asv_project: tuple[Path, str, str]) -> None:
    repo, _c1, _c2 = asv_project
    results = default_results_dir(repo)  # our lock files sit among asv's: asv must skip them
    assert (results / ".benchmarks.json.lock").is_file()
    assert (results / "ci-box" / "perfgate" / ".asv.lock").is_file()
    proc = _run([sys.executable, "-m", "asv", "publish", "--no-pull",
                 "--config", str(repo / "asv.conf.json")], repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Couldn't find" not in proc.stdout + proc.stderr
    index = json.loads((repo / "asv" / "html" / "index.json").read_text())
    assert index["benchmarks"][ASV_NAME]["unit"] == "seconds"
    assert index["benchmarks"][PHASE]["unit"] == "seconds"
    assert not any("steps_per_s" in name for name in index["benchmarks"])
    assert set(index["params"]) >= {"machine", "python", "branch"}
    assert "run_id" not in index["params"] and "governor" not in index["params"]
    graphs = [p for p in (repo / "asv" / "html" / "graphs").rglob("*.json")
              if p.name == f"{ASV_NAME}.json" and "summary" not in p.parts]
    assert graphs, "asv publish drew no graph for the gated benchmark"
    points = json.loads(graphs[0].read_text())
    values = [p[1] for p in points]
    assert len(values) == 2 and values[1] > values[0] * 1.25  # higher = slower, as asv expects
