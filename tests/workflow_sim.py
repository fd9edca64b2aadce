"""A local GitHub Actions runner for one workflow job: enough of the runner to execute the
job's own `run:` steps as Actions would (see tests/test_workflow_run.py for what is real
and what is simulated).

A `Machine` is one runner kept across jobs, as a self-hosted one is: its home, tool cache
and job workspace are reused, and its jobs run in a PID and mount namespace of their own
(with a private /dev/shm), so the workflow's cleanup, which ends every other process of the
runner's user, ends only what the simulated jobs started. A hosted machine is a fresh one
per job.

`${{ }}` expressions are evaluated by a small recursive-descent evaluator with GitHub's
rules (loose `==`, `||`/`&&` yielding values, the implicit `success()` of `if:`); a function
it does not know fails the test instead of guessing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from fake_session import FAKE_CLOCK_CONFTEST

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "perfgate.yml"
SITE_PACKAGES = next(p for p in sys.path if p.endswith("site-packages"))
# What the jobs run that lives under /tmp (a clean clone there, its venv): the sandbox's /tmp
# is its own, so they are bound read-only into it, as a runner binds its tool cache.
_UNDER_TMP = [q for q in dict.fromkeys([ROOT, Path(sys.prefix), Path(SITE_PACKAGES)])
              if q.is_relative_to("/tmp")]
HIDDEN_BY_TMP = [q for q in _UNDER_TMP if not any(q != o and q.is_relative_to(o)
                                                   for o in _UNDER_TMP)]
_LAUNCHER = ROOT / "pytest_perfgate" / "cli" / "_sandbox.py"


def _sandbox_launcher() -> str:
    """The runner's sandbox launcher, as its .env names it: this checkout's (which only root
    writes), or, where the checkout lives under /tmp, one that binds it in first."""
    if not HIDDEN_BY_TMP:
        return str(_LAUNCHER)
    wrapper = Path(sys.prefix) / "perfgate-sim-sandbox.py"  # beside the venv: not in git
    ro = [f"--ro={q}" for q in HIDDEN_BY_TMP]
    wrapper.write_text(f"import runpy, sys\nsys.argv[1:1] = {ro!r}\n"
                       f"runpy.run_path({str(_LAUNCHER)!r}, run_name='__main__')\n")
    wrapper.chmod(0o644)
    return str(wrapper)


SANDBOX = _sandbox_launcher()
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
       "-c", "advice.detachedHead=false"]

# --- a tiny evaluator for GitHub expressions -------------------------------------------------

_TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(\d+(?:\.\d+)?)|(==|!=|&&|\|\||!|\(|\)|,)|"
                    r"([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*))")
_STATUS = ("always", "success", "failure", "cancelled")


class Expr:
    """Recursive descent over ||, &&, == / !=, !, calls, context paths and literals."""

    def __init__(self, text: str, ctx: dict[str, Any]) -> None:
        self.toks: list[tuple[str, str]] = []
        pos, text = 0, text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            assert m and m.end() > pos, f"cannot parse expression {text!r} at {text[pos:]!r}"
            kind = ("str", "num", "op", "name")[[g is not None for g in m.groups()].index(True)]
            self.toks.append((kind, m.group(m.lastindex or 0)))
            pos = m.end()
        self.i, self.ctx = 0, ctx

    def value(self) -> Any:
        v = self._or()
        assert self.i == len(self.toks), f"trailing tokens {self.toks[self.i:]}"
        return v

    def _peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def _or(self) -> Any:
        v = self._and()
        while self._peek() == "||":
            self.i += 1
            w = self._and()
            v = v if _truthy(v) else w
        return v

    def _and(self) -> Any:
        v = self._cmp()
        while self._peek() == "&&":
            self.i += 1
            w = self._cmp()
            v = w if _truthy(v) else v
        return v

    def _cmp(self) -> Any:
        v = self._unary()
        while self._peek() in ("==", "!="):
            op = self.toks[self.i][1]
            self.i += 1
            same = _loose_eq(v, self._unary())
            v = same if op == "==" else not same
        return v

    def _unary(self) -> Any:
        if self._peek() == "!":
            self.i += 1
            return not _truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        kind, tok = self.toks[self.i]
        self.i += 1
        if tok == "(":
            v = self._or()
            assert self._peek() == ")"
            self.i += 1
            return v
        if kind == "str":
            return tok[1:-1].replace("''", "'")
        if kind == "num":
            return float(tok)
        if tok in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[tok]
        if self._peek() == "(":
            self.i += 1
            args = []
            while self._peek() != ")":
                args.append(self._or())
                if self._peek() == ",":
                    self.i += 1
            self.i += 1
            return self._call(tok, args)
        v: Any = self.ctx
        for part in tok.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        return v

    def _call(self, name: str, args: list[Any]) -> Any:
        if name in _STATUS:
            return {"always": True, "cancelled": False, "success": not self.ctx["_failed"],
                    "failure": self.ctx["_failed"]}[name]
        if name == "format":
            return re.sub(r"\{(\d+)\}", lambda m: _show(args[1 + int(m.group(1))]), args[0])
        raise AssertionError(f"function {name}() is not simulated: extend this evaluator")


def _truthy(v: Any) -> bool:
    return v not in (None, False, 0, 0.0, "")


def _loose_eq(a: Any, b: Any) -> bool:
    """GitHub's ==: strings case-insensitively; other type mixes as numbers (null and ''
    are 0, a non-numeric string NaN), so a skipped step's missing output equals ''."""
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if type(a) is type(b):
        return bool(a == b)
    return _number(a) == _number(b)


