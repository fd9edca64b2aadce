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
from helpers import ARGS, git

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
    git(p, "init", "-q")
    git(p, "config", "user.email", "t@example.com")
    git(p, "config", "user.name", "t")
    p.makeini("[pytest]\nperfgate_results_dir = results\n")
    p.makeconftest(FAKE_CLOCK_CONFTEST)
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
