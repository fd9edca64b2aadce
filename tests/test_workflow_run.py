"""The perf workflow's own `run:` steps, executed locally as a runner would, against a scratch
git repository with a tiny perf suite: pass, regression and infrastructure error, for the
pull-request job and the default-branch job.

What is real: every `run:` script of .github/workflows/perfgate.yml (parsed with PyYAML,
`${{ }}` expressions evaluated from a context built here), bash with Actions' `shell: bash`
flags, the runner's file contract (GITHUB_OUTPUT, GITHUB_ENV, GITHUB_STEP_SUMMARY, ...),
`if:` conditions, pytest --perfgate (history and A/B mode) with real timing, git, perfgate
check and report. What is simulated (tests/workflow_sim.py): the steps that only `uses:` an action
(actions/checkout: a full clone of the scratch origin at the ref; actions/upload-artifact:
a copy of `path`), the matrix (one leg), the concurrency group (not enforced), and the
runner's `.env` file (PERFGATE_ENV_PYTHON: this interpreter, PYTHONPATH: this checkout).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from workflow_sim import GIT, WORKFLOW, Expr, Job, condition, run_job

# --- the scratch project ---------------------------------------------------------------------

# The load guard is off (a 1000-core limit): the helpers sharing this machine keep it busy,
# and this test is about the workflow's plumbing (the guard: tests/test_timing.py).
INI = """[pytest]
pythonpath = .
perfgate_windows = 6
perfgate_window_time = 0.1
perfgate_threshold = 30%
perfgate_load_limit = 1000
perfgate_ab_turns = 8
perfgate_ab_turn_time = 0.05
"""
LIB = "WORK = {work}\n\n\ndef step():\n{body}    return sum(range(3000 * WORK))\n"
PERF = ("import mylib\n\n\n"
        "def test_walk(perfgate):\n"
        "    perfgate.measure(mylib.step, transitions=64)\n")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def commit(repo: Path, message: str, work: int = 1, crash: bool = False) -> str:
    body = "    raise RuntimeError('the workload broke')\n" if crash else ""
    (repo / "mylib.py").write_text(LIB.format(work=work, body=body))
    (repo / "notes.txt").write_text(message + "\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, Path]:
    """(origin bare repo, a developer clone) holding the tiny suite at v0.1 and one commit."""
    origin, dev = tmp_path / "origin.git", tmp_path / "dev"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(dev)], check=True,
                   capture_output=True)
    (dev / "perf").mkdir()
    (dev / "perf" / "test_perf_walk.py").write_text(PERF)
    (dev / "pytest.ini").write_text(INI)
    (dev / ".gitignore").write_text("__pycache__/\n")
    commit(dev, "v0.1")
    _git(dev, "tag", "v0.1")
    commit(dev, "C1")
    _git(dev, "push", "-q", "origin", "main", "--tags")
    return origin, dev


def _errors(job: Job, title: str) -> list[str]:
    return [a for a in job.annotations if a.startswith("::error") and f"title={title}" in a]


TEST_LINE = "line=4"  # `def test_walk` in PERF


@pytest.mark.slow  # real A/B runs (two side processes each), ~30 s
def test_pull_request_job_pass_regression_infrastructure(scratch: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    origin, dev = scratch
    base = _git(dev, "rev-parse", "HEAD")
    heads = {}
    for name, work, crash in [("same", 1, False), ("slow", 8, False), ("crash", 1, True)]:
        _git(dev, "switch", "-q", "-c", name, "main")
        heads[name] = commit(dev, f"PR {name}", work, crash)
        _git(dev, "push", "-q", "origin", name)
    _git(dev, "switch", "-q", "main")
    jobs = {}
    for number, (name, head) in enumerate(heads.items(), 1):
        event = {"pull_request": {"number": number, "head": {"sha": head},
                                  "base": {"sha": base, "ref": "main"}}}
        jobs[name] = run_job("pull-request", "pull_request", event, head, origin,
                             tmp_path / "runner", "perf-epyc")
        assert run_job("default-branch", "pull_request", event, head, origin,
                       tmp_path / "runner", "perf-epyc").steps == []  # not on PRs

    ok = jobs["same"]
    assert not ok.failed, [s["out"] for s in ok.steps if s["outcome"] == "failure"]
    assert ok.step("gate")["code"] == 0 and not _errors(ok, "perfgate")
    assert (f"## perfgate: perf-epyc: PR vs merge base {base[:10]}: passed, nothing "
            "failed: ") in ok.summary
    assert (ok.artifacts / "perfgate-pr-perf-epyc" / "pr" / "report.json").is_file()

    slow = jobs["slow"]
    gate = slow.step("gate")
    assert gate["code"] == 1 and slow.failed, gate["out"]
    errs = _errors(slow, "perfgate REGRESSION")
    assert len(errs) == 1, slow.annotations
    err = errs[0]
    assert err.startswith(f"::error file=perf/test_perf_walk.py,{TEST_LINE},title=perfgate "
                          "REGRESSION (perf-epyc%3A PR vs merge base")
    assert "FAILED: 1 benchmark(s) REGRESSION" in slow.summary
    assert "| perf.test_perf_walk.test_walk |" in slow.summary

    crash = jobs["crash"]
    gate = crash.step("gate")
    assert gate["code"] == 3, gate["out"]  # a crashed side: infrastructure, not a verdict
    assert _errors(crash, "perfgate infrastructure error")
    assert not _errors(crash, "perfgate REGRESSION") and "REGRESSION" not in crash.summary
    assert "INFRASTRUCTURE ERROR: not judged" in crash.summary


@pytest.mark.slow  # real history runs, A/B runs against the anchor, git pushes, ~70 s
def test_default_branch_job_history_anchor_and_report(scratch: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    origin, dev = scratch
    runner = tmp_path / "runner"

    def push(message: str | None = None, work: int = 1) -> tuple[str, Job]:
        sha = commit(dev, message, work) if message else _git(dev, "rev-parse", "HEAD")
        _git(dev, "push", "-q", "origin", "main")
        return sha, run_job("default-branch", "push", {"after": sha}, sha, origin, runner,
                            "perf-xeon")

    # 1. a machine with no history: recorded, but NOT GATED is an infrastructure failure
    c1, first = push()
    assert "does not exist yet" in " ".join(first.annotations)
    assert first.step("gate_history")["code"] == 3
    assert "history: INFRASTRUCTURE ERROR: not judged" in first.summary
    assert "no baseline" in first.step("gate_history")["out"]
    assert first.step("gate_anchor")["code"] == 0  # anchor v0.1: same code
    assert first.step("History report (plots into the artifact, a summary into the job page)"
                      )["outcome"] == "success"
    _git(dev, "fetch", "-q", "origin")
    runs = _git(dev, "ls-tree", "-r", "--name-only", "origin/perfgate-history/perf-xeon")
    assert "results/perf-xeon/machine.json" in runs and ".gitignore" in runs

    # 2. seed: two more runs of this commit, nothing gated
    seed = run_job("default-branch", "workflow_dispatch", {}, c1, origin, runner, "perf-xeon",
                   {"seed_runs": "2", "anchor": ""})
    assert not seed.failed, [s["out"][-3000:] for s in seed.steps if s["outcome"] == "failure"]
    assert "seeded 2 run(s)" in seed.summary
    assert all(s["id"] not in ("history", "gate_history") for s in seed.steps)

    # 3. the next commit, same speed: judged against the seeded runs, passes; report written
    _, ok = push("C2")
    assert not ok.failed, [s["out"][-2000:] for s in ok.steps if s["outcome"] == "failure"]
    assert ok.step("gate_history")["code"] == 0 and ok.step("gate_anchor")["code"] == 0
    assert "## perfgate: perf-xeon: history: passed" in ok.summary
    assert "## perfgate: perf-xeon: vs anchor v0.1: passed" in ok.summary
    report = ok.artifacts / "perfgate-perf-xeon" / "report"
    assert (report / "report.md").is_file() and list(report.glob("*.png"))
    assert "![" not in (report / "summary.md").read_text()  # no images in the job summary

    # 4. an 8x slower commit: history and the anchor both say REGRESSION, at the test's line
    _, slow = push("C3 slow", work=8)
    for gate in ("gate_history", "gate_anchor"):
        assert slow.step(gate)["code"] == 1, slow.step(gate)["out"]
    errs = _errors(slow, "perfgate REGRESSION")
    assert len(errs) == 2 and all(e.startswith(f"::error file=perf/test_perf_walk.py,{TEST_LINE},")
                                  for e in errs)
    assert "history: FAILED: 1 benchmark(s) REGRESSION" in slow.summary
    assert "vs anchor v0.1: FAILED" in slow.summary
    # 5. a workload that raises: no verdict at all, so both gates say infrastructure error
    commit(dev, "C4 broken", crash=True)
    _, broken = push()
    for gate in ("gate_history", "gate_anchor"):
        assert broken.step(gate)["code"] == 3, broken.step(gate)["out"]
    assert len(_errors(broken, "perfgate infrastructure error")) == 2
    assert not _errors(broken, "perfgate REGRESSION") and "REGRESSION" not in broken.summary
    assert "nothing recorded" in broken.step("Save the history branch")["out"]

    _git(dev, "fetch", "-q", "origin")
    log = _git(dev, "log", "--format=%s", "origin/perfgate-history/perf-xeon")
    assert len(log.splitlines()) == 4  # first push, seed, C2, C3: every run kept


def test_the_expression_evaluator_follows_githubs_rules() -> None:
    ctx: dict[str, Any] = {"steps": {"a": {"outputs": {"x": "1"}}}, "inputs": {},
                           "env": {"E": "e"}, "_failed": False}
    assert Expr("steps.b.outputs.x != ''", ctx).value() is False  # null equals ''
    assert Expr("steps.a.outputs.x == 1", ctx).value() is True  # '1' equals 1
    assert Expr("inputs.anchor || env.E", ctx).value() == "e"  # || yields a value
    assert Expr("'ABC' == 'abc' && !false", ctx).value() is True
    assert condition("steps.a.outputs.x == '1'", {**ctx, "_failed": True}) is False  # success()
    assert condition("${{ !cancelled() && steps.a.outputs.x == '1' }}", {**ctx, "_failed": True})
    with pytest.raises(AssertionError, match="not simulated"):
        Expr("hashFiles('x')", ctx).value()


def test_the_workflow_keeps_its_security_and_isolation_promises() -> None:
    """README "CI on self-hosted runners": pull requests read only and push nothing; only the
    default-branch job writes history, one job at a time per machine label."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf.get("on", wf.get(True))  # PyYAML reads the key `on` as true
    assert "pull_request_target" not in on and wf["permissions"] == {"contents": "read"}
    pr, push = wf["jobs"]["pull-request"], wf["jobs"]["default-branch"]
    assert "permissions" not in pr  # the workflow's read-only default
    checkout = pr["steps"][0]
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"]["persist-credentials"] is False
    assert push["permissions"] == {"contents": "write"}
    assert push["concurrency"] == {"group": "perfgate-history-${{ matrix.machine }}",
                                   "cancel-in-progress": False}
    for job in (pr, push):
        assert job["env"]["PERFGATE_MACHINE"] == "${{ matrix.machine }}"
        assert "${{ matrix.machine }}" in job["runs-on"] and "perf" in job["runs-on"]
        assert "${{ matrix.machine }}" in job["concurrency"]["group"]
        for step in job["steps"]:  # untrusted values reach scripts through env, not ${{ }}
            assert "github.event" not in step.get("run", ""), step["name"]
            assert "inputs." not in step.get("run", ""), step["name"]