def _number(v: Any) -> float:
    if v is None or v is False:
        return 0.0
    if v is True:
        return 1.0
    if isinstance(v, str):
        try:
            return float(v.strip() or 0)
        except ValueError:
            return float("nan")
    return float(v) if isinstance(v, (int, float)) else float("nan")


def _show(v: Any) -> str:
    if v is None or isinstance(v, bool):
        return {None: "", True: "true", False: "false"}[v]
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def substitute(text: Any, ctx: dict[str, Any]) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: _show(Expr(m.group(1), ctx).value()), str(text))


def condition(text: Any, ctx: dict[str, Any]) -> bool:
    expr = str(text).strip()
    if expr.startswith("${{") and expr.endswith("}}"):
        expr = expr[3:-2]
    if not re.search(r"\b(" + "|".join(_STATUS) + r")\(", expr):
        expr = f"success() && ({expr})"  # Actions' implicit status check
    return _truthy(Expr(expr, ctx).value())


# --- the runner ------------------------------------------------------------------------------

# The namespace's pid 1: like a machine's init, it reaps every orphan that ends (a process
# whose parent is gone is its child), so ended processes do not linger as zombies.
INIT = """import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.05)
"""
INIT_NAME = "perfgate-runner-init"

@dataclass
class Job:
    steps: list[dict[str, Any]] = field(default_factory=list)  # name, id, outcome, code, out
    summary: str = ""
    annotations: list[str] = field(default_factory=list)
    artifacts: Path | None = None
    waiting_for: str | None = None  # an environment whose reviewers did not approve
    labels: tuple[str, ...] = ()  # runs-on

    def step(self, id_or_name: str) -> dict[str, Any]:
        found = [s for s in self.steps if id_or_name in (s["id"], s["name"])]
        assert found, f"no step {id_or_name!r} ran: {[s['name'] for s in self.steps]}"
        return found[0]

    @property
    def failed(self) -> bool:
        return any(s["conclusion"] == "failure" for s in self.steps)


