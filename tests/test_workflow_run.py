"""The perf workflow's own `run:` steps, executed locally as a runner would, against a scratch
git repository with a tiny perf suite: pass, regression and infrastructure error, for the
pull-request job and the default-branch job.

What is real: every `run:` script of .github/workflows/perfgate.yml (parsed with PyYAML,
`${{ }}` expressions evaluated from a context built here), bash with Actions' `shell: bash`
flags, the runner's file contract (GITHUB_OUTPUT, GITHUB_ENV, GITHUB_STEP_SUMMARY, ...),
`if:` conditions, pytest --perfgate (history and A/B mode) with real timing, git, perfgate
check and report. What is simulated, by this file: the steps that only `uses:` an action
(actions/checkout: a full clone of the scratch origin at the ref; actions/upload-artifact:
a copy of `path`), the matrix (one leg), the concurrency group (not enforced), and the
runner's `.env` file (PERFGATE_ENV_PYTHON: this interpreter, PYTHONPATH: this checkout).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "perfgate.yml"
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

@dataclass
class Job:
    steps: list[dict[str, Any]] = field(default_factory=list)  # name, id, outcome, code, out
    summary: str = ""
    annotations: list[str] = field(default_factory=list)
    artifacts: Path | None = None

    def step(self, id_or_name: str) -> dict[str, Any]:
        found = [s for s in self.steps if id_or_name in (s["id"], s["name"])]
        assert found, f"no step {id_or_name!r} ran: {[s['name'] for s in self.steps]}"
        return found[0]

    @property
    def failed(self) -> bool:
        return any(s["outcome"] == "failure" for s in self.steps)


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
            home: Path, machine: str, inputs: dict[str, str] | None = None) -> Job:
    wf = yaml.safe_load(WORKFLOW.read_text())
    spec = wf["jobs"][job_id]
    assert machine in spec["strategy"]["matrix"]["machine"]
    run = home / f"run-{len(list(home.glob('run-*')))}"
    workspace, temp, tools = run / "workspace", run / "temp", home / "tool-cache"
    for d in (workspace, temp, tools):
        d.mkdir(parents=True, exist_ok=True)
    event_path = run / "event.json"
    event_path.write_text(json.dumps(event))
    ref = "refs/heads/main" if event_name != "pull_request" else \
        f"refs/pull/{event['pull_request']['number']}/merge"
    github = {"event_name": event_name, "event": event, "sha": sha, "ref": ref,
              "repository": "acme/scratch", "run_id": "4242"}
    ctx: dict[str, Any] = {"github": github, "matrix": {"machine": machine},
                           "inputs": inputs or {}, "steps": {}, "env": {}, "_failed": False,
                           "runner": {"temp": str(temp), "tool_cache": str(tools), "os": "Linux"}}
    if "if" in spec and not condition(spec["if"], ctx):
        return Job()
    labels = [substitute(x, ctx) for x in spec["runs-on"]]
    assert labels[:3] == ["self-hosted", "linux", "perf"] and machine in labels
    base_env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "CI": "true",
                "PYTHONPATH": str(ROOT), "PERFGATE_ENV_PYTHON": sys.executable,  # runner .env
                "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workspace),
                "GITHUB_EVENT_NAME": event_name, "GITHUB_EVENT_PATH": str(event_path),
                "GITHUB_SHA": sha, "GITHUB_REF": ref, "GITHUB_RUN_ID": "4242",
                "GITHUB_REPOSITORY": "acme/scratch", "RUNNER_TEMP": str(temp),
                "RUNNER_TOOL_CACHE": str(tools), "RUNNER_OS": "Linux"}
    env: dict[str, str] = {}
    for scope in (wf.get("env", {}), spec.get("env", {})):
        ctx["env"] = env
        env.update({k: substitute(v, ctx) for k, v in scope.items()})
    job = Job()
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
            code, out = _simulate(step["uses"], with_, workspace, origin, sha, run)
        else:
            files = {k: temp / f"_{k.lower()}_{n}" for k in ("GITHUB_OUTPUT", "GITHUB_ENV",
                                                             "GITHUB_STEP_SUMMARY", "GITHUB_PATH")}
            for f in files.values():
                f.write_text("")
            step_env = {k: substitute(v, ctx) for k, v in step.get("env", {}).items()}
            script = temp / f"_step_{n}.sh"
            script.write_text(substitute(step["run"], ctx))
            full = {**base_env, **env, **step_env, **{k: str(v) for k, v in files.items()}}
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail",
                                   str(script)], cwd=workspace, env=full, capture_output=True,
                                  text=True, timeout=240)
            code, out = done.returncode, done.stdout + done.stderr
            outputs = _read_pairs(files["GITHUB_OUTPUT"])
            env.update(_read_pairs(files["GITHUB_ENV"]))
            job.summary += files["GITHUB_STEP_SUMMARY"].read_text()
            for p in files["GITHUB_PATH"].read_text().splitlines():
                base_env["PATH"] = f"{p}:{base_env['PATH']}"
        job.annotations += [line for line in out.splitlines()
                            if re.match(r"::(error|warning|notice)\b", line)]
        outcome = "success" if code == 0 else "failure"
        job.steps.append({"name": name, "id": sid, "outcome": outcome, "code": code, "out": out})
        ctx["steps"][sid] = {"outputs": outputs, "outcome": outcome,
                             "conclusion": "success" if step.get("continue-on-error") else outcome}
        if code != 0 and not step.get("continue-on-error"):
            ctx["_failed"] = True
    job.artifacts = run / "artifacts"
    return job


def _simulate(uses: str, with_: dict[str, str], workspace: Path, origin: Path, sha: str,
              run: Path) -> tuple[int, str]:
    """The actions this workflow uses, as far as its steps depend on them."""
    if uses.startswith("actions/checkout@"):
        assert with_.get("fetch-depth") == "0", "the steps need full history (merge base, tags)"
        subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)
        subprocess.run([*GIT, "checkout", "-q", with_.get("ref") or sha], cwd=workspace,
                       check=True)
        return 0, f"checked out {with_.get('ref') or sha}"
    if uses.startswith("actions/upload-artifact@"):
        src, dest = Path(with_["path"]), run / "artifacts" / with_["name"]
        if src.exists():
            shutil.copytree(src, dest)
        return 0, f"uploaded {src}"
    raise AssertionError(f"{uses} is not simulated: extend tests/{Path(__file__).name}")


# --- the scratch project ---------------------------------------------------------------------

# The load guard is off (a 1000-core limit): the helpers sharing this machine keep it busy,
# and this test is about the workflow's plumbing; the guard is tested on fake /proc files.
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
    assert f"## perfgate: perf-epyc: PR vs merge base {base[:10]}: passed: " in ok.summary
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
