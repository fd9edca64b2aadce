"""The perf gate's trust boundary, attacked: what a pull request's code can leave on a perf
runner (git and pip configuration in the runner user's home, a planted settled state, a
process that keeps changing its id) and what a perf machine's job can upload (a forged
bundle, base or artifact name) must not change what the default branch records.

Each attack is a real planted artifact, and the trusted job's steps run as written
(tests/workflow_sim.py), against the workflow before this boundary (OLD, from git: the
attack is live there) and the current one (it is stopped). The runner's user is not root
where the attack is on the runner (uid RUNNER_UID in a PID and mount namespace of its own).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import need_tool
from workflow_sim import (
    BRANCH,
    ROOT,
    RUNNER_PYTHON,
    WORKFLOW,
    Job,
    Machine,
    branch_rules,
    commit,
    git,
    history,
    make_scratch,
    pinned_here,
    run_job,
    sandbox_unusable,
    set_branch_rules,
    user_python,
)

OLD_COMMIT = "8e61a5e284db54df10ab8df1799a51eaca41a792"  # the gate before this boundary
RUNNER_UID = 65534  # nobody: a runner user that owns nothing else
VERSIONS = ["old", "new"]


def _old(path: str) -> str:
    done = subprocess.run(["git", "show", f"{OLD_COMMIT}:{path}"], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot read {path} at {OLD_COMMIT[:10]} ({done.stderr.strip()}): these "
                    "tests show each attack against the old workflow; fetch the full history "
                    "(git fetch --unshallow)")
    return done.stdout


def workflow(version: str) -> str:
    return _old(".github/workflows/perfgate.yml") if version == "old" else WORKFLOW.read_text()


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder other users can enter (pytest keeps its own temp folders root's alone, and
    resets their mode at every session start, other sessions' included)."""
    if not Machine.can_namespace() or not shutil.which("setpriv"):
        need_tool("needs a PID namespace and a second user: run as root with unshare, setpriv")
    if not user_python():
        need_tool(f"needs /usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}, which "
                  "a user other than root can run")
    where = Path(tempfile.mkdtemp(prefix="perfgate-trust-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def user_scratch(open_tmp: Path) -> tuple[Path, Path]:
    """The scratch project, where the runner's user can clone it."""
    return make_scratch(open_tmp)


@pytest.fixture
def user_runner(open_tmp: Path) -> Iterator[Machine]:
    """A self-hosted perf runner whose user is not root, reused by every job of the test."""
    machine = Machine(open_tmp / "runner", namespace=True, user=RUNNER_UID)
    yield machine
    machine.close()


def _as_runner(machine: Machine, path: Path, text: str | None, mode: int = 0o644) -> None:
    """Write a file (None: one already written) as the pull request's code would, as the
    runner's user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is not None:
        path.write_text(text)
    path.chmod(mode)
    for p in [path, *path.parents]:
        if p == machine.home.parent:
            break
        os.chown(p, RUNNER_UID, RUNNER_UID)


def _with_constraints(dev: Path, version: str) -> str:
    """The project at `version`'s constraints (hashed or not), committed; its sha."""
    text = _old("constraints/perf.txt") if version == "old" \
        else (ROOT / "constraints" / "perf.txt").read_text()
    (dev / "constraints" / "perf.txt").write_text(pinned_here(text))
    return commit(dev, f"constraints of the {version} workflow")


def _push(dev: Path) -> None:
    git(dev, "push", "-q", "origin", "main")


def _trusted(sha: str, origin: Path, machine: Machine, version: str, until: str,
             package: Path = ROOT) -> Job:
    return run_job("default-branch", "push", {"after": sha}, sha, origin, machine,
                   "perf-xeon", workflow=workflow(version), until=until, package=package)


def _old_package(where: Path) -> Path:
    """pytest_perfgate as it was at OLD_COMMIT, extracted under `where` (readable by all)."""
    where.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", OLD_COMMIT, "pytest_perfgate"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def _steps_ok(job: Job) -> None:
    bad = [(s["name"], s["out"][-5000:]) for s in job.steps if s["outcome"] == "failure"]
    assert not bad, bad


# --- the runner user's home ---------------------------------------------------------------

FILTER = """#!/bin/sh
# what a pull request leaves: git runs it on checkout (smudge) and on git add (clean)
case "$1" in
  smudge) sed 's/^WORK = .*/WORK = 99/' ;;
  clean) echo '{"forged": 999999.0}' ;;
esac
"""


@pytest.mark.slow  # a venv and a history run (fake clock), ~4 s per case
@pytest.mark.parametrize("version", VERSIONS)
def test_git_configuration_in_home_changes_neither_the_code_nor_the_recorded_run(
        user_scratch: tuple[Path, Path], user_runner: Machine, version: str) -> None:
    origin, dev = user_scratch
    sha = _with_constraints(dev, version)
    _push(dev)
    home = user_runner.home
    _as_runner(user_runner, home / "filter.sh", FILTER, 0o755)
    _as_runner(user_runner, home / ".gitconfig",
               f'[filter "p"]\n\tsmudge = {home}/filter.sh smudge\n'
               f'\tclean = {home}/filter.sh clean\n')
    _as_runner(user_runner, home / ".config" / "git" / "attributes",
               "*.py filter=p\n*.pgrun filter=p\n")

    job = _trusted(sha, origin, user_runner, version, "Commit the run for save-history")
    _steps_ok(job)
    pool = "perf" if version == "old" else "perf-trusted"  # one runner: the hardened mode
    assert job.labels == ("self-hosted", "linux", pool, "perf-xeon")
    measured = (user_runner.workspace / "mylib.py").read_text()
    bundle = user_runner.home / "_work" / "_temp" / "perfgate" / "history-run" / "run.bundle"
    repo = user_runner.home.parent / f"read-{version}"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git(repo, "fetch", "-q", str(bundle), "HEAD:refs/run")
    sidecars = [f for f in git(repo, "ls-tree", "-r", "--name-only", "refs/run").split()
                if f.endswith(".pgrun")]
    assert len(sidecars) == 1, sidecars
    recorded = git(repo, "show", f"refs/run:{sidecars[0]}")
    if version == "old":  # live: the code measured and the run recorded are the planted ones
        assert "WORK = 99" in measured
        assert recorded == '{"forged": 999999.0}'
    else:
        assert "WORK = 1\n" in measured and "WORK = 99" not in measured
        assert '"forged"' not in recorded and '"benchmarks"' in recorded


def _fake_torch(where: Path, log: Path) -> Path:
    """A wheel that says it is torch 2.13.0 and runs code in every Python that starts."""
    wheel = where / "torch-2.13.0-py3-none-any.whl"
    dist = "torch-2.13.0.dist-info"
    pth = f"import os; open({str(log)!r}, 'a').write('fake torch ran\\n')\n"
    files = {"zz_fake_torch.pth": pth,
             f"{dist}/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: x\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in {**files, f"{dist}/RECORD": record}.items():
            z.writestr(name, text)
    return wheel


@pytest.mark.slow  # a venv, ~3 s per case
@pytest.mark.parametrize("version", VERSIONS)
def test_a_pip_conf_in_home_does_not_choose_what_the_job_installs(
        user_scratch: tuple[Path, Path], user_runner: Machine, version: str) -> None:
    origin, dev = user_scratch
    sha = _with_constraints(dev, version)
    _push(dev)
    home, log = user_runner.home, user_runner.home / "pwned.log"
    wheel = _fake_torch(home / "wheels", log)
    _as_runner(user_runner, log, "")
    _as_runner(user_runner, wheel, None)
    _as_runner(user_runner, home / ".config" / "pip" / "pip.conf",
               f"[global]\nno-index = true\nfind-links = {home}/wheels\n"
               "[install]\nignore-installed = true\n")

    job = _trusted(sha, origin, user_runner, version, "Python environment")
    said = log.read_text()
    if version == "old":  # live: the job's own Python ran the planted code
        assert "fake torch ran" in said, job.steps[-1]["out"][:6000]
    else:
        _steps_ok(job)
        assert said == ""


def test_a_planted_wheel_fails_the_hashed_install(tmp_path: Path) -> None:
    """Even where pip is pointed at a planted wheel (a find-links the runner's .env names),
    the hashed constraints refuse it: it is not the file pinned."""
    wheel = _fake_torch(tmp_path / "wheels", tmp_path / "log")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pins = tmp_path / "pins.txt"
    text = (ROOT / "constraints" / "perf.txt").read_text()
    pin = re.search(r"^torch==2\.13\.0 \\\n\s+--hash=sha256:[0-9a-f]{64}$", text, re.M)
    assert pin, "constraints/perf.txt pins torch==2.13.0 with a hash"
    pins.write_text(pin.group(0) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--no-index", "--find-links", str(wheel.parent), "--require-hashes",
         "--only-binary", ":all:", "-r", str(pins)],
        capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert done.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in done.stderr, done.stderr
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() in done.stderr


# --- perfgate's own cache -------------------------------------------------------------------

SETTLED_TEST = '''import hashlib, os
import mylib
from pytest_perfgate.sim.models import load_model, tiny_xml
from pytest_perfgate.sim.settled import settled_rows


def test_settled(perfgate):
    state = settled_rows(load_model(tiny_xml()), 4, 20)
    with open(os.environ["OUT"] + "/settled.sha256", "w") as f:
        f.write(hashlib.sha256(state.tobytes()).hexdigest())
    perfgate.measure(mylib.step, transitions=1)  # on the scratch project's fake clock
'''


@pytest.mark.slow  # a venv and a history run (fake clock), ~4 s per case
@pytest.mark.parametrize("version", VERSIONS)
def test_a_planted_settled_state_is_not_what_main_measures(
        user_scratch: tuple[Path, Path], user_runner: Machine, version: str) -> None:
    pytest.importorskip("mujoco.batch")
    import numpy as np

    from pytest_perfgate.sim import settled
    from pytest_perfgate.sim.models import load_model, tiny_xml

    origin, dev = user_scratch
    (dev / "perf" / "test_perf_settled.py").write_text(SETTLED_TEST)
    sha = _with_constraints(dev, version)
    _push(dev)
    model = load_model(tiny_xml())
    key = settled.settle_key(model, 4, 20, 0, -1)
    fresh = settled.settle(model, 4, 20)
    planted = fresh.copy()
    planted[:, 2] += 1.0  # every body 1 m higher: in the air, no contacts
    path = key.path(user_runner.home / ".cache" / "pytest-perfgate")
    _as_runner(user_runner, path, "")
    np.save(path, planted)

    package = _old_package(user_runner.home.parent / "old") if version == "old" else ROOT
    job = _trusted(sha, origin, user_runner, version, "Measure against history and record",
                   package)
    _steps_ok(job)
    got = (user_runner.home / "_work" / "_temp" / "perfgate" / "settled.sha256").read_text()
    said = job.step("history")["out"]
    if version == "old":  # live: main's run held the planted state
        assert got == hashlib.sha256(planted.tobytes()).hexdigest()
    else:  # never read (the job's cache is its own); were it read, its check refuses it
        assert str(path) not in said and "settled-state cache file" not in said
        assert got == hashlib.sha256(fresh.tobytes()).hexdigest()


# --- a process that changes its id ------------------------------------------------------------

# Each hop writes the beat: a beat that stops is a hopper that is gone (a scan of /proc,
# this test's too, can miss a process that keeps changing its id).
HOPPER = """import os, sys, time
period, fd = float(sys.argv[1]), os.open(sys.argv[2], os.O_WRONLY)
while True:
    time.sleep(period)
    if os.fork():
        os._exit(0)  # the parent goes; the child, with a new id, carries on
    os.pwrite(fd, b"%020d" % time.monotonic_ns(), 0)  # one fixed-size write: never half read
"""


def _next_beat(beat: Path, after: str, within_s: float = 30.0) -> str:
    """The hopper's next beat after `after` ('' where none came within `within_s`)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        now = beat.read_text()
        if now and now != after:
            return now
        time.sleep(0.01)
    return ""


@pytest.mark.slow  # ~4 s per case
@pytest.mark.parametrize(("version", "period"), [
    # the old single pass: the hopper outruns it (a race with the pass, so run alone); one
    # period shows it, the fastest hopper, which a single pass has no chance to catch
    pytest.param("old", 0.001, marks=pytest.mark.timing),
    ("new", 0.001), ("new", 0.05)])
def test_a_process_that_changes_its_id_does_not_survive_the_cleanup(
        user_scratch: tuple[Path, Path], user_runner: Machine,
        version: str, period: float) -> None:
    origin, dev = user_scratch
    sha = git(dev, "rev-parse", "HEAD")
    others = [subprocess.Popen(["nsenter", "-t", str(user_runner.ns_pid), "-p", "-m", "--",
                                "sleep", "600"])
              for _ in range(300)]  # the machine's other processes (root's, not the runner's)
    try:
        script, beat = user_runner.home / "hopper.py", user_runner.home / "beat"
        _as_runner(user_runner, script, HOPPER)
        _as_runner(user_runner, beat, "")
        subprocess.run(user_runner.command(
            ["setsid", user_runner.python, "-I", str(script), str(period), str(beat)],
            user_runner.home),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=60)  # returns when the first hop's parent exits
        assert _next_beat(beat, _next_beat(beat, "")), "the hopper is not running"
        job = _trusted(sha, origin, user_runner, version, "Clean the runner")
        clean = job.step("Clean the runner")
        assert clean["code"] == 0, clean["out"][-3000:]
        seen = beat.read_text()
        if version == "old":  # live: it outran the single pass
            assert _next_beat(beat, seen)
        else:
            time.sleep(1.0)  # 20 to 1000 hops, were it alive
            assert beat.read_text() == seen, clean["out"][-3000:]
            assert "ended stray process" in clean["out"]
        assert all(p.poll() is None for p in others)  # other users' processes are left alone
    finally:
        for p in others:
            p.kill()
        for p in others:
            p.wait(timeout=30)


# --- what a perf machine uploads to save-history ----------------------------------------------

def _hosted(tmp_path: Path) -> Machine:
    n = len(list(tmp_path.glob("hosted-*")))
    return Machine(tmp_path / f"hosted-{n}")


def _forge(origin: Path, base: str, where: Path, change: dict[str, str | None],
           base_file: str | None = None, machine: str = "perf-xeon", full: bool = False) -> Path:
    """An artifact perfgate-history-run-perf-xeon: one commit on `base` making `change`
    (None deletes), its base file (default: `base`), and the machine it names."""
    repo = where / "forger"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git(repo, "fetch", "-q", str(origin), BRANCH)
    git(repo, "checkout", "-q", "--detach", base)
    for name, text in change.items():
        if text is None:
            (repo / name).unlink()
        else:
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "perfgate: perf-xeon at 0000000000 (run 4242)")
    art = where / "artifacts" / "perfgate-history-run-perf-xeon"
    art.mkdir(parents=True)
    git(repo, "bundle", "create", "-q", str(art / "run.bundle"),
         "HEAD" if full else f"{base}..HEAD")
    (art / "base").write_text((base if base_file is None else base_file) + "\n")
    (art / "machine").write_text(machine + "\n")
    return where / "artifacts"


RUN = "results/perf-xeon/perfgate/20261201T000000-aaaaaa.pgrun"
ATTACKS: dict[str, dict[str, Any]] = {
    # an earlier run's numbers rewritten
    "forged bundle": {"change": {RUN: '{"rate": 999999.0}\n'},
                      "says": f"the run would change '{RUN}' (M, mode 100644)"},
    # an option for base, and a bundle holding the whole history with an earlier run deleted
    "forged base": {"change": {RUN: None}, "base_file": "--root", "full": True,
                    "says": "its base is '--root', not a 40-digit commit id or empty"},
    # another machine's run, uploaded under this machine's artifact name
    "forged artifact name": {
        "change": {"results/perf-epyc/perfgate/20261202T000000-bbbbbb.pgrun": "{}\n"},
        "machine": "perf-epyc",
        "says": "the artifact perfgate-history-run-perf-xeon holds a run of 'perf-epyc'"},
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("version", VERSIONS)
def test_save_history_pushes_only_this_machines_new_run(
        scratch: tuple[Path, Path], tmp_path: Path, attack: str,
        version: str) -> None:
    origin, dev = scratch
    base = history(dev, {"results/perf-xeon/machine.json": "{}\n", RUN: '{"rate": 1000.0}\n',
                          "results/benchmarks.json": "{}\n", ".gitignore": "*.lock\n"})
    spec = {k: v for k, v in ATTACKS[attack].items() if k != "says"}
    art = _forge(origin, base, tmp_path / "a", **spec)
    job = run_job("save-history", "push", {}, "0" * 40, origin, _hosted(tmp_path), "perf-xeon",
                  artifacts_from=art, workflow=workflow(version))
    push = job.steps[-1]
    git(dev, "fetch", "-q", "origin")
    tip = git(dev, "rev-parse", f"origin/{BRANCH}")
    if version == "old":  # live: the forged change landed on main's history
        assert push["code"] == 0, push["out"]
        assert tip != base
    else:
        assert push["code"] == 3, push["out"]
        assert tip == base  # nothing pushed
        (error,) = job.annotations
        assert error.startswith("::error title=perfgate infrastructure error::history of "
                                f"perf-xeon not saved: {ATTACKS[attack]['says']}"), error
        assert error.endswith("the run is kept in the artifact perfgate-history-run-perf-xeon "
                              "of run 4242 (docs/ci.md: pushing a kept run)")


@pytest.mark.parametrize(("name", "change", "says"), [
    ("deleted", {RUN: None}, f"the run would change '{RUN}' (D, mode 000000)"),
    ("a symlink", {}, "the run would change "
     "'results/perf-xeon/link' (A, mode 120000)"),
    ("attributes", {"results/perf-xeon/.gitattributes": "* filter=p\n"},
     "the run would change 'results/perf-xeon/.gitattributes' (A, mode 100644)"),
    ("another folder", {"tools/x.py": "print()\n"}, "the run would change 'tools/x.py' (A"),
    ("a new .gitignore", {".gitignore": "*\n"}, "the run would change '.gitignore' (M"),
])
def test_save_history_refuses_any_other_change(scratch: tuple[Path, Path],
                                               tmp_path: Path, name: str,
                                               change: dict[str, str | None], says: str) -> None:
    origin, dev = scratch
    base = history(dev, {"results/perf-xeon/machine.json": "{}\n", RUN: '{"rate": 1000.0}\n',
                          ".gitignore": "*.lock\n"})
    if name == "a symlink":
        art = _forge_symlink(origin, base, tmp_path / "a")
    else:
        art = _forge(origin, base, tmp_path / "a", change)
    job = run_job("save-history", "push", {}, "0" * 40, origin, _hosted(tmp_path), "perf-xeon",
                  artifacts_from=art)
    assert job.steps[-1]["code"] == 3, job.steps[-1]["out"]
    (error,) = job.annotations
    assert says in error, error
    git(dev, "fetch", "-q", "origin")
    assert git(dev, "rev-parse", f"origin/{BRANCH}") == base


def _forge_symlink(origin: Path, base: str, where: Path) -> Path:
    art = _forge(origin, base, where, {"results/perf-xeon/new.pgrun": "{}\n"})
    repo = where / "forger"
    (repo / "results" / "perf-xeon" / "link").symlink_to("/etc/passwd")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--amend", "--no-edit")
    bundle = art / "perfgate-history-run-perf-xeon" / "run.bundle"
    bundle.unlink()
    git(repo, "bundle", "create", "-q", str(bundle), f"{base}..HEAD")
    return art


@pytest.mark.parametrize(("base_file", "says"), [
    ("HEAD~1", "its base is 'HEAD~1', not a 40-digit commit id or empty"),
    ("-x touch /tmp/pwned", "its base is '-x touch /tmp/pwned', not a 40-digit commit id"),
    ("A" * 40, f"its base is '{'A' * 40}', not a 40-digit commit id"),
    ("1\n::error title=forged::pushed", "its base is '1%0A::error title=forged::pushed', not"),
])
def test_save_history_refuses_a_base_that_is_not_a_commit_id(
        scratch: tuple[Path, Path], tmp_path: Path, base_file: str,
        says: str) -> None:
    origin, dev = scratch
    base = history(dev, {"results/perf-xeon/machine.json": "{}\n"})
    art = _forge(origin, base, tmp_path / "a", {"results/perf-xeon/perfgate/r.pgrun": "{}\n"},
                 base_file=base_file)
    job = run_job("save-history", "push", {}, "0" * 40, origin, _hosted(tmp_path), "perf-xeon",
                  artifacts_from=art)
    assert job.steps[-1]["code"] == 3
    (error,) = job.annotations
    assert f"not saved: {says}" in error, error


def test_a_genuine_run_still_lands(scratch: tuple[Path, Path], tmp_path: Path) -> None:
    """What a run does change: a new sidecar and asv file, machine.json, benchmarks.json and
    this commit's asv result file."""
    origin, dev = scratch
    asv = "results/perf-xeon/00000000-py.json"
    base = history(dev, {"results/perf-xeon/machine.json": "{}\n", RUN: "{}\n",
                          "results/benchmarks.json": "{}\n", asv: "{}\n"})
    art = _forge(origin, base, tmp_path / "a", {
        "results/perf-xeon/perfgate/20261203T000000-cccccc.pgrun": "{}\n",
        "results/perf-xeon/machine.json": '{"cpu": "x"}\n',
        "results/benchmarks.json": '{"a": 1}\n', asv: '{"b": 2}\n'})
    job = run_job("save-history", "push", {}, "0" * 40, origin, _hosted(tmp_path), "perf-xeon",
                  artifacts_from=art)
    assert job.steps[-1]["code"] == 0, job.steps[-1]["out"]
    assert not job.annotations


@pytest.mark.parametrize(("rules", "says"), [
    (("update", "non_fast_forward", "deletion"), None),
    (("non_fast_forward", "deletion"), "lacks the rule(s) update: anyone with write access"),
    ((), "lacks the rule(s) update non_fast_forward deletion: anyone"),
    (None, "cannot read the rules of perfgate-history/perf-xeon ("),
])
def test_save_history_names_a_history_branch_anyone_may_write(
        scratch: tuple[Path, Path], tmp_path: Path, rules: tuple[str, ...] | None,
        says: str | None) -> None:
    """A rule set that lets anyone with write access push forged runs: named, and the run
    still lands (a warning, never a lost run)."""
    origin, dev = scratch
    base = history(dev, {"results/perf-xeon/machine.json": "{}\n"})
    art = _forge(origin, base, tmp_path / "a", {"results/perf-xeon/perfgate/r.pgrun": "{}\n"})
    if rules is None:  # an answer that is not the API's (a proxy's page, an outage)
        set_branch_rules(origin, BRANCH, ())
        branch_rules(origin, BRANCH).write_text("<html>Service Unavailable</html>")
    else:
        set_branch_rules(origin, BRANCH, rules)
    job = run_job("save-history", "push", {}, "0" * 40, origin, _hosted(tmp_path), "perf-xeon",
                  artifacts_from=art)
    assert job.steps[-1]["code"] == 0, job.steps[-1]["out"]
    if says is None:
        assert not job.annotations
    else:
        (warning,) = job.annotations
        assert warning.startswith("::warning title=perfgate history rules::"), warning
        assert says in warning, warning
        assert warning.endswith("(docs/ci.md)")


# --- who runs where ---------------------------------------------------------------------------

def test_history_jobs_run_on_runners_no_pull_request_reaches() -> None:
    """The history and anchor job asks for a label that only the runners of the group
    perfgate-trusted carry (docs/ci.md: that group admits the default branch's workflow
    alone); the jobs that run any branch's code (pull requests, bisect) ask for the other
    pool."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    jobs = wf["jobs"]
    trusted = jobs["default-branch"]["runs-on"]
    assert trusted == ["self-hosted", "linux", "perf-trusted", "${{ matrix.machine }}"]
    for name in ("pull-request", "bisect"):
        labels = jobs[name]["runs-on"]
        assert isinstance(labels, list) and labels[:3] == ["self-hosted", "linux", "perf"]
        assert "perf-trusted" not in labels
    declared = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    assert "perf-trusted" in declared["self-hosted-runner"]["labels"]
    assert "perfgate-trusted" in (ROOT / "docs" / "ci.md").read_text()


def test_every_perf_job_has_its_own_home_and_configuration() -> None:
    """The hardened mode, in every job on a perf runner: its own HOME, XDG folders and
    perfgate cache under RUNNER_TEMP, no pip or git configuration from outside the job."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    assert wf["env"]["PIP_CONFIG_FILE"] == "/dev/null"
    assert wf["env"]["GIT_CONFIG_NOSYSTEM"] == "1"
    for name in ("pull-request", "default-branch", "bisect"):
        steps = wf["jobs"][name]["steps"]
        clean = next(s for s in steps if s.get("name") == "Clean the runner")
        checkout = next(i for i, s in enumerate(steps) if "checkout" in s.get("uses", ""))
        assert steps.index(clean) < checkout  # the job's HOME before git first runs
        for var in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
                    "XDG_STATE_HOME", "PERFGATE_CACHE_DIR"):
            assert f'echo "{var}=$home' in clean["run"], (name, var)
        assert 'home="$RUNNER_TEMP/perfgate-home"' in clean["run"]


# --- the history job trusts only the default branch -----------------------------------------
# Attacks on the workflow as it was before the sandbox and these checks (BEFORE: each is live
# there), and on the current one.

BEFORE = "eaf04e73e4f3830d65f4e3ba2f5953a22ece64a7"  # the gate before the sandbox


def _workflow_at(version: str) -> str:
    if version == "new":
        return WORKFLOW.read_text()
    done = subprocess.run(["git", "show", f"{BEFORE}:.github/workflows/perfgate.yml"],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot read the workflow at {BEFORE[:10]} ({done.stderr.strip()}): fetch "
                    "the full history (git fetch --unshallow)")
    return done.stdout


def _main_job(sha: str, origin: Path, machine: Machine, version: str, until: str,
              event: str = "push", inputs: dict[str, str] | None = None) -> Job:
    return run_job("default-branch", event, {"after": sha}, sha, origin, machine, "perf-xeon",
                   inputs, workflow=_workflow_at(version), until=until)


def _in_runner(machine: Machine, script: str) -> None:
    """A shell command run as the runner's user in its namespace, as a job's code would."""
    subprocess.run(machine.command(["sh", "-c", script], machine.home), check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)


# The main thread exits while a second thread runs: `State: Z`, which the old cleanup skipped,
# while the process lived on (it rewrote main's next run in the attack it stands for).
ZOMBIE_LEADER = """import ctypes, os, sys, threading, time
fd = os.open(sys.argv[1], os.O_WRONLY)
if os.fork():
    os._exit(0)
os.setsid()
def beat():
    while True:
        os.pwrite(fd, b"%020d" % time.monotonic_ns(), 0)
        time.sleep(0.01)
threading.Thread(target=beat).start()
time.sleep(0.1)
ctypes.CDLL(None).pthread_exit(None)
"""


def _descends(pid: int, ancestor: int) -> bool:
    """Whether `ancestor` is among `pid`'s parents (an orphan is reparented to its PID
    namespace's init, so what a runner's jobs leave descends from the runner's init)."""
    for _ in range(64):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        pid = int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def _zombie_leaders(uid: int, runner: Machine) -> list[int]:
    """Processes of `uid` on `runner` (not another test's runner, beside it under xdist)
    whose leader is a zombie while another of their threads runs."""
    found = []
    for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
        if not _descends(pid, runner.ns_pid):
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            tasks = os.listdir(f"/proc/{pid}/task")
            states = [Path(f"/proc/{pid}/task/{t}/stat").read_text().rpartition(")")[2].split()[0]
                      for t in tasks]
        except OSError:
            continue
        uids = next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1:]
        if str(uid) in uids and states and "Z" in states and any(s not in "ZX" for s in states):
            found.append(pid)
    return found


@pytest.mark.slow  # ~3 s per case
@pytest.mark.parametrize("version", VERSIONS)
def test_a_zombie_leader_does_not_survive_the_cleanup(
        user_scratch: tuple[Path, Path], user_runner: Machine, version: str) -> None:
    origin, dev = user_scratch
    sha = git(dev, "rev-parse", "HEAD")
    script, beat = user_runner.home / "zombie.py", user_runner.home / "beat"
    _as_runner(user_runner, script, ZOMBIE_LEADER)
    _as_runner(user_runner, beat, "")
    _in_runner(user_runner, f"{user_runner.python} -I {script} {beat}")
    assert _next_beat(beat, _next_beat(beat, "")), "the zombie leader is not running"
    deadline = time.monotonic() + 10
    while not _zombie_leaders(RUNNER_UID, user_runner) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _zombie_leaders(RUNNER_UID, user_runner), "the leader did not become a zombie"
    job = _main_job(sha, origin, user_runner, version, "Clean the runner")
    clean = job.step("Clean the runner")
    assert clean["code"] == 0, clean["out"][-3000:]
    seen = beat.read_text()
    if version == "old":  # live: skipped as a zombie, it beats on
        assert _next_beat(beat, seen)
    else:
        time.sleep(0.5)
        assert beat.read_text() == seen, clean["out"]
        assert not _zombie_leaders(RUNNER_UID, user_runner), clean["out"]
        assert "ended stray process" in clean["out"]


CONFTEST_ZOMBIE = """

import subprocess as _sp, sys as _sys
_sp.Popen([_sys.executable, "-c", {script!r}, "/dev/null"], start_new_session=True,
          stdout=_sp.DEVNULL, stderr=_sp.DEVNULL)
"""


@pytest.mark.slow  # a pull request's job with its venv and A/B run (fake clock), ~15 s
def test_a_zombie_leader_a_pull_request_starts_ends_with_its_sandbox(
        user_scratch: tuple[Path, Path], user_runner: Machine) -> None:
    """The pull request's code runs in the sandbox as the runner's user (not root): when its
    pytest ends, so does the zombie leader its conftest.py started, before any cleanup."""
    if why := sandbox_unusable():
        need_tool(why)
    origin, dev = user_scratch
    base = _with_constraints(dev, "new")
    _push(dev)
    git(dev, "switch", "-q", "-c", "zombie")
    conftest = (dev / "conftest.py").read_text()
    (dev / "conftest.py").write_text(conftest + CONFTEST_ZOMBIE.format(script=ZOMBIE_LEADER))
    head = commit(dev, "a pull request that leaves a zombie leader")
    git(dev, "push", "-q", "origin", "zombie")
    git(dev, "switch", "-q", "main")
    event = {"pull_request": {"number": 7, "head": {"sha": head,
                                                    "repo": {"full_name": "acme/scratch"}},
                              "base": {"sha": base, "ref": "main"}}}
    job = run_job("pull-request", "pull_request", event, head, origin, user_runner,
                  "perf-xeon", until="measure")
    measure = job.step("measure")
    assert measure["code"] == 0, measure["out"][-3000:]
    # ended with the sandbox, no cleanup ran yet
    assert not _zombie_leaders(RUNNER_UID, user_runner)


SMUDGE = """#!/bin/sh
echo "smudge ran in $GITHUB_JOB" >> {log}
cat
"""


@pytest.mark.slow  # ~3 s per case
@pytest.mark.parametrize("version", VERSIONS)
def test_a_symlinked_workspace_is_refused_never_reused(
        user_scratch: tuple[Path, Path], user_runner: Machine, version: str) -> None:
    """A pull request's job swaps the workspace for a link to a repository it keeps, whose
    .git/config names a smudge filter: main's checkout would reuse it and run the filter."""
    origin, dev = user_scratch
    old = git(dev, "rev-parse", "HEAD~1")
    sha = commit(dev, "C2")
    _push(dev)
    home, log = user_runner.home, user_runner.home / "pwned.log"
    _as_runner(user_runner, log, "")
    kept = home / "kept"
    subprocess.run(["git", "clone", "-q", str(origin), str(kept)], check=True)
    git(kept, "checkout", "-q", old)
    _as_runner(user_runner, home / "smudge.sh", SMUDGE.format(log=log), 0o755)
    with open(kept / ".git" / "config", "a") as f:
        f.write(f'[filter "p"]\n\tsmudge = {home}/smudge.sh\n')
    (kept / ".git" / "info" / "attributes").write_text("* filter=p\n")
    subprocess.run(["chown", "-R", f"{RUNNER_UID}:{RUNNER_UID}", str(kept)], check=True)
    ws = user_runner.workspace
    shutil.rmtree(ws)
    ws.symlink_to(kept)
    os.lchown(ws, RUNNER_UID, RUNNER_UID)

    job = _main_job(sha, origin, user_runner, version, "actions/checkout")
    if version == "old":  # live: the kept repository was reused, its filter ran in main's job
        assert "smudge ran in default-branch" in log.read_text()
    else:
        clean = job.step("Clean the runner")
        assert clean["code"] == 3, clean["out"]
        assert not any("checkout" in s["name"] for s in job.steps)
        errors = {a for a in job.annotations if a.startswith("::error")}  # first and last
        assert errors == {
            f"::error title=perfgate cleanup::{ws} is a symbolic link (to {kept}) that the "
            f"runner's user could have made, where the runner keeps {ws}: a job replaced it, "
            "so this runner is not safe for the next job; remove the link (rm "
            f"{ws}) and re-image the runner (docs/ci.md)"}
        assert log.read_text() == "" and ws.is_symlink()


@pytest.mark.slow  # ~3 s per case
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("where", ["/dev/shm", "/tmp"])
def test_a_folder_in_dev_shm_or_tmp_is_removed(user_scratch: tuple[Path, Path],
                                               user_runner: Machine, where: str,
                                               version: str) -> None:
    """A job fills /dev/shm through a folder (the old cleanup removed only files): main's
    job would fail with ENOSPC and record nothing."""
    origin, dev = user_scratch
    sha = git(dev, "rev-parse", "HEAD")
    _in_runner(user_runner, f"mkdir {where}/fill && head -c 1048576 /dev/zero > "
                            f"{where}/fill/blob && mkdir {where}/fill/deeper")
    job = _main_job(sha, origin, user_runner, version, "Clean the runner")
    clean = job.step("Clean the runner")
    assert clean["code"] == 0, clean["out"][-3000:]
    left = subprocess.run(user_runner.command(["ls", "-A", where], user_runner.home),
                          capture_output=True, text=True, check=True).stdout.split()
    if version == "old":  # live: the folder and what fills it stay
        assert "fill" in left
    else:
        assert "fill" not in left and f"{where}/fill" in clean["out"].splitlines()


CONFTEST_MARK = """

import os as _os
with open({log!r}, "a") as _f:
    _f.write(f"conftest of the unmerged branch ran in {{_os.environ.get('GITHUB_JOB')}}\\n")
"""


@pytest.mark.slow  # a venv, a history run and an anchor A/B run (fake clock), ~8 s per case
@pytest.mark.parametrize("version", VERSIONS)
def test_an_unmerged_anchor_is_refused(user_scratch: tuple[Path, Path], user_runner: Machine,
                                       version: str) -> None:
    """workflow_dispatch with anchor=origin/<an unmerged branch>: that branch's conftest.py
    would run on the trusted pool (the chain: it leaves a zombie leader that forges the next
    push's run). The anchor must be a commit of the default branch."""
    origin, dev = user_scratch
    sha = _with_constraints(dev, version)
    _push(dev)
    log = user_runner.home / "pwned.log"
    _as_runner(user_runner, log, "")
    git(dev, "switch", "-q", "-c", "evil")
    conftest = (dev / "conftest.py").read_text()
    (dev / "conftest.py").write_text(conftest + CONFTEST_MARK.format(log=str(log)))
    evil = commit(dev, "an unmerged branch")
    git(dev, "push", "-q", "origin", "evil")
    git(dev, "switch", "-q", "main")

    job = _main_job(sha, origin, user_runner, version, "anchor_ab", event="workflow_dispatch",
                    inputs={"anchor": "origin/evil", "seed_runs": "", "bisect_good": ""})
    said = log.read_text()
    if version == "old":  # live: the branch's code ran on the trusted pool
        assert "conftest of the unmerged branch ran in default-branch" in said
    else:
        assert said == ""
        pick = job.step("anchor")
        assert pick["code"] == 2 and job.step("history")["code"] == 0, pick["out"]
        assert [a for a in job.annotations if "title=perfgate anchor" in a] == [
            f"::error title=perfgate anchor::origin/evil ({evil}) is not on the default branch "
            "main: the anchor's code runs on this runner, so it must be a commit main has "
            f"(git merge-base --is-ancestor {evil} origin/main); give one of its commits or "
            "release tags"]
        assert "anchor_ab" not in [s["id"] for s in job.steps]


# a .pth file: site runs its import lines at every start of this interpreter (a
# sitecustomize.py would do the same, where no other one comes first on sys.path)
PLANTED_PTH = "import os; open({log!r}, 'a').write('planted code ran\\n')\n"


@pytest.mark.slow  # ~4 s per case
@pytest.mark.parametrize("version", VERSIONS)
def test_a_base_interpreter_the_runner_can_write_is_named(
        user_scratch: tuple[Path, Path], user_runner: Machine, version: str) -> None:
    """The runner's .env names an interpreter the runner's user installed (a venv in its
    folders): a job plants code there (a .pth file, a sitecustomize.py), and main's job
    runs it."""
    origin, dev = user_scratch
    sha = _with_constraints(dev, version)
    _push(dev)
    log = user_runner.home / "pwned.log"
    _as_runner(user_runner, log, "")
    base = user_runner.home.parent / "base-python"
    subprocess.run([user_python(), "-m", "venv", "--without-pip", str(base)], check=True)
    site = next(base.glob("lib/python3*/site-packages"))
    (site / "zz_planted.pth").write_text(PLANTED_PTH.format(log=str(log)))
    subprocess.run(["chown", "-R", f"{RUNNER_UID}:{RUNNER_UID}", str(base)], check=True)
    Path(user_runner.python).write_text(RUNNER_PYTHON.format(python=base / "bin" / "python"))

    job = _main_job(sha, origin, user_runner, version, "Python environment")
    if version == "old":  # live: the planted code ran in main's job
        assert "planted code ran" in log.read_text()
    else:
        assert log.read_text() == ""
        check = job.step("Check the base interpreter (the runner's user must not be able to "
                         "change it)")
        assert check["code"] == 3, check["out"]
        (error,) = [a for a in job.annotations if a.startswith("::error")]
        assert error.startswith("::error title=perfgate runner::the base interpreter ")
        assert f"the runner's user (uid {RUNNER_UID}) can write {base}" in error, error
        assert error.endswith("install the interpreter as another user (root) and name it in "
                              "PERFGATE_BASE_PYTHON (docs/ci.md)")


MISSED = "Commits no history run recorded (a cancelled or failed job's)"


@pytest.mark.slow  # two history jobs with their venvs (fake clock) and a save, ~10 s per case
@pytest.mark.parametrize("version", VERSIONS)
def test_a_cancelled_history_job_costs_no_commit_unnamed(
        user_scratch: tuple[Path, Path], user_runner: Machine, open_tmp: Path,
        version: str) -> None:
    """A pull request's workflow takes main's concurrency group with cancel-in-progress:
    main's history job for C3 is cancelled and records nothing. The next job names C3."""
    origin, dev = user_scratch
    c2 = _with_constraints(dev, version)
    _push(dev)
    first = _main_job(c2, origin, user_runner, version, "Upload the run for save-history")
    _steps_ok(first)
    saved = run_job("save-history", "push", {}, c2, origin, Machine(open_tmp / "hosted"),
                    "perf-xeon", artifacts_from=first.artifacts, workflow=_workflow_at(version))
    _steps_ok(saved)
    c3 = commit(dev, "C3, whose history job was cancelled")
    c4 = commit(dev, "C4")
    _push(dev)
    job = _main_job(c4, origin, user_runner, version,
                    MISSED if version == "new" else "This machine's history")
    _steps_ok(job)
    if version == "old":  # live: nothing says C3 has no run
        assert c3[:10] not in job.summary and not job.annotations
    else:
        assert job.summary == (
            "### perfgate: 1 commit(s) without a history run on perf-xeon\n\n"
            f"Between the last recorded run ({c2[:10]}) and this commit, oldest first (a "
            "cancelled or failed history job's; this run's verdict covers their changes, "
            "`perfgate bisect` finds which one):\n\n"
            f"- `{c3[:10]}` C3, whose history job was cancelled\n\n")
        assert job.annotations == [
            f"::warning title=perfgate history::1 commit(s) of the default branch between "
            f"{c2[:10]} (the last recorded on perf-xeon) and {c4[:10]} have no history run (a "
            "cancelled or failed history job): the job summary names them"]