class Machine:
    """One runner. Self-hosted: reused by every job given it, in its own PID and mount
    namespace when this process may make one (root); `close` ends the namespace and so
    everything left running in it. Hosted: `Machine(path)` and never reused."""

    def __init__(self, home: Path, namespace: bool = False, pid2: str = "",
                 user: int | None = None) -> None:
        self.home, self.jobs, self.ns_pid, self.user = home, 0, 0, user
        # the runner's .env names its interpreter (PERFGATE_BASE_PYTHON): this one, or one the
        # runner's user can run, behind a wrapper only root may change (RUNNER_PYTHON)
        self.python = str(home.parent / f".python-{home.name}")
        Path(self.python).write_text(RUNNER_PYTHON.format(
            python=sys.executable if user is None else user_python()))
        Path(self.python).chmod(0o755)
        self.workspace = home / "_work" / "scratch" / "scratch"  # the runner's layout
        self.workspace.mkdir(parents=True, exist_ok=True)
        (home / "_tool").mkdir(exist_ok=True)
        if user is not None:  # a runner user of its own: it owns its home and nothing else
            assert namespace, "a runner user needs the namespace (root, unshare, setpriv)"
            for p in [home, *home.parents]:
                p.chmod(p.stat().st_mode | 0o005)  # its folders reachable, as /home is
            subprocess.run(["chown", "-R", f"{user}:{user}", str(home)], check=True)
        if namespace:
            self.holder = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c",
                 (f"{pid2} & " if pid2 else "")  # the namespace's pid 2, if given
                 + "mount -t tmpfs -o size=256m tmpfs /dev/shm && "
                 + (self._private_tmp() if user is not None else "")
                 + "exec \"$0\" -I -c \"$1\" " + INIT_NAME, sys.executable, INIT],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for _ in range(200):
                kids = subprocess.run(["pgrep", "-P", str(self.holder.pid)],
                                      capture_output=True, text=True).stdout.split()
                # the init itself (its last argument), not the shell still mounting before it
                try:  # the shell may have become the init (exec) or ended meanwhile
                    argv = Path(f"/proc/{kids[0]}/cmdline").read_bytes() if kids else b""
                except OSError:
                    argv = b""
                if argv.split(b"\0")[-2:] == [INIT_NAME.encode(), b""]:
                    self.ns_pid = int(kids[0])
                    break
                assert self.holder.poll() is None, self.holder.communicate()
                subprocess.run(["sleep", "0.05"])
            assert self.ns_pid, "the runner's namespace did not start"

    def _private_tmp(self) -> str:
        """Shell commands giving the namespace a /tmp of its own that still holds the folder
        this runner lives in: the cleanup removes what the runner's user owns in /tmp, and
        the other tests' runners of that user (another pytest worker) keep theirs."""
        # and what the jobs run: this checkout and its interpreter (a clean clone in /tmp)
        kept = [self.home.parent, Path(__file__).resolve().parents[1], Path(sys.prefix),
                Path(sys.base_prefix), Path(sys.executable).resolve().parent]
        new = "/dev/shm/.tmp"
        cmds = [f"mkdir {new}", f"mount -t tmpfs -o size=256m,mode=1777 tmpfs {new}"]
        under = [k for k in dict.fromkeys(kept) if k.is_relative_to("/tmp")]
        for keep in [k for k in under if not any(k != o and k.is_relative_to(o) for o in under)]:
            inside = shlex.quote(f"{new}/{keep.relative_to('/tmp')}")
            cmds += [f"mkdir -p {inside}", f"mount --bind {shlex.quote(str(keep))} {inside}"]
        cmds += [f"mount --move {new} /tmp", f"rmdir {new}"]
        return " && ".join(cmds) + " && "

    def own(self, *paths: Path) -> None:
        """Give what the runner made for a job (its temp folder, step files) to its user."""
        for p in paths:
            if self.user is not None:
                os.chown(p, self.user, self.user)

    @staticmethod
    def can_namespace() -> bool:
        return os.geteuid() == 0 and shutil.which("unshare") is not None \
            and shutil.which("nsenter") is not None

    def command(self, argv: list[str], cwd: Path) -> list[str]:
        if not self.ns_pid:
            return argv
        if self.user is not None:
            argv = ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--clear-groups",
                    "--", *argv]
        return ["nsenter", "-t", str(self.ns_pid), "-p", "-m", f"--wd={cwd}", "--", *argv]

    def close(self) -> None:
        if self.ns_pid:
            os.kill(self.ns_pid, signal.SIGKILL)  # the namespace's init: all in it end
            self.holder.communicate(timeout=30)
            self.ns_pid = 0


