"""asv's own `publish` and `compare` take the per-phase counts series, "(other)" included.

A temporary git repo with two commits whose counts results carry a phase breakdown (the
second has phase "b" 20% costlier); the real asv reads the results dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.history.files import default_results_dir
from pytest_perfgate.history.store import History
from pytest_perfgate.history.vcs import git_info
from pytest_perfgate.modes.counts.counting import counts_result
from pytest_perfgate.modes.counts.runner import Counts

pytest.importorskip("asv")
pytestmark = pytest.mark.slow  # runs asv in subprocesses
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
META = {"machine": "ci-box", "cpu_model": "Test CPU", "cpu_logical": 2, "mem_total": 2 ** 33,
        "system": "Linux", "kernel": "6.1", "arch": "x86_64", "python": "3.11.7"}


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_asv_publishes_and_compares_the_phase_series(tmp_path: Path) -> None:
    repo = tmp_path
    _run(["git", "init", "-q", "-b", "main", str(repo)], repo)
    (repo / "asv.conf.json").write_text(
        '{"version": 1, "project": "demo", "repo": ".", "branches": ["main"],\n'
        ' "environment_type": "existing", "pythons": ["same"],\n'
        ' "results_dir": "asv/results", "html_dir": "asv/html"}\n')
    (repo / ".gitignore").write_text("asv/\n")
    commits = []
    for i, b in enumerate((300, 360)):
        (repo / "step.py").write_text(f"B = {b}\n")
        _run([*GIT, "add", "-A"], repo)
        assert _run([*GIT, "commit", "-q", "-m", f"c{i}"], repo).returncode == 0
        per_call = {"(other)": (20,), "a": (100,), "b": (b,)}
        res = counts_result(Counts("walk", 2, (sum(v[0] for v in per_call.values()),), (999,),
                                   phase_ir=per_call), "walk")
        info = git_info(repo)
        run = RunRecord(f"run{i}", 1000.0 + i, info.commit, info.commit_date_ms, info.branch,
                        info.dirty, "ci-box", "fp", META, {res.name: res})
        History(default_results_dir(repo), "ci-box").record(run, {})
        commits.append(info.commit)
    conf = ["--config", str(repo / "asv.conf.json")]
    proc = _run([sys.executable, "-m", "asv", "publish", "--no-pull", *conf], repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    index = json.loads((repo / "asv" / "html" / "index.json").read_text())
    for phase in ("(other)", "a", "b"):
        assert index["benchmarks"][f"walk.counts.phase.{phase}"]["unit"] == \
            "instructions/env-step"
    graphs = {p.name: json.loads(p.read_text())
              for p in (repo / "asv" / "html" / "graphs").rglob("walk.counts.phase.*.json")
              if "summary" not in p.parts}
    assert [pt[1] for pt in graphs["walk.counts.phase.b.json"]] == [150, 180]
    assert [pt[1] for pt in graphs["walk.counts.phase.(other).json"]] == [10, 10]
    proc = _run([sys.executable, "-m", "asv", "compare", *commits, "--machine", "ci-box",
                 *conf], repo)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[-2].strip(): line.split("|") for line in proc.stdout.splitlines()
            if line.count("|") >= 5}
    assert rows["walk.counts.phase.b"][1].strip() == "+", proc.stdout  # more: worse
    assert "1.2" in rows["walk.counts.phase.b"][4], proc.stdout
