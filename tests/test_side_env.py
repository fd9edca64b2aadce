"""Each A/B side in the environment its own declarations pin (pytest_perfgate/envs/): a
dependency bump is measured, named, and an unbuildable base environment is an
infrastructure error. A scratch project, a local wheelhouse holding ``slowpkg`` at two
versions (2.0 costs 1.5x per step), the fake clock: exact verdicts in no real time."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fake_session import FAKE_CLOCK_CONFTEST
from helpers import ARGS, git, project_start

from pytest_perfgate.envs import declarations
from pytest_perfgate.envs.build import EnvBuildError, build, overlay_for
from pytest_perfgate.history.environment import installed

PERF = """
import slowpkg
from conftest import CLOCK

def test_walk(perfgate):
    perfgate.measure(lambda: CLOCK.advance(0.002 * slowpkg.COST), transitions=8)
"""


def make_wheel(folder: Path, name: str, version: str, body: str) -> Path:
    """A pure-Python wheel, written as the wheel spec says (no build backend needed)."""
    files = {f"{name}/__init__.py": body,
             f"{name}-{version}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL":
                 "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = f"{name}-{version}.dist-info/RECORD"
    lines = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        lines.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[record] = "\n".join([*lines, f"{record},,"]) + "\n"
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return out


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh = tmp_path_factory.mktemp("wheelhouse")
    make_wheel(wh, "slowpkg", "1.0", "COST = 1.0\n")
    make_wheel(wh, "slowpkg", "2.0", "COST = 1.5\n")
    return wh


def uv() -> str:
    found = Path(sys.executable).parent / "uv"
    if not found.is_file():
        pytest.skip("uv is not installed beside this Python (pip install uv; dev extra)")
    return str(found)


def head_env(where: Path, wheelhouse: Path, version: str) -> Path:
    """The user's environment: this test run's own, with slowpkg ``version`` installed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    purelib = subprocess.run([str(where / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    import site
    Path(purelib, "_test_reference.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages()))
    subprocess.run([uv(), "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--find-links", str(wheelhouse), "--python", str(where / "bin" / "python"),
                    f"slowpkg=={version}"], check=True)
    return where / "bin" / "python"


def project(p: pytest.Pytester, base_req: str, head_req: str, head_extra: str = "") -> None:
    project_start(p)
    p.makepyfile(test_perf=PERF)
    (p.path / "requirements.txt").write_text(base_req)
    (p.path / "pyproject.toml").write_text("[project]\nname = 'scratch'\nversion = '0'\n")
    git(p, "add", "-A")
    git(p, "commit", "-qm", "base")
    (p.path / "requirements.txt").write_text(head_req)
    if head_extra:
        (p.path / "pyproject.toml").write_text(head_extra)
    git(p, "commit", "-qam", "head: bump")


def run_ab(p: pytest.Pytester, python: Path, wheelhouse: Path, cache: Path,
           *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UV_FIND_LINKS": str(wheelhouse), "UV_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(wheelhouse), "PIP_NO_INDEX": "1",
           "PERFGATE_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([str(python), "-m", "pytest", *ARGS, "--perfgate-json=report.json",
                           *extra], cwd=p.path, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow  # real side processes, git worktrees, uv builds
def test_a_bump_in_requirements_is_a_regression_naming_the_package(
        pytester: pytest.Pytester, wheelhouse: Path, tmp_path: Path) -> None:
    project(pytester, "slowpkg==1.0\n", "slowpkg==2.0\n")
    python = head_env(tmp_path / "head", wheelhouse, "2.0")
    cache = tmp_path / "cache"
    res = run_ab(pytester, python, wheelhouse, cache)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    rep = json.loads((pytester.path / "report.json").read_text())["benchmarks"][0]
    assert rep["verdict"] == "REGRESSION", rep["message"]
    assert 0.6 < rep["ratio"] < 0.72  # 1/1.5, exact on the fake clock
    assert "Since the base: slowpkg 1.0 -> 2.0" in rep["message"]
    assert rep["environment_changes"] == [{"name": "slowpkg", "before": "1.0", "after": "2.0"}]
    assert "the base runs in its own environment" in res.stdout
    (built,) = [d for d in (cache / "envs").iterdir() if d.is_dir()]
    assert json.loads((built / "perfgate-env.json").read_text())["overlay"] == {"slowpkg": "1.0"}
    again = run_ab(pytester, python, wheelhouse, cache)  # the environment is reused
    assert again.returncode == 1 and "(cached)" in again.stdout, again.stdout[-2000:]


@pytest.mark.slow  # real side processes, git worktrees, uv builds
def test_an_unrelated_declaration_edit_builds_nothing_and_passes(
        pytester: pytest.Pytester, wheelhouse: Path, tmp_path: Path) -> None:
    ruff = "[project]\nname = 'scratch'\nversion = '0'\n\n[tool.ruff]\nline-length = 99\n"
    project(pytester, "slowpkg==2.0\n", "# pinned for speed\nslowpkg==2.0\n", head_extra=ruff)
    python = head_env(tmp_path / "head", wheelhouse, "2.0")
    cache = tmp_path / "cache"
    res = run_ab(pytester, python, wheelhouse, cache)
    assert res.returncode == 0, res.stdout[-3000:]
    rep = json.loads((pytester.path / "report.json").read_text())["benchmarks"][0]
    assert rep["verdict"] == "OK" and rep["environment_changes"] == []
    assert not (cache / "envs").exists()


@pytest.mark.slow  # real side processes, git worktrees, uv builds
def test_a_base_environment_that_cannot_be_built_is_an_infrastructure_error(
        pytester: pytest.Pytester, wheelhouse: Path, tmp_path: Path) -> None:
    project(pytester, "slowpkg==9.9\n", "slowpkg==2.0\n")
    python = head_env(tmp_path / "head", wheelhouse, "2.0")
    res = run_ab(pytester, python, wheelhouse, tmp_path / "cache")
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    out = res.stdout + res.stderr
    assert "infrastructure error: cannot build the environment the base HEAD~1 declares" in out
    assert "slowpkg" in out and "run it yourself to see why: " in out
    assert not (pytester.path / "report.json").exists()  # nothing measured, no verdict


def test_the_overlay_holds_the_reference_versions_but_the_overlaid_one(
        wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what differs is laid over the reference, and every other distribution the side
    imports is the reference's, at the reference's version: as a full build would pin it."""
    uv()
    ref, editable = installed()
    monkeypatch.setenv("UV_FIND_LINKS", str(wheelhouse))
    monkeypatch.setenv("UV_NO_INDEX", "1")
    python, tool, cached = build({"slowpkg": "1.0"}, tmp_path, ref)
    assert (tool, cached) == ("uv", False)
    got = json.loads(subprocess.run(
        [python, "-c", "import json, importlib.metadata as m; print(json.dumps({d.metadata"
         "['Name']: d.version for d in m.distributions()}))"],
        capture_output=True, text=True, check=True).stdout)
    from pytest_perfgate.history.environment import canonical
    seen = {canonical(k): v for k, v in reversed(list(got.items()))}
    assert seen.pop("slowpkg") == "1.0"
    assert {k: v for k, v in seen.items() if k not in editable} == ref
    # what the reference already holds is not laid over, nor a package nobody asked for
    pins = {"slowpkg": "1.0", "pytest": ref["pytest"], "notinstalled": "1"}
    assert overlay_for(pins, ref, direct={"slowpkg"}) == {"slowpkg": "1.0"}
    assert overlay_for({**pins, "pytest": "0.1"}, ref, direct=set()) == {"pytest": "0.1"}


def test_declarations_compare_by_meaning(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for t in (a, b):
        (t / "requirements").mkdir(parents=True)
    (a / "requirements.txt").write_text("numpy==2.1  # fast\n\nscipy\n")
    (b / "requirements.txt").write_text("# a comment\nnumpy==2.1\nscipy\n")
    (a / "pyproject.toml").write_text("[project]\ndependencies = ['gymnasium']\n")
    (b / "pyproject.toml").write_text("[project]\ndependencies = ['gymnasium']\n"
                                      "[tool.ruff]\nline-length = 99\n")
    assert declarations.changed(a, b) == []
    (b / "requirements" / "gpu.txt").write_text("torch==2.13.0\n")
    (b / "pyproject.toml").write_text("[project]\ndependencies = ['gymnasium>=1']\n")
    assert declarations.changed(a, b) == ["pyproject.toml", "requirements/gpu.txt"]
    for t in (a, b):
        (t / "uv.lock").write_bytes(b"\xff\xfe")  # garbage: named, before anything runs
    with pytest.raises(declarations.DeclarationError, match="uv.lock"):
        declarations.changed(a, b)
    assert EnvBuildError.__doc__  # an infrastructure error, never a verdict


# --- history mode: the re-measure path (the record cannot decide, as under a CPU hog) ------

HISTORY = ["--perfgate", "--perfgate-machine=box", "--perfgate-threshold=10%",
           "--perfgate-windows=4", "--perfgate-window-time=0.1", "--perfgate-ab-turns=8",
           "--perfgate-ab-turn-time=0.05", "-p", "no:cacheprovider", "-p", "no:randomly",
           "--perfgate-json=report.json"]
PERF_SLOW = PERF.replace("0.002 * slowpkg.COST",
                         "0.002 * slowpkg.COST * float(__import__('os').environ['SLOW'])")


def history_run(repo: Path, python: Path, wheelhouse: Path, cache: Path, slow: float = 1.0
                ) -> tuple[dict[str, object], str, int]:
    env = {**os.environ, "UV_FIND_LINKS": str(wheelhouse), "UV_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(wheelhouse), "PIP_NO_INDEX": "1",
           "PERFGATE_CACHE_DIR": str(cache), "SLOW": str(slow)}
    for k in ("PYTEST_ADDOPTS", "PERFGATE_MACHINE", "PERFGATE_RESULTS_DIR"):
        env.pop(k, None)
    (repo / "report.json").unlink(missing_ok=True)
    done = subprocess.run([str(python), "-m", "pytest", *HISTORY], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    report = repo / "report.json"
    (entry,) = json.loads(report.read_text())["benchmarks"] if report.exists() else [{}]
    return entry, " ".join((done.stdout + done.stderr).split()), done.returncode


def history_project(p: pytest.Pytester, base_req: str, head_req: str, first: Path,
                    wheelhouse: Path, cache: Path) -> None:
    """A base commit with one recorded run (too few to resolve anything: the record is
    INCONCLUSIVE and the baseline commit is measured again), then the head commit."""
    git(p, "init", "-q")
    git(p, "config", "user.email", "t@example.com")
    git(p, "config", "user.name", "t")
    p.makeini("[pytest]\nperfgate_results_dir = results\n")
    (p.path / ".gitignore").write_text("results/\nreport.json\n__pycache__/\n")
    p.makeconftest(FAKE_CLOCK_CONFTEST)
    p.makepyfile(test_perf=PERF_SLOW)
    (p.path / "requirements.txt").write_text(base_req)
    git(p, "add", "-A")
    git(p, "commit", "-qm", "base")
    entry, out, rc = history_run(p.path, first, wheelhouse, cache)
    assert (rc, entry["verdict"]) == (0, "NO BASELINE"), out
    (p.path / "requirements.txt").write_text(head_req)
    (p.path / "n.txt").write_text("head")
    git(p, "add", "-A")
    git(p, "commit", "-qm", "head")


@pytest.mark.slow  # real side processes, git worktrees, uv builds
def test_history_a_declared_bump_is_a_regression_naming_it_when_re_measured(
        pytester: pytest.Pytester, wheelhouse: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    history_project(pytester, "slowpkg==1.0\n", "slowpkg==2.0\n",
                    head_env(tmp_path / "v1", wheelhouse, "1.0"), wheelhouse, cache)
    entry, out, rc = history_run(pytester.path, head_env(tmp_path / "v2", wheelhouse, "2.0"),
                                 wheelhouse, cache)
    assert (rc, entry["verdict"]) == (1, "REGRESSION"), out
    assert str(entry["message"]).startswith("re-measured: the record could not resolve")
    assert "Since the base: slowpkg 1.0 -> 2.0" in str(entry["message"])
    assert 0.6 < float(entry["ratio"]) < 0.72  # type: ignore[arg-type]
    assert entry["environment_changes"] == [{"name": "slowpkg", "before": "1.0",
                                             "after": "2.0"}]


@pytest.mark.slow  # real side processes, git worktrees, uv builds
def test_history_an_undeclared_upgrade_is_named_as_where_the_drop_is(
        pytester: pytest.Pytester, wheelhouse: Path, tmp_path: Path) -> None:
    """Nothing in git changed what slowpkg is: the base commit measured again in today's
    environment is as slow as the head. The record and the re-measure disagree, and the
    environment, not the code, moved: a REGRESSION naming it, never an INCONCLUSIVE pass."""
    cache = tmp_path / "cache"
    history_project(pytester, "slowpkg\n", "slowpkg\n",
                    head_env(tmp_path / "v1", wheelhouse, "1.0"), wheelhouse, cache)
    entry, out, rc = history_run(pytester.path, head_env(tmp_path / "v2", wheelhouse, "2.0"),
                                 wheelhouse, cache)
    assert (rc, entry["verdict"]) == (1, "REGRESSION"), out
    message = str(entry["message"])
    assert "below the baseline runs" in message and "the drop is not in the code" in message
    assert "it is in the environment, which changed since the baseline runs: slowpkg 1.0 -> " \
           "2.0" in message
    assert not (cache / "envs").exists()  # same declarations: one environment for both


@pytest.mark.slow  # real side processes, git worktrees, uv builds
def test_history_a_machine_that_moved_is_unstable_with_its_figures(
        pytester: pytest.Pytester, wheelhouse: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    python = head_env(tmp_path / "v2", wheelhouse, "2.0")
    history_project(pytester, "slowpkg==2.0\n", "slowpkg==2.0\n", python, wheelhouse, cache)
    # the same code and environment, on a machine now twice as slow
    entry, out, rc = history_run(pytester.path, python, wheelhouse, cache, slow=2.0)
    assert (rc, entry["verdict"]) == (1, "UNSTABLE"), out
    message = str(entry["message"])
    assert "nor in the environment (the baseline runs had this one): the machine's speed " \
           "moved (load average" in message and "governor" in message


@pytest.mark.slow  # real side processes, git worktrees, uv builds
def test_history_an_unbuildable_baseline_environment_is_never_a_pass(
        pytester: pytest.Pytester, wheelhouse: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    history_project(pytester, "slowpkg==1.0\n", "slowpkg==2.0\n",
                    head_env(tmp_path / "v1", wheelhouse, "1.0"), wheelhouse, cache)
    (wheelhouse / "slowpkg-1.0-py3-none-any.whl").rename(tmp_path / "away.whl")
    try:
        env_rm = head_env(tmp_path / "v2", wheelhouse, "2.0")
        entry, out, rc = history_run(pytester.path, env_rm, wheelhouse, cache)
    finally:
        (tmp_path / "away.whl").rename(wheelhouse / "slowpkg-1.0-py3-none-any.whl")
    assert rc not in (0, 5) and entry.get("verdict") != "OK", out
    assert "needs the environment its dependency declarations pin, which cannot be built" \
           in out and "slowpkg" in out, out


@pytest.mark.slow  # real probes: side processes, git worktrees, uv builds
def test_bisect_names_the_commit_that_bumped_the_pin(
        pytester: pytest.Pytester, wheelhouse: Path, tmp_path: Path) -> None:
    """Installed for the newest commit (slowpkg 2.0), each probed commit still runs on what it
    pins: the bump is the first bad commit, not the oldest one the installed 2.0 slows."""
    p = pytester
    git(p, "init", "-q", "-b", "main")
    git(p, "config", "user.email", "t@example.com")
    git(p, "config", "user.name", "t")
    (p.path / "pytest.ini").write_text("[pytest]\nperfgate_machine = bisect\n")
    (p.path / ".gitignore").write_text("__pycache__/\n.perfgate/\n")
    p.makeconftest(FAKE_CLOCK_CONFTEST)
    p.makepyfile(test_perf=PERF)
    commits = []
    for i, pin in enumerate(["1.0", "1.0", "1.0", "2.0", "2.0"]):
        (p.path / "requirements.txt").write_text(f"slowpkg=={pin}\n")
        (p.path / "n.txt").write_text(str(i))
        git(p, "add", "-A")
        git(p, "commit", "-qm", f"commit {i}" + (" (bump)" if i == 3 else ""))
        commits.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=p.path, text=True,
                                      capture_output=True, check=True).stdout.strip())
    python = head_env(tmp_path / "v2", wheelhouse, "2.0")
    env = {**os.environ, "UV_FIND_LINKS": str(wheelhouse), "UV_NO_INDEX": "1",
           "PERFGATE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run([str(python), "-m", "pytest_perfgate.cli", "bisect", "--turns", "8",
                           "--turn-time", "0.05", "--threshold", "10%", commits[0], "HEAD",
                           "test_perf.py"], cwd=p.path, env=env, capture_output=True,
                          text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert f'first bad commit: {commits[3][:10]} "commit 3 (bump)"' in out, out


def test_lock_files_and_pyproject_give_the_resolver_what_they_declare(tmp_path: Path) -> None:
    from pytest_perfgate.envs.build import inputs

    (tmp_path / "uv.lock").write_text(
        'version = 1\n[[package]]\nname = "NumPy"\nversion = "2.2.0"\n'
        '[[package]]\nname = "me"\nversion = "0.1"\nsource = { editable = "." }\n')
    (tmp_path / "poetry.lock").write_text('[[package]]\nname = "gymnasium"\nversion = "1.0.0"\n')
    (tmp_path / "Pipfile.lock").write_text(json.dumps(
        {"default": {"torch": {"version": "==2.13.0"}}, "develop": {"x": {"git": "u"}}}))
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'me'\ndependencies = ['mujoco-core>=4.0.1', 'me[extra]']\n"
        "[project.optional-dependencies]\nplot = ['matplotlib']\n")
    (tmp_path / "requirements-dev.txt").write_text("-e .\npytest>=8  # tests\n")
    (tmp_path / "constraints.txt").write_text("numpy<3\n")
    got = inputs(tmp_path, ["uv.lock", "poetry.lock", "Pipfile.lock", "pyproject.toml",
                            "requirements-dev.txt", "constraints.txt", "gone.txt"])
    assert got.pins == {"numpy": "2.2.0", "gymnasium": "1.0.0", "torch": "2.13.0"}
    assert got.requirements == ["mujoco-core>=4.0.1", "matplotlib"]
    assert got.direct() == {"mujoco-core", "matplotlib", "pytest"}
    assert [f.name for f in got.constraint_files] == ["constraints.txt"]
    (tmp_path / "constraints").mkdir()  # a folder of them, as this project's own
    (tmp_path / "constraints" / "perf.txt").write_text("numpy==2.2.0 --hash=sha256:00\n")
    assert inputs(tmp_path, ["constraints/perf.txt"]).constraint_files == [
        tmp_path / "constraints" / "perf.txt"]
    (tmp_path / "environment.yml").write_text("dependencies:\n  - numpy=1.26\n")
    with pytest.raises(EnvBuildError, match="environment.yml changed, and perfgate builds "
                                            "environments with uv or pip, not conda"):
        inputs(tmp_path, ["environment.yml"])
    (tmp_path / "uv.lock").write_text("not = [toml")
    with pytest.raises(EnvBuildError, match="cannot read the lock file .*uv.lock"):
        inputs(tmp_path, ["uv.lock"])


def test_parse_env_files() -> None:
    from pytest_perfgate.session.options import OptionError, parse_env_files

    assert parse_env_files("requirements*.txt, uv.lock") == ("requirements*.txt", "uv.lock")
    assert parse_env_files("none") == ()
    for bad, said in (("", "names no file"), ("../x.txt", "not a path inside the project"),
                      ("/etc/req.txt", "not a path inside the project")):
        with pytest.raises(OptionError, match=said):
            parse_env_files(bad)


@pytest.mark.slow  # pip resolves and installs
def test_without_uv_pip_resolves_and_builds_the_same_overlay(
        wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_perfgate.envs import build as env_build

    monkeypatch.setattr(env_build, "find_uv", lambda: None)
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheelhouse))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "requirements-dev.txt").write_text("-e .\n-r requirements.txt\n")
    (tree / "requirements.txt").write_text("slowpkg==1.0  # pinned\n")
    env = env_build.side_env(tree, ["requirements-dev.txt"], tmp_path / "cache")
    assert env is not None and (env.tool, dict(env.overlay)) == ("pip", {"slowpkg": "1.0"})
    got = subprocess.run([env.python, "-c", "import slowpkg, pytest; print(slowpkg.COST)"],
                         capture_output=True, text=True, check=True).stdout
    assert got.strip() == "1.0"  # slowpkg from the overlay, pytest from the reference


def test_a_reference_checkout_that_is_no_folder_is_refused_naming_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_perfgate.envs.build import side_envs
    from pytest_perfgate.envs.declarations import DeclarationError

    monkeypatch.setenv("PERFGATE_ENV_REFERENCE", str(tmp_path / "gone"))
    with pytest.raises(DeclarationError) as e:
        side_envs(tmp_path, tmp_path, None)
    assert str(e.value) == (f"PERFGATE_ENV_REFERENCE={str(tmp_path / 'gone')!r} is not a "
                            "folder: it names the checkout this environment was installed "
                            "for (perfgate bisect sets it for its probes); unset it")