# The runner's interpreter, as its .env names it (PERFGATE_BASE_PYTHON). A venv it makes has
# no pip of its own: a job's `$venv/bin/python -m pip` runs this checkout's venv's pip in any
# case (the .env's PYTHONPATH comes before the venv's site-packages), so the copy ensurepip
# would install there, seconds of every job, would never run.
RUNNER_PYTHON = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = venv ]; then
  shift 2
  exec "{python}" -m venv --without-pip "$@"
fi
exec "{python}" "$@"
"""


def sandbox_unusable() -> str:
    """Why this machine cannot make the sandbox the pull-request and bisect jobs run their
    code in ('' where it can): no bwrap, or no namespaces for this user."""
    from pytest_perfgate.cli import _sandbox

    try:
        _sandbox.prepare(["true"], workspace="/", home="")
    except _sandbox.SandboxError as e:
        return f"the pull-request and bisect jobs need the sandbox: {e}"
    return ""


def user_python() -> str:
    """An interpreter of this Python's version that another user can run (this one may lie
    in a folder only root can enter), or "" when the machine has none."""
    name = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for folder in ("/usr/bin", "/usr/local/bin"):
        path = Path(folder, name)
        if path.is_file() and os.stat(path).st_mode & 0o001:
            return str(path)
    return ""


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s\\;]+)", re.M)


def pinned_here(text: str) -> str:
    """A constraints file's pins moved to the versions this interpreter has installed.

    The simulated runner installs from this venv (PIP_NO_INDEX, its site-packages on
    PYTHONPATH), as a runner provisioned from the pins would; but this venv holds whatever
    the index gave when it was made (a newer filelock, say), so a pin copied verbatim would
    fail the job's install for a reason that is not the workflow's. A package not installed
    here, or installed at the pin with a local label (torch's `+cpu`), keeps its pin. Hashes
    stay: pip checks no hash of a requirement already installed; --require-hashes only asks
    that each has one.
    """
    from importlib import metadata

    def here(m: re.Match[str]) -> str:
        try:
            have = metadata.version(m.group(1))
        except metadata.PackageNotFoundError:
            return m.group(0)
        return m.group(0) if have.split("+")[0] == m.group(2) else f"{m.group(1)}=={have}"

    return _PIN.sub(here, text)


def _read_pairs(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT / GITHUB_ENV: name=value lines and name<<DELIM heredocs."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        name, _, value = line.partition("=")
        out[name] = value
        i += 1
    return out


def run_job(job_id: str, event_name: str, event: dict[str, Any], sha: str, origin: Path,
            machine: Machine, leg: str, inputs: dict[str, str] | None = None, *,
            ref: str | None = None, workflow: str | None = None,
            approved: frozenset[str] = frozenset(), artifacts_from: Path | None = None,
            protected: frozenset[str] = frozenset({"perfgate-fork-pr"}),
            until: str | None = None, package: Path = ROOT) -> Job:
    """Run one matrix leg of a job. `origin` is <server>/acme/scratch.git; `workflow` is the
    YAML to use (a fork's copy, an older version), else the repository's; a job whose
    environment is in `protected` waits (runs nothing) unless it is in `approved`, as a
    required reviewer; `until` names the last step to run (the rest are not run at all);
    `package` is the folder the perf jobs import pytest_perfgate from (an older version's)."""
    wf = yaml.safe_load(workflow if workflow is not None else WORKFLOW.read_text())
    spec = wf["jobs"][job_id]
    # a job without a matrix (bisect) names its machine in an input: `leg` must be in its labels
    assert leg in spec.get("strategy", {}).get("matrix", {}).get("machine", [leg])
    server, repository = origin.parent.parent, f"{origin.parent.name}/{origin.stem}"
    machine.jobs += 1
    for name in ("perf-epyc", "perf-xeon"):  # the documented rule set, unless a test set others
        if not branch_rules(origin, f"perfgate-history/{name}").exists():
            set_branch_rules(origin, f"perfgate-history/{name}",
                             ("update", "non_fast_forward", "deletion"))
    run = machine.home / f"_diag/run-{machine.jobs}"
    workspace, temp, tools = machine.workspace, machine.home / "_work" / "_temp", \
        machine.home / "_tool"
    shutil.rmtree(temp, ignore_errors=True)  # the runner empties _temp for each job
    for d in (run, temp):
        d.mkdir(parents=True, exist_ok=True)
        machine.own(d)
    event = {"repository": {"default_branch": "main", "full_name": repository}, **event}
    event_path = run / "event.json"
    event_path.write_text(json.dumps(event))
    ref = ref or ("refs/heads/main" if event_name != "pull_request" else
                  f"refs/pull/{event['pull_request']['number']}/merge")
    github = {"event_name": event_name, "event": event, "sha": sha, "ref": ref,
              "repository": repository, "run_id": "4242", "token": "t0ken"}
    ctx: dict[str, Any] = {"github": github, "matrix": {"machine": leg},
                           "inputs": inputs or {}, "steps": {}, "env": {}, "_failed": False,
                           "runner": {"temp": str(temp), "tool_cache": str(tools), "os": "Linux"}}
    if "if" in spec and not condition(spec["if"], ctx):
        return Job()
    if "environment" in spec:
        env_name = substitute(spec["environment"], ctx)
        if env_name in protected and env_name not in approved:
            return Job(waiting_for=env_name)
    labels = [substitute(x, ctx) for x in spec["runs-on"]] \
        if isinstance(spec["runs-on"], list) else [spec["runs-on"]]
    hosted = labels == ["ubuntu-latest"]
    pools = (["self-hosted", "linux", "perf"], ["self-hosted", "linux", "perf-trusted"])
    assert hosted or (labels[:3] in pools and leg in labels), labels
    base_env = {"PATH": os.environ["PATH"], "HOME": str(machine.home), "LANG": "C.UTF-8",
                "CI": "true", "GIT_CONFIG_NOSYSTEM": "1",  # no identity but the workflow's
                "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workspace),
                "GITHUB_EVENT_NAME": event_name, "GITHUB_EVENT_PATH": str(event_path),
                "GITHUB_SHA": sha, "GITHUB_REF": ref, "GITHUB_RUN_ID": "4242",
                "GITHUB_REPOSITORY": repository, "GITHUB_SERVER_URL": f"file://{server}",
                "GITHUB_API_URL": f"file://{server}/api",
                "GITHUB_JOB": job_id, "RUNNER_TEMP": str(temp),
                "RUNNER_TOOL_CACHE": str(tools), "RUNNER_OS": "Linux"}
    if not hosted:  # the runner's .env: the packages come from this interpreter's venv
        base_env.update({"PERFGATE_BASE_PYTHON": machine.python, "PERFGATE_SANDBOX": SANDBOX,
                         "PYTHONPATH": f"{package}:{SITE_PACKAGES}",
                         "PIP_NO_BUILD_ISOLATION": "0", "PIP_NO_INDEX": "1"})
    env: dict[str, str] = {}
    for scope in (wf.get("env", {}), spec.get("env", {})):
        ctx["env"] = env
        env.update({k: substitute(v, ctx) for k, v in scope.items()})
    job = Job(labels=tuple(labels))
    shell = wf["defaults"]["run"]["shell"]
    assert shell == "bash"
    for n, step in enumerate(spec["steps"]):
        ctx["env"] = dict(env)
        name = step.get("name") or step.get("uses") or f"step {n}"
        sid = step.get("id", f"__{n}")
        if not condition(step.get("if", "success()"), ctx):
            ctx["steps"][sid] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
            continue
        with_ = {k: substitute(v, ctx) for k, v in step.get("with", {}).items()}
        code, out, outputs = 0, "", {}
        if "uses" in step:
            code, out = _simulate(step["uses"], with_, workspace, origin, sha, run,
                                  artifacts_from, machine, {**base_env, **env})
        else:
            files = {k: temp / f"_{k.lower()}_{n}" for k in ("GITHUB_OUTPUT", "GITHUB_ENV",
                                                             "GITHUB_STEP_SUMMARY", "GITHUB_PATH")}
            for f in files.values():
                f.write_text("")
            step_env = {k: substitute(v, ctx) for k, v in step.get("env", {}).items()}
            script = temp / f"_step_{n}.sh"
            script.write_text(substitute(step["run"], ctx))
            machine.own(script, *files.values())
            full = {**base_env, **env, **step_env, **{k: str(v) for k, v in files.items()}}
            argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)]
            done = subprocess.run(machine.command(argv, workspace), cwd=workspace, env=full,
                                  capture_output=True, text=True, timeout=300)
            code, out = done.returncode, done.stdout + done.stderr
            outputs = _read_pairs(files["GITHUB_OUTPUT"])
            env.update(_read_pairs(files["GITHUB_ENV"]))
            job.summary += files["GITHUB_STEP_SUMMARY"].read_text()
            for p in files["GITHUB_PATH"].read_text().splitlines():
                base_env["PATH"] = f"{p}:{base_env['PATH']}"
        job.annotations += [line for line in out.splitlines()
                            if re.match(r"::(error|warning|notice)\b", line)]
        outcome = "success" if code == 0 else "failure"
        conclusion = "success" if step.get("continue-on-error") else outcome
        job.steps.append({"name": name, "id": sid, "outcome": outcome, "code": code, "out": out,
                          "conclusion": conclusion})
        ctx["steps"][sid] = {"outputs": outputs, "outcome": outcome, "conclusion": conclusion}
        if code != 0 and not step.get("continue-on-error"):
            ctx["_failed"] = True
        if until is not None and until in (sid, name):
            break
    job.artifacts = run / "artifacts"
    return job


def branch_rules(origin: Path, branch: str) -> Path:
    """Where the simulated API (GITHUB_API_URL, file://) answers GET
    /repos/{owner}/{repo}/rules/branches/{branch}: the rules that apply to `branch`."""
    server, repository = origin.parent.parent, f"{origin.parent.name}/{origin.stem}"
    return server / "api" / "repos" / repository / "rules" / "branches" / branch


def set_branch_rules(origin: Path, branch: str, types: tuple[str, ...]) -> None:
    path = branch_rules(origin, branch)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"type": t, "ruleset_source_type": "Repository",
                                 "ruleset_source": origin.stem, "ruleset_id": 1}
                                for t in types]))


