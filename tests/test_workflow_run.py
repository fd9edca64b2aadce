"""The perf workflow's own `run:` steps, executed locally as a runner would, against a scratch
git repository with a tiny perf suite: pass, regression and infrastructure error, for the
pull-request job and the default-branch job; the save-history job that pushes what the perf
machine recorded (retries against a moving branch, two writers racing, a conflict, no git
identity); and what a self-hosted runner reused by a pull request and then a push must not
carry from one to the other.

What is real: every `run:` script of .github/workflows/perfgate.yml (parsed with PyYAML,
`${{ }}` expressions evaluated from a context built here), bash with Actions' `shell: bash`
flags, the runner's file contract (GITHUB_OUTPUT, GITHUB_ENV, GITHUB_STEP_SUMMARY, ...),
`if:` conditions, pytest --perfgate (history and A/B mode, bisect probes: real processes,
timed on the scratch project's fake clock, so verdicts are exact), git (pushes to
a scratch origin under GITHUB_SERVER_URL=file://...), each job's venv, the cleanup steps,
perfgate check and report. What is simulated (tests/workflow_sim.py): the steps that only
`uses:` an action (actions/checkout: a clone of the scratch origin at the ref, reusing a
repository it finds, as the action does; upload/download-artifact: copies), the matrix (one
leg), the concurrency group (not enforced), an environment's required reviewers (a job waits
unless approved), a self-hosted runner (its reused workspace, in a PID and mount namespace
of its own) and its `.env` file (PERFGATE_BASE_PYTHON: this interpreter; PYTHONPATH: this
checkout and this venv's packages, so no job downloads torch; pip offline; a venv made without
ensurepip's copy of pip, which the jobs would never run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import need_tool
from workflow_sim import (
    BRANCH,
    GIT,
    ROOT,
    WORKFLOW,
    Expr,
    Job,
    Machine,
    commit,
    condition,
    git,
    history,
    run_job,
    sandbox_unusable,
)

# --- the runners the scratch project's jobs run on (the project: tests/workflow_sim.py) -----

@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Machine]:
    """One self-hosted perf runner, reused by every job of the test."""
    machine = Machine(tmp_path / "runner", namespace=Machine.can_namespace())
    yield machine
    machine.close()


def hosted(tmp_path: Path) -> Machine:
    """A fresh GitHub-hosted runner."""
    n = len(list(tmp_path.glob("hosted-*")))
    return Machine(tmp_path / f"hosted-{n}")


def _failures(job: Job) -> list[str]:
    return [s["out"][-3000:] for s in job.steps if s["outcome"] == "failure"]


def _errors(job: Job, title: str) -> list[str]:
    return [a for a in job.annotations if a.startswith("::error") and f"title={title}" in a]


TEST_LINE = "line=4"  # `def test_walk` in workflow_sim.PERF


def _pr_event(number: int, head: str, base: str, fork: str | None = None) -> dict[str, Any]:
    repo = {"full_name": fork or "acme/scratch"}
    return {"pull_request": {"number": number, "head": {"sha": head, "repo": repo},
                             "base": {"sha": base, "ref": "main"}}}


def save(job: Job, sha: str, origin: Path, tmp_path: Path, machine: str = "perf-xeon") -> Job:
    """The save-history leg after a perf job at `sha` (the same workflow run's commit), on
    a fresh hosted runner."""
    return run_job("save-history", "push", {}, sha, origin, hosted(tmp_path), machine,
                   artifacts_from=job.artifacts)


@pytest.mark.slow  # three jobs, each with its venv and an A/B run (fake clock), ~20 s
def test_pull_request_job_pass_regression_infrastructure(scratch: tuple[Path, Path],
                                                         runner: Machine) -> None:
    if why := sandbox_unusable():
        need_tool(why)
    origin, dev = scratch
    base = git(dev, "rev-parse", "HEAD")
    heads = {}
    for name, work, crash in [("same", 1, False), ("slow", 8, False), ("crash", 1, True)]:
        git(dev, "switch", "-q", "-c", name, "main")
        heads[name] = commit(dev, f"PR {name}", work, crash)
        git(dev, "push", "-q", "origin", name)
    git(dev, "switch", "-q", "main")
    jobs = {}
    for number, (name, head) in enumerate(heads.items(), 1):
        event = _pr_event(number, head, base)
        jobs[name] = run_job("pull-request", "pull_request", event, head, origin, runner,
                             "perf-epyc")
        for other in ("default-branch", "save-history"):  # not on PRs
            assert run_job(other, "pull_request", event, head, origin, runner,
                           "perf-epyc").steps == []

    ok = jobs["same"]
    assert not ok.failed, _failures(ok)
    assert ok.step("gate")["code"] == 0 and not _errors(ok, "perfgate")
    said = (ok.artifacts / "perfgate-pr-perf-epyc" / "pr" / "comment.json").read_text()
    assert json.loads(said) == {"pull_request": 1, "head_sha": heads["same"],
                                "machine": "perf-epyc", "gate": 0}  # for the comment
    assert (f"## perfgate: perf-epyc: PR vs merge base {base[:10]}: passed, nothing "
            "failed: ") in ok.summary
    assert (ok.artifacts / "perfgate-pr-perf-epyc" / "pr" / "report.json").is_file()
    # the scratch project's fake clock: 64 transitions per 2 ms step on both sides, exactly
    assert "| perf.test_perf_walk.test_walk | 32.0k | 32.0k | 1.000 [1.000-1.000] | 1 | OK |" \
        in ok.summary

    slow = jobs["slow"]
    gate = slow.step("gate")
    assert gate["code"] == 1 and slow.failed, gate["out"]
    errs = _errors(slow, "perfgate REGRESSION")
    assert len(errs) == 1, slow.annotations
    err = errs[0]
    assert err.startswith(f"::error file=perf/test_perf_walk.py,{TEST_LINE},title=perfgate "
                          "REGRESSION (perf-epyc%3A PR vs merge base")
    assert "FAILED: 1 benchmark(s) REGRESSION" in slow.summary
    # 8x the work: exactly 1/8 the throughput, on the first pair and the fresh one
    assert ("| perf.test_perf_walk.test_walk | 4.00k | 32.0k | 0.125 [0.125-0.125] | 0 | "
            "REGRESSION |") in slow.summary
    assert "(the pairs: 0.125 (REGRESSION), 0.125 (REGRESSION))" in slow.summary

    crash = jobs["crash"]
    gate = crash.step("gate")
    assert gate["code"] == 3, gate["out"]  # a crashed side: infrastructure, not a verdict
    assert _errors(crash, "perfgate infrastructure error")
    assert not _errors(crash, "perfgate REGRESSION") and "REGRESSION" not in crash.summary
    assert "INFRASTRUCTURE ERROR: not judged" in crash.summary


@pytest.mark.slow  # five jobs: venvs, history and anchor runs (fake clock), plots, ~35 s
def test_default_branch_job_history_anchor_and_report(scratch: tuple[Path, Path],
                                                      runner: Machine, tmp_path: Path) -> None:
    origin, dev = scratch

    def push(message: str | None = None, work: int = 1) -> tuple[str, Job]:
        sha = commit(dev, message, work) if message else git(dev, "rev-parse", "HEAD")
        git(dev, "push", "-q", "origin", "main")
        job = run_job("default-branch", "push", {"after": sha}, sha, origin, runner,
                      "perf-xeon")
        saved = save(job, sha, origin, tmp_path)
        assert not saved.failed, _failures(saved)
        job.steps += saved.steps
        return sha, job

    # 1. a machine with no history: recorded, but NOT GATED is an infrastructure failure
    c1, first = push()
    assert "does not exist yet" in " ".join(first.annotations)
    assert first.step("gate_history")["code"] == 3
    assert "history: INFRASTRUCTURE ERROR: not judged" in first.summary
    assert "no baseline" in first.step("gate_history")["out"]
    assert first.step("gate_anchor")["code"] == 0  # anchor v0.1: same code
    assert first.step("History report (plots into the artifact, a summary into the job page)"
                      )["outcome"] == "success"
    git(dev, "fetch", "-q", "origin")
    runs = git(dev, "ls-tree", "-r", "--name-only", "origin/perfgate-history/perf-xeon")
    assert "results/perf-xeon/machine.json" in runs and ".gitignore" in runs

    # 2. seed: two more runs of this commit, nothing gated
    seed = run_job("default-branch", "workflow_dispatch", {}, c1, origin, runner, "perf-xeon",
                   {"seed_runs": "2", "anchor": ""})
    assert not seed.failed, _failures(seed)
    assert not save(seed, c1, origin, tmp_path).failed
    assert "seeded 2 run(s)" in seed.summary
    assert all(s["id"] not in ("history", "gate_history") for s in seed.steps)

    # 3. the next commit, same speed: judged against the seeded runs, passes; report written
    _, ok = push("C2")
    assert not ok.failed, _failures(ok)
    assert ok.step("gate_history")["code"] == 0 and ok.step("gate_anchor")["code"] == 0
    assert "## perfgate: perf-xeon: history: passed" in ok.summary
    assert "## perfgate: perf-xeon: vs anchor v0.1: passed" in ok.summary
    assert "Find the commit" not in ok.summary  # only a failed anchor gate names a range
    # the scratch project's fake clock: the same work measures exactly the same, both gates
    assert ok.summary.count("| perf.test_perf_walk.test_walk | 32.0k | 32.0k | 1.000 "
                            "[1.000-1.000] |") == 2, ok.summary
    report = ok.artifacts / "perfgate-perf-xeon" / "report"
    assert (report / "report.md").is_file() and list(report.glob("*.png"))
    assert "![" not in (report / "summary.md").read_text()  # no images in the job summary

    # 4. an 8x slower commit: history and the anchor both say REGRESSION, at the test's line
    c3, slow = push("C3 slow", work=8)
    for gate in ("gate_history", "gate_anchor"):
        assert slow.step(gate)["code"] == 1, slow.step(gate)["out"]
    v01 = git(dev, "rev-parse", "v0.1")
    assert f"\n```\nperfgate bisect {v01[:12]} {c3[:12]} perf\n```\n" in slow.summary
    assert (f"run this workflow by hand (Actions > perfgate > Run workflow) with bisect_good "
            f"{v01[:12]}, bisect_bad {c3[:12]}, bisect_machine perf-xeon: its bisect job "
            "writes the culprit to its summary (docs/bisect.md).") in slow.summary
    errs = _errors(slow, "perfgate REGRESSION")
    assert len(errs) == 2 and all(e.startswith(f"::error file=perf/test_perf_walk.py,{TEST_LINE},")
                                  for e in errs)
    assert "history: FAILED: 1 benchmark(s) REGRESSION" in slow.summary
    assert slow.summary.count("| perf.test_perf_walk.test_walk | 4.00k | 32.0k | 0.125 "
                              "[0.125-0.125] | 0 | REGRESSION |") == 2, slow.summary  # exactly 1/8
    assert ("throughput fell 87.5% (threshold 30%), p=0 against 4 baseline run(s), run-to-run "
            "spread 0.0%") in slow.summary  # the first push's run, the two seeded, C2's
    assert "vs anchor v0.1: FAILED" in slow.summary
    # 5. a workload that raises: no verdict at all, so both gates say infrastructure error
    commit(dev, "C4 broken", crash=True)
    _, broken = push()
    for gate in ("gate_history", "gate_anchor"):
        assert broken.step(gate)["code"] == 3, broken.step(gate)["out"]
    assert len(_errors(broken, "perfgate infrastructure error")) == 2
    assert not _errors(broken, "perfgate REGRESSION") and "REGRESSION" not in broken.summary
    assert "nothing recorded" in broken.step("Commit the run for save-history")["out"]
    assert "nothing to save" in broken.steps[-1]["out"]

    git(dev, "fetch", "-q", "origin")
    log = git(dev, "log", "--format=%s", "origin/perfgate-history/perf-xeon")
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


    assert Expr("format('refs/heads/{0}', github.b)", {"github": {"b": "main"}}).value() \
        == "refs/heads/main"


# --- the history push, on its own: runs made by hand as the perf job makes them ---------------


def _run_artifact(origin: Path, base: str, files: dict[str, str], where: Path) -> Path:
    """What the perf job uploads: the run committed on `base` as a bundle, and `base`."""
    repo = where / "perf-machine"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git(repo, "fetch", "-q", str(origin), BRANCH)
    git(repo, "checkout", "-q", "--detach", base)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"run {sorted(files)}")
    art = where / "artifacts" / "perfgate-history-run-perf-xeon"
    art.mkdir(parents=True)
    git(repo, "bundle", "create", "-q", str(art / "run.bundle"), f"{base}..HEAD")
    (art / "base").write_text(base + "\n")
    (art / "machine").write_text("perf-xeon\n")
    return where / "artifacts"


MOVE_ONCE = """#!/bin/sh
# Another writer lands between the job's fetch and its push, once.
[ -e "$GIT_DIR/moved" ] && exit 0
touch "$GIT_DIR/moved"
unset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
export GIT_AUTHOR_NAME=p GIT_AUTHOR_EMAIL=p@example.com GIT_COMMITTER_NAME=p \\
  GIT_COMMITTER_EMAIL=p@example.com
tip=$(git rev-parse refs/heads/{branch})
blob=$(echo "accepted" | git hash-object -w --stdin)
tree=$( (git ls-tree "$tip"; printf '100644 blob %s\\taccepted.txt\\n' "$blob") | git mktree)
new=$(git commit-tree -p "$tip" -m "a person's perfgate accept" "$tree")
git update-ref refs/heads/{branch} "$new" "$tip"
"""


def test_save_history_retries_a_branch_that_moved_without_a_git_identity(
        scratch: tuple[Path, Path], tmp_path: Path) -> None:
    origin, dev = scratch
    base = history(dev, {"results/perf-xeon/machine.json": "{}\n"})
    art = _run_artifact(origin, base, {"results/perf-xeon/run-1.json": "1\n"}, tmp_path / "a")
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(MOVE_ONCE.replace("{branch}", BRANCH))
    hook.chmod(0o755)
    machine = hosted(tmp_path)
    bare = {"HOME": str(machine.home), "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.environ["PATH"]}
    no_identity = subprocess.run(["git", "var", "GIT_COMMITTER_IDENT"], env=bare,
                                 capture_output=True, text=True)
    assert no_identity.returncode != 0  # this runner has no identity of its own

    job = run_job("save-history", "push", {}, "0" * 40, origin, machine, "perf-xeon",
                  artifacts_from=art, workflow=_quick("5"))
    push = job.steps[-1]
    assert push["code"] == 0, push["out"]
    assert "the push was rejected" in push["out"] and "(try 2)" in push["out"]
    git(dev, "fetch", "-q", "origin")
    log = git(dev, "log", "--format=%s", f"origin/{BRANCH}")
    assert log.splitlines() == ["run ['results/perf-xeon/run-1.json']",
                                "a person's perfgate accept", "history"]
    assert git(dev, "show", f"origin/{BRANCH}:accepted.txt") == "accepted"  # nothing lost


# A slow server: the first push waits in its pre-receive hook (up to 60 s) until a second one
# arrives, so both writers fetched the branch before either lands, however the two jobs are
# scheduled; the ref update that comes second finds the branch moved and is rejected.
BOTH_FETCHED = """#!/bin/sh
if mkdir first-push 2>/dev/null; then
  n=0
  while [ ! -d second-push ] && [ "$n" -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
else
  mkdir second-push 2>/dev/null || true
fi
"""


def test_two_runs_racing_for_one_branch_both_land(scratch: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
    origin, dev = scratch
    base = history(dev, {"results/perf-xeon/machine.json": "{}\n"})
    arts = [_run_artifact(origin, base, {f"results/perf-xeon/run-{i}.json": f"{i}\n"},
                          tmp_path / f"r{i}") for i in (1, 2)]
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(BOTH_FETCHED)
    hook.chmod(0o755)
    jobs: dict[int, Job] = {}

    def one(i: int) -> None:
        jobs[i] = run_job("save-history", "push", {}, "0" * 40, origin, hosted(tmp_path / f"h{i}"),
                          "perf-xeon", artifacts_from=arts[i], workflow=_quick("5"))

    (tmp_path / "h0").mkdir()
    (tmp_path / "h1").mkdir()
    threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    outs = [jobs[i].steps[-1] for i in (0, 1)]
    assert all(o["code"] == 0 for o in outs), [o["out"] for o in outs]
    assert any("(try 2)" in o["out"] for o in outs), [o["out"] for o in outs]
    git(dev, "fetch", "-q", "origin")
    files = git(dev, "ls-tree", "-r", "--name-only", f"origin/{BRANCH}").splitlines()
    assert {"results/perf-xeon/run-1.json", "results/perf-xeon/run-2.json"} <= set(files)


def test_a_run_that_conflicts_is_aborted_reported_and_kept(scratch: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    origin, dev = scratch
    base = history(dev, {"results/benchmarks.json": "base\n"})
    art = _run_artifact(origin, base, {"results/benchmarks.json": "the run's\n"}, tmp_path / "a")
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", "-b", BRANCH, str(origin), str(other)], check=True)
    (other / "results" / "benchmarks.json").write_text("someone else's\n")
    git(other, "commit", "-qam", "edited meanwhile")
    git(other, "push", "-q", "origin", BRANCH)
    tip = git(other, "rev-parse", "HEAD")

    job = run_job("save-history", "push", {}, "0" * 40, origin, hosted(tmp_path), "perf-xeon",
                  artifacts_from=art)
    push = job.steps[-1]
    assert push["code"] == 3, push["out"]
    assert job.annotations == [
        "::error title=perfgate infrastructure error::history of perf-xeon not saved: the run "
        f"conflicts with {BRANCH} at {tip[:10]} (rebase aborted); the run is kept in the "
        "artifact perfgate-history-run-perf-xeon of run 4242 (docs/ci.md: pushing a kept run)"]
    assert git(other, "ls-remote", "origin", BRANCH).split()[0] == tip  # nothing pushed
    assert not list((job.artifacts.parent.parent.parent / "_work" / "_temp" / "history" / ".git")
                    .glob("rebase-*"))  # aborted, not left mid-rebase


# --- who may run what -------------------------------------------------------------------------

def test_a_fork_pull_request_waits_for_a_reviewer(scratch: tuple[Path, Path],
                                                 runner: Machine) -> None:
    origin, dev = scratch
    head = git(dev, "rev-parse", "HEAD")
    fork = run_job("pull-request", "pull_request", _pr_event(7, head, head, "mallory/scratch"),
                   head, origin, runner, "perf-epyc")
    assert fork.waiting_for == "perfgate-fork-pr" and fork.steps == []
    assert list(runner.workspace.iterdir()) == []  # nothing of the fork reached the machine
    wf = yaml.safe_load(WORKFLOW.read_text())
    env = wf["jobs"]["pull-request"]["environment"]
    ctx = {"github": {"repository": "acme/scratch", "event": _pr_event(8, head, head)}}
    assert Expr(env.strip()[3:-2], ctx).value() == "perfgate-pr"  # the repository's own PRs


def test_a_dispatch_from_a_feature_branch_is_refused(scratch: tuple[Path, Path],
                                                     runner: Machine, tmp_path: Path) -> None:
    origin, dev = scratch
    head = git(dev, "rev-parse", "HEAD")
    job = run_job("default-branch", "workflow_dispatch", {}, head, origin, runner, "perf-xeon",
                  {"seed_runs": "3", "anchor": ""}, ref="refs/heads/feature")
    check = job.step("Check the inputs")
    assert check["code"] == 2
    assert job.annotations == [
        "::error title=perfgate usage error::workflow_dispatch writes history, so it runs from "
        "the default branch only; this run is on refs/heads/feature: choose 'main' under 'Use "
        "workflow from'"]
    assert [s["name"] for s in job.steps] == [  # nothing measured, nothing to upload
        "Check the inputs", "Upload the run for save-history", "Upload results and plots",
        "Clean the runner"]
    assert run_job("save-history", "workflow_dispatch", {}, head, origin, hosted(tmp_path),
                   "perf-xeon", ref="refs/heads/feature").steps == []


@pytest.mark.parametrize("seed_runs", ["abc", "0", "-1", "3 ", "1e3"])
def test_seed_runs_must_be_a_count(scratch: tuple[Path, Path], runner: Machine,
                                   seed_runs: str) -> None:
    origin, dev = scratch
    head = git(dev, "rev-parse", "HEAD")
    job = run_job("default-branch", "workflow_dispatch", {}, head, origin, runner, "perf-xeon",
                  {"seed_runs": seed_runs, "anchor": ""})
    assert job.step("Check the inputs")["code"] == 2
    assert job.annotations == [
        f"::error title=perfgate usage error::seed_runs is '{seed_runs}', not a count of runs: "
        "give a whole number from 1 (e.g. 3), or leave it empty for a normal run"]



def test_the_history_job_measures_only_the_default_branchs_commits(
        scratch: tuple[Path, Path], runner: Machine) -> None:
    """A commit that is on no branch but an unmerged one never reaches the Python
    environment (its build backend) or pytest (its conftest.py) on the trusted pool."""
    origin, dev = scratch
    git(dev, "switch", "-q", "-c", "unmerged")
    head = commit(dev, "not on main")
    git(dev, "push", "-q", "origin", "unmerged")
    git(dev, "switch", "-q", "main")
    job = run_job("default-branch", "push", {"after": head}, head, origin, runner, "perf-xeon")
    check = job.step("Check what is measured (the default branch's commits only)")
    assert check["code"] == 2, check["out"]
    assert _errors(job, "perfgate usage error") == [
        f"::error title=perfgate usage error::{head} is not on the default branch main: the "
        "history job measures only the default branch's commits; run it from 'main'"]
    assert "Python environment" not in [s["name"] for s in job.steps]


@pytest.mark.parametrize("anchor", ["--output=/tmp/x", "v1 v2", "a;b", "$(id)"])
def test_the_anchor_input_must_be_a_revision(scratch: tuple[Path, Path], runner: Machine,
                                             anchor: str) -> None:
    """Checked first, before anything runs; its ancestry of the default branch once the
    clone is there (tests/test_trust_workflow.py, an unmerged anchor)."""
    origin, dev = scratch
    head = git(dev, "rev-parse", "HEAD")
    job = run_job("default-branch", "workflow_dispatch", {}, head, origin, runner, "perf-xeon",
                  {"seed_runs": "", "anchor": anchor})
    assert job.step("Check the inputs")["code"] == 2
    assert job.annotations == [
        f"::error title=perfgate usage error::anchor is '{anchor}', not a revision: give a "
        "commit hash or tag of the default branch main (letters, digits and . _ / ~ ^ -, not "
        "starting with -), or leave it empty"]


# --- the manual bisect job ------------------------------------------------------------------

def _bisect_inputs(**given: str) -> dict[str, str]:
    return {"seed_runs": "", "anchor": "", "bisect_good": "", "bisect_bad": "",
            "bisect_tests": "", "bisect_machine": "perf-xeon", **given}


def test_the_bisect_job_runs_by_hand_only_and_alone() -> None:
    """Not on a push or a pull request; a dispatch with bisect_good runs it and neither
    history job (it writes no history); a dispatch without runs the history jobs only."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    jobs = wf["jobs"]

    def runs(job: str, event: str, inputs: dict[str, str] | None) -> bool:
        ctx = {"github": {"event_name": event, "ref": "refs/heads/main",
                          "event": {"repository": {"default_branch": "main"}}},
               "inputs": inputs or {}, "_failed": False}
        return condition(jobs[job]["if"], ctx)

    for event in ("push", "pull_request"):
        assert not runs("bisect", event, None)
    bisect = _bisect_inputs(bisect_good="v0.1")
    assert runs("bisect", "workflow_dispatch", bisect)
    assert not runs("default-branch", "workflow_dispatch", bisect)
    assert not runs("save-history", "workflow_dispatch", bisect)
    assert not runs("bisect", "workflow_dispatch", _bisect_inputs())
    assert runs("default-branch", "workflow_dispatch", _bisect_inputs())
    assert runs("default-branch", "push", None) and runs("save-history", "push", None)
    job = jobs["bisect"]
    assert job["permissions"] == {"contents": "read"} and "timeout-minutes" in job
    assert job["runs-on"] == ["self-hosted", "linux", "perf", "${{ inputs.bisect_machine }}"]
    cleans = [s for s in job["steps"] if s.get("name") == "Clean the runner"]
    assert len(cleans) == 2 and cleans[-1] is job["steps"][-1]
    assert cleans[-1]["if"] == "always()" and "if" not in cleans[0]
    assert all(c["run"] == jobs["pull-request"]["steps"][0]["run"] for c in cleans)
    install = next(s for s in job["steps"] if s.get("name") == "Python environment")
    assert install["run"] == next(s for s in jobs["pull-request"]["steps"]
                                  if s.get("name") == "Python environment")["run"]
    assert not any("history" in str(s.get("run", "")).lower() for s in job["steps"])


@pytest.mark.parametrize(("name", "value"), [
    ("bisect_good", "-x"), ("bisect_good", "v1;id"), ("bisect_good", "$(id)"),
    ("bisect_bad", "HEAD main"), ("bisect_bad", "a`b`"),
    ("bisect_tests", "perf;id"), ("bisect_tests", "perf -k $(id)")])
def test_the_bisect_job_refuses_a_bad_input(scratch: tuple[Path, Path], runner: Machine,
                                            name: str, value: str) -> None:
    origin, dev = scratch
    head = git(dev, "rev-parse", "HEAD")
    inputs = _bisect_inputs(**{"bisect_good": "v0.1", name: value})
    job = run_job("bisect", "workflow_dispatch", {}, head, origin, runner, "perf-xeon", inputs)
    assert job.step("Check the inputs")["code"] == 2
    (error,) = job.annotations
    if name == "bisect_tests":
        word = next(w for w in value.split() if not re.fullmatch(r"[\w./:=,+@%\[\]-]+", w))
        assert error == (
            f"::error title=perfgate usage error::bisect_tests holds '{word}': give test paths, "
            "-k EXPRESSION and -m MARKERS separated by spaces (letters, digits and . _ / : = , "
            "+ @ % - [ ]), e.g. perf/test_perf_mujoco.py -k humanoid")
    else:
        assert error == (
            f"::error title=perfgate usage error::{name} is '{value}', not a revision: give a "
            "commit hash, tag or branch (letters, digits and . _ / ~ ^ -, not starting with -)")
    assert [s["name"] for s in job.steps] == [  # nothing checked out, nothing measured
        "Check the inputs", "Upload the bisect log", "Clean the runner"]


@pytest.mark.parametrize(("tests", "says"), [
    ("perf --perfgate-ab-setup=touch", "bisect_tests holds '--perfgate-ab-setup=touch': only "
     "-k EXPRESSION and -m MARKERS may be given beside test paths, e.g. "
     "perf/test_perf_mujoco.py -k humanoid"),
    ("-p evil perf", "bisect_tests holds '-p': only -k EXPRESSION and -m MARKERS may be "
     "given beside test paths, e.g. perf/test_perf_mujoco.py -k humanoid"),
    ("perf -k --co", "bisect_tests holds '--co' after -k: only -k EXPRESSION and -m MARKERS "
     "may be given beside test paths, e.g. perf/test_perf_mujoco.py -k humanoid"),
    ("perf -m", "bisect_tests ends with -m: give its expression after it, e.g. -k humanoid"),
    ("perf -k walk -m slow perf/test_perf_walk.py::test_walk[a-1]", None),
])
def test_bisect_tests_takes_paths_and_k_and_m_only(scratch: tuple[Path, Path], runner: Machine,
                                                   tests: str, says: str | None) -> None:
    """Any other pytest option could run a command (--perfgate-ab-setup) or load code (-p)."""
    origin, dev = scratch
    head = git(dev, "rev-parse", "HEAD")
    job = run_job("bisect", "workflow_dispatch", {}, head, origin, runner, "perf-xeon",
                  _bisect_inputs(bisect_good="v0.1", bisect_tests=tests),
                  until="Check the inputs")
    check = job.step("Check the inputs")
    if says is None:
        assert check["code"] == 0 and not job.annotations, check["out"]
    else:
        assert check["code"] == 2
        assert job.annotations == [f"::error title=perfgate usage error::{says}"]


@pytest.mark.slow  # a bisection of four commits: five A/B probes (on the fake clock), ~15 s
def test_the_bisect_job_names_the_slow_commit_in_its_summary(scratch: tuple[Path, Path],
                                                             runner: Machine) -> None:
    if why := sandbox_unusable():
        need_tool(why)
    origin, dev = scratch
    slow = commit(dev, "C2 slow", work=6)
    head = commit(dev, "C3", work=6)  # still slow
    git(dev, "push", "-q", "origin", "main")
    job = run_job("bisect", "workflow_dispatch", {}, head, origin, runner, "perf-xeon",
                  _bisect_inputs(bisect_good="v0.1", bisect_tests="perf -k walk"))
    step = job.step("bisect")
    assert step["code"] == 0, step["out"][-3000:]
    assert "[probe 1/" in step["out"]
    assert job.summary.startswith(
        f"### perfgate bisect on perf-xeon: GOOD v0.1, BAD {head} (exit 0)\n\n```\n"
        "perfgate bisect: 1 step found between GOOD v0.1")
    assert f"first bad commit: {slow[:10]} \"C2 slow\"" in job.summary
    # the workflow's own bisect settings, on the scratch project's fake clock: exactly 6x
    assert ("its own step against its parent " in job.summary and "test_walk throughput "
            "ratio 0.167 [0.167-0.167], REGRESSION (threshold 2%, 96 turns)" in job.summary)
    assert "[probe" not in job.summary and job.summary.endswith("```\n")
    assert job.steps[-1]["name"] == "Clean the runner" and not job.failed


# --- one runner, a pull request then a push ---------------------------------------------------

PTH = ("import os; open(os.path.dirname(os.environ['RUNNER_TOOL_CACHE']) + '/pwned.log', 'a')"
       ".write('{what} ' + os.environ.get('GITHUB_EVENT_NAME', '?') + '\\n')\n")
# The pull request's conftest: a .pth file in every site folder it can name, git hooks in the
# reused workspace, a /dev/shm segment, and a background process the runner does not track.
PLANT = r'''import os, subprocess, sys, sysconfig
from pathlib import Path

home = Path(os.environ["RUNNER_TOOL_CACHE"]).parent  # the runner's home, not the job's HOME
ws = Path(os.environ["GITHUB_WORKSPACE"])
if not (home / "planted").exists():
    (home / "planted").write_text("")
    pth = PTH.format(what="pth")
    py = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for site in (sysconfig.get_paths()["purelib"], f"{home}/.local/lib/{py}/site-packages",
                 f"{os.environ['RUNNER_TOOL_CACHE']}/perfgate-venv/lib/{py}/site-packages"):
        os.makedirs(site, exist_ok=True)
        Path(site, "zz_planted.pth").write_text(pth)
    for name in ("pre-commit", "post-commit", "post-checkout", "reference-transaction"):
        hook = ws / ".git" / "hooks" / name
        hook.write_text('#!/bin/sh\necho "hook $(basename $0) $GITHUB_EVENT_NAME" '
                        '>> "$RUNNER_TOOL_CACHE/../pwned.log"\n')
        hook.chmod(0o755)
    subprocess.Popen([sys.executable, str(Path(__file__).with_name("watcher.py"))],
                     env={**os.environ, "RUNNER_TRACKING_ID": ""}, start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    Path("/dev/shm/planted-segment").write_text("x")
'''
# It plants a .pth into any venv a later job builds, and beats while it lives.
WATCHER = r'''import glob, os, time

home = os.path.dirname(os.environ["RUNNER_TOOL_CACHE"])
while True:
    with open(home + "/beat", "w") as f:
        f.write(str(time.time()))
    for site in glob.glob(home + "/_work/_temp/perfgate-venv/lib/*/site-packages"):
        path = os.path.join(site, "zz_background.pth")
        try:  # the runner empties _temp between jobs: a venv may go while this looks at it
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write(PTH.format(what="background"))
        except OSError:
            pass
    time.sleep(0.02)
'''


def _beating(path: Path, within_s: float = 60.0) -> bool:
    """The watcher wrote two different beats within ``within_s`` (a busy machine may hold it
    off the CPU for seconds, even between truncating the file and writing it)."""
    first, deadline = "", time.monotonic() + within_s
    while time.monotonic() < deadline:
        now = path.read_text() if path.is_file() else ""
        if now and first and now != first:
            return True
        first = first or now
        time.sleep(0.05)
    return False


def _forks_copy_without_cleanup() -> str:
    """The pull request's own copy of the workflow: its last cleanup step and its sandbox
    removed, which a fork may do, since a pull request's run uses the pull request's
    workflow."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    steps = wf["jobs"]["pull-request"]["steps"]
    assert steps[-1]["name"] == "Clean the runner"
    del steps[-1]
    launch = re.compile(r'"\$\{PERFGATE_BASE_PYTHON:-python3\}" -I -S "\$(?:SANDBOX|sandbox)"'
                        r'[^\n]*? -- (?:\\\n\s*)?')
    for step in steps:
        if "run" in step:
            step["run"] = launch.sub("", step["run"])
    assert not any(re.search(r"-I -S .\$(SANDBOX|sandbox)", s.get("run", "")) for s in steps)
    return yaml.safe_dump(wf)


@pytest.mark.slow  # a PR job and a push job with their venvs (fake clock), ~20 s
def test_what_a_pull_request_leaves_on_the_runner_never_reaches_the_push_job(
        scratch: tuple[Path, Path], runner: Machine, tmp_path: Path) -> None:
    if not runner.ns_pid:
        need_tool("the reused-runner test needs a PID namespace: run as root with unshare")
    origin, dev = scratch
    base = git(dev, "rev-parse", "HEAD")
    git(dev, "switch", "-q", "-c", "plant")
    (dev / "perf" / "conftest.py").write_text(f"PTH = {PTH!r}\n" + PLANT)
    (dev / "perf" / "watcher.py").write_text(f"PTH = {PTH!r}\n" + WATCHER)
    git(dev, "add", "-A")
    git(dev, "commit", "-qm", "a pull request that leaves things behind")
    head = git(dev, "rev-parse", "HEAD")
    git(dev, "push", "-q", "origin", "plant")
    git(dev, "switch", "-q", "main")

    pr = run_job("pull-request", "pull_request", _pr_event(5, head, base), head, origin, runner,
                 "perf-epyc", workflow=_forks_copy_without_cleanup())
    assert pr.step("measure")["code"] == 0, pr.step("measure")["out"]
    home, log = runner.home, runner.home / "pwned.log"
    hook = runner.workspace / ".git" / "hooks" / "pre-commit"
    assert hook.is_file() and (home / ".local").is_dir()  # all three were planted ...
    assert _beating(home / "beat")  # ... the background process is running ...
    subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", "x"], cwd=runner.workspace,
                   env={**os.environ, "GITHUB_EVENT_NAME": "liveness", "HOME": str(home),
                        "RUNNER_TOOL_CACHE": str(home / "_tool")},
                   check=True)
    assert "hook pre-commit liveness" in log.read_text()  # ... and the hook fires
    assert "pth pull_request" in log.read_text()  # the .pth ran in the PR job's own steps

    sha = commit(dev, "C2")
    git(dev, "push", "-q", "origin", "main")
    push = run_job("default-branch", "push", {"after": sha}, sha, origin, runner, "perf-epyc")
    assert push.step("history")["outcome"] == "success", push.step("history")["out"]
    assert "ended stray process" in push.step("Clean the runner")["out"]
    assert "planted-segment" in push.step("Clean the runner")["out"]
    lines = log.read_text().splitlines()
    assert not [x for x in lines if x.split()[-1] == "push"], lines  # nothing ran in the push
    assert not hook.exists()
    assert not _beating(home / "beat", within_s=2.0)  # the background process is gone
    assert (push.artifacts / "perfgate-history-run-perf-epyc" / "run.bundle").is_file()
    assert all(s["outcome"] == "success" for s in push.steps
               if s["id"] not in ("gate_history",)), _failures(push)  # first run: no baseline


# --- what the files promise -------------------------------------------------------------------

WORKFLOWS = sorted(p for p in (ROOT / ".github" / "workflows").iterdir()
                   if p.suffix in (".yml", ".yaml"))


def _on(wf: dict[str, Any]) -> dict[str, Any]:
    on = wf.get("on", wf.get(True))  # PyYAML reads the key `on` as true
    return on if isinstance(on, dict) else {name: None for name in ([on] if isinstance(on, str)
                                                                    else on)}


def test_the_workflow_keeps_its_security_and_isolation_promises() -> None:
    """docs/ci.md: pull requests read only and push nothing; the perf machine holds no token
    that can write; only save-history, on a GitHub-hosted runner, writes history."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    assert "pull_request_target" not in _on(wf) and wf["permissions"] == {}
    pr, push, save_ = (wf["jobs"][j] for j in ("pull-request", "default-branch", "save-history"))
    for job in (pr, push):
        assert job["permissions"] == {"contents": "read"}
        assert job["env"]["PERFGATE_MACHINE"] == "${{ matrix.machine }}"
        assert "${{ matrix.machine }}" in job["runs-on"]
        assert "${{ matrix.machine }}" in job["concurrency"]["group"]
        cleans = [s for s in job["steps"] if s.get("name") == "Clean the runner"]
        assert len(cleans) == 2 and cleans[-1] is job["steps"][-1]
        assert cleans[-1]["if"] == "always()" and "if" not in cleans[0]
        assert job["steps"].index(cleans[0]) < min(
            i for i, s in enumerate(job["steps"]) if "uses" in s)  # before the checkout
        assert all(c["run"] == pr["steps"][0]["run"] for c in cleans)  # one script, four uses
        install = next(s for s in job["steps"] if s.get("name") == "Python environment")
        assert '"$RUNNER_TEMP/perfgate-venv"' in install["run"]
        assert '--require-hashes --only-binary :all: -r "$CONSTRAINTS"' in install["run"]
        assert "--no-deps --no-build-isolation -e ." in install["run"]
        assert 'echo "GIT_CONFIG_GLOBAL=/dev/null" >> "$GITHUB_ENV"' in install["run"]
        assert 'echo "TMPDIR=$RUNNER_TEMP/perfgate-tmp"' in install["run"]  # A/B worktrees
        assert 'rm -rf "${RUNNER_TEMP:?}"/perfgate*' in cleans[0]["run"]
    assert wf["env"]["CONSTRAINTS"] == "constraints/perf.txt"
    assert (ROOT / "constraints" / "perf.txt").is_file()
    assert pr["environment"].count("perfgate-fork-pr") == 1
    assert "head.repo.full_name == github.repository" in pr["environment"]
    assert push["concurrency"] == {"group": "perfgate-history-${{ matrix.machine }}",
                                   "cancel-in-progress": False}
    assert save_["runs-on"] == "ubuntu-latest" and save_["needs"] == "default-branch"
    assert save_["permissions"] == {"contents": "write"}
    assert "concurrency" not in save_  # a group would cancel waiting writers, losing runs
    assert not any("uses" in s and "checkout" in s["uses"] for s in save_["steps"])
    assert "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)" \
        in save_["if"]
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
                 "GIT_COMMITTER_EMAIL"):
        assert wf["env"][name]  # an identity for every git command of every job
    for job in wf["jobs"].values():
        for step in job["steps"]:  # untrusted values reach scripts through env, not ${{ }}
            assert "${{" not in step.get("run", ""), step.get("name")


def test_every_action_is_pinned_by_commit_and_every_checkout_drops_its_token() -> None:
    uses = []
    for path in WORKFLOWS:
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for step in job.get("steps", []):
                if "uses" in step:
                    uses.append(step["uses"])
                    if step["uses"].startswith("actions/checkout@"):
                        assert step["with"]["persist-credentials"] is False, path.name
        for line in path.read_text().splitlines():
            if "uses:" in line and "./" not in line:
                assert re.search(r"uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*$", line), line
    assert len(uses) >= 6
    dependabot = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text())
    assert {u["package-ecosystem"] for u in dependabot["updates"]} >= {"github-actions"}