def _simulate(uses: str, with_: dict[str, str], workspace: Path, origin: Path, sha: str,
              run: Path, artifacts_from: Path | None, machine: Machine,
              env: dict[str, str]) -> tuple[int, str]:
    """The actions this workflow uses, as far as its steps depend on them. The checkout's
    git runs as the runner's user with the job's environment (its HOME, its git settings),
    as the action's does."""
    if uses.startswith("actions/checkout@"):
        assert with_.get("fetch-depth") == "0", "the steps need full history (merge base, tags)"
        assert str(with_.get("persist-credentials")).lower() == "false"

        served = dict(env)
        if machine.user is not None:  # the server's repository is not the runner user's
            system = run / "gitconfig-server"
            system.write_text(f"[safe]\n\tdirectory = {origin}\n")
            served.update({"GIT_CONFIG_NOSYSTEM": "0", "GIT_CONFIG_SYSTEM": str(system)})

        def git(*args: str, cwd: Path = workspace) -> None:
            done = subprocess.run(machine.command([*GIT, *args], cwd), cwd=cwd, env=served,
                                  capture_output=True, text=True)
            assert done.returncode == 0, f"checkout: git {args[0]}: {done.stderr}"

        if (workspace / ".git").is_dir():  # actions/checkout reuses a repository it finds
            git("fetch", "-q", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*")
            git("clean", "-qffdx")
        else:
            git("clone", "-q", "--no-checkout", str(origin), str(workspace),
                cwd=workspace.parent)
        git("checkout", "-qf", with_.get("ref") or sha)
        return 0, f"checked out {with_.get('ref') or sha}"
    if uses.startswith("actions/upload-artifact@"):
        src, dest = Path(with_["path"]), run / "artifacts" / with_["name"]
        if src.exists():
            shutil.copytree(src, dest)
        return 0, f"uploaded {src}"
    if uses.startswith("actions/download-artifact@"):
        src = (artifacts_from or run / "none") / with_["name"]
        if not src.is_dir():
            return 1, f"Unable to download artifact(s): not found: {with_['name']}"
        shutil.copytree(src, with_["path"], dirs_exist_ok=True)
        return 0, f"downloaded {with_['name']}"
    raise AssertionError(f"{uses} is not simulated: extend tests/{Path(__file__).name}")


# --- the scratch project the workflow tests run the jobs on --------------------------------

# The scratch project measures on a fake clock: its conftest.py (FAKE_CLOCK_CONFTEST, in
# every revision, so the A/B sides, fresh pairs, bisect probes and history runs of any commit
# use it) gives every pytest process of the project a FakeClock and no load guard, and
# mylib.step moves that clock by 2 ms per unit of WORK. A run takes no real measurement time
# and its verdicts are exact (a WORK=8 commit measures exactly 8x slower): these tests are
# about the workflow's plumbing (the timing itself: tests/test_timing.py). The ini's load
# limit (1000 cores) stays for a revision without the fake clock.
INI = """[pytest]
pythonpath = .
perfgate_windows = 6
perfgate_window_time = 0.1
perfgate_threshold = 30%
perfgate_load_limit = 1000
perfgate_ab_turns = 8
perfgate_ab_turn_time = 0.05
"""
PYPROJECT = """[project]
name = "scratch"
version = "0"

[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
py-modules = ["mylib"]
"""
LIB = ("CLOCK = None  # the project's fake clock: conftest.py sets it\n"
       "WORK = {work}\n\n\ndef step():\n{body}    CLOCK.advance(0.002 * WORK)\n")
# mylib gets the clock from the conftest (a test module's `from conftest import CLOCK` would
# find whichever conftest.py pytest loaded last: a pull request may add one under perf/)
CONFTEST = FAKE_CLOCK_CONFTEST + "\n\nimport mylib  # noqa: E402\n\nmylib.CLOCK = CLOCK\n"
PERF = ("import mylib\n\n\n"
        "def test_walk(perfgate):\n"
        "    perfgate.measure(mylib.step, transitions=64)\n")


def git(repo: Path, *args: str) -> str:
    """git with an identity (GIT) in `repo`; its output, stripped."""
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def commit(repo: Path, message: str, work: int = 1, crash: bool = False) -> str:
    body = "    raise RuntimeError('the workload broke')\n" if crash else ""
    (repo / "mylib.py").write_text(LIB.format(work=work, body=body))
    (repo / "notes.txt").write_text(message + "\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def make_scratch(where: Path) -> tuple[Path, Path]:
    """The scratch project's origin and developer clone, made under `where`."""
    origin, dev = where / "server" / "acme" / "scratch.git", where / "dev"
    origin.parent.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(dev)], check=True,
                   capture_output=True)
    (dev / "perf").mkdir()
    (dev / "perf" / "test_perf_walk.py").write_text(PERF)
    (dev / "pytest.ini").write_text(INI)
    (dev / "conftest.py").write_text(CONFTEST)
    (dev / "pyproject.toml").write_text(PYPROJECT)
    (dev / "constraints").mkdir()
    (dev / "constraints" / "perf.txt").write_text(
        pinned_here((ROOT / "constraints" / "perf.txt").read_text()))
    (dev / ".gitignore").write_text("__pycache__/\n")
    commit(dev, "v0.1")
    git(dev, "tag", "v0.1")
    commit(dev, "C1")
    git(dev, "push", "-q", "origin", "main", "--tags")
    return origin, dev


# the history branch of the scratch project's perf machine
BRANCH = "perfgate-history/perf-xeon"


def history(dev: Path, files: dict[str, str]) -> str:
    """Push a history branch holding `files`; return its tip."""
    tree = dev.parent / "history-seed"
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "history")
    git(tree, "push", "-q", str(dev / ".git"), f"HEAD:refs/heads/{BRANCH}")
    git(dev, "push", "-q", "origin", BRANCH)
    return git(tree, "rev-parse", "HEAD")