def test_the_comment_workflow_runs_no_code_of_the_pull_request() -> None:
    path = ROOT / ".github" / "workflows" / "perfgate-comment.yml"
    wf = yaml.safe_load(path.read_text())
    assert set(_on(wf)) == {"workflow_run"} and wf["permissions"] == {}
    (job,) = wf["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    checkout, download, comment = job["steps"]
    assert "ref" not in checkout["with"] and "repository" not in checkout["with"]  # default branch
    assert checkout["with"]["sparse-checkout"] == "pytest_perfgate/cli/_pr_comment.py"
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    assert comment["run"].strip().startswith("python3 -s -E -P pytest_perfgate/cli/_pr_comment.py")


def _quick(retries: str) -> str:
    """The workflow with save-history's tries and waits cut down, for the tests below."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    wf["jobs"]["save-history"]["env"].update({"PUSH_TRIES": retries, "PUSH_BACKOFF_S": "0"})
    return yaml.safe_dump(wf)


@pytest.mark.parametrize("case", ["rejected", "rewritten", "unreachable"])
def test_a_run_that_cannot_land_is_an_infrastructure_error(
        scratch: tuple[Path, Path], tmp_path: Path, case: str) -> None:
    origin, dev = scratch
    base = history(dev, {"results/perf-xeon/machine.json": "{}\n"})
    art = _run_artifact(origin, base, {"results/perf-xeon/run-1.json": "1\n"}, tmp_path / "a")
    where = origin
    if case == "rejected":
        hook = origin / "hooks" / "pre-receive"
        hook.write_text("#!/bin/sh\necho 'denied by policy' >&2\nexit 1\n")
        hook.chmod(0o755)
        says = "2 pushes rejected"
    elif case == "rewritten":
        git(dev, "push", "-q", "-f", "origin", f"main:{BRANCH}")
        says = (f"the run's bundle does not apply: its base {base[:10]} is not on {BRANCH} "
                "(was the branch rewritten or deleted?)")
    else:
        where = tmp_path / "gone" / "acme" / "scratch.git"
        says = "cannot reach acme/scratch (git ls-remote exit 128)"
    job = run_job("save-history", "push", {}, "0" * 40, where, hosted(tmp_path), "perf-xeon",
                  artifacts_from=art, workflow=_quick("2"))
    assert job.steps[-1]["code"] == 3, job.steps[-1]["out"]
    assert job.annotations == [
        f"::error title=perfgate infrastructure error::history of perf-xeon not saved: {says}; "
        "the run is kept in the artifact perfgate-history-run-perf-xeon of run 4242 "
        "(docs/ci.md: pushing a kept run)"]


def test_a_root_runner_on_the_host_is_warned_and_nothing_is_ended(tmp_path: Path) -> None:
    """The cleanup's guard, shown where it is safe: a namespace whose pid 2 is named like the
    host's kernel thread (as root on the real host, the guard is what stands between the
    cleanup and every root process of the machine)."""
    if not Machine.can_namespace():
        need_tool("needs a PID namespace: run as root with unshare")
    fake = tmp_path / "kthreadd"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    machine = Machine(tmp_path / "runner", namespace=True, pid2=f"{fake} 600")
    try:
        victim = subprocess.Popen(machine.command(["sleep", "600"], tmp_path))
        time.sleep(0.5)
        wf = yaml.safe_load(WORKFLOW.read_text())
        clean = wf["jobs"]["pull-request"]["steps"][0]["run"]
        (tmp_path / "ws").mkdir()
        (tmp_path / "ws" / "left").write_text("")
        done = subprocess.run(machine.command(["bash", "-eo", "pipefail", "-c", clean], tmp_path),
                              env={"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path),
                                   "GITHUB_WORKSPACE": str(tmp_path / "ws")},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "::warning title=perfgate cleanup::the runner runs as root on the host, where "
            "ending every root process would end the machine's services: stray processes and "
            "/dev/shm segments are left (run the runner as its own user: docs/ci.md)"]
        assert victim.poll() is None  # not ended
        assert list((tmp_path / "ws").iterdir()) == []  # the workspace is still emptied
    finally:
        machine.close()
        victim.wait(timeout=30)
