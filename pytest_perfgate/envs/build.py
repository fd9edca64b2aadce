"""A side's environment: the reference environment (the one perfgate runs in) with what the
side's declarations pin differently laid over it; built by uv (pip as the fallback), cached
by what it holds.

The resolver is the installer's own (``uv pip compile`` preferring the installed versions;
pip's ``install --dry-run --report``, which keeps what is installed and satisfies); perfgate
only reads its answer. The overlay is a venv of the same interpreter whose one ``.pth`` adds
the reference's site-packages *after* its own: the overlay's versions win, everything else
(pytest, perfgate, the project's editable install) is the reference's. The build checks that
the overlay imports the versions it was built for, and the reference's for the rest.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_perfgate.envs import declarations
from pytest_perfgate.envs.inputs import EnvBuildError, Inputs, inputs, portable

__all__ = ["ENV_REFERENCE", "EnvBuildError", "Inputs", "SideEnv", "build", "inputs",
           "overlay_for", "side_env", "side_envs"]

RESOLVE_TIMEOUT_S = 600.0
MARKER = "perfgate-env.json"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#\\]+)")


@dataclass(frozen=True)
class SideEnv:
    """The interpreter a side starts with, and what differs from the reference."""

    python: str
    overlay: Mapping[str, str]  # name -> version the side runs
    replaced: Mapping[str, str | None]  # name -> the reference's version (None: absent)
    tool: str = ""
    seconds: float = 0.0
    cached: bool = False
    declarations: tuple[str, ...] = field(default_factory=tuple)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_uv() -> str | None:
    """uv as its Python package installs it (``pip install uv``: importable from this
    interpreter, also through a venv laid over another), else on PATH."""
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _run(cmd: Sequence[str], what: str, cwd: Path | None = None,
         timeout: float = RESOLVE_TIMEOUT_S) -> str:
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EnvBuildError(f"{what}: `{shlex.join(cmd)}` took more than {timeout:.0f} s: "
                            "run it yourself to see where it waits") from None
    except OSError as e:
        raise EnvBuildError(f"{what}: cannot run `{shlex.join(cmd)}`: {e}") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip())[-1500:]
        raise EnvBuildError(f"{what} failed (exit {proc.returncode}): {tail}\nrun it yourself "
                            f"to see why: {shlex.join(cmd)}")
    return proc.stdout


def resolve(got: Inputs, installed: Mapping[str, str], python: str, work: Path
            ) -> tuple[dict[str, str], str]:
    """Every version the declarations resolve to, preferring what is installed; and the
    tool that resolved them."""
    pins = dict(got.pins)
    if not (got.requirement_files or got.requirements or got.constraint_files):
        return pins, "lock file"
    reqs = work / "pyproject-requirements.txt"
    reqs.write_text("\n".join(got.requirements) + "\n")
    files = [*(portable(f, work, i) for i, f in enumerate(got.requirement_files)),
             *([reqs] if got.requirements else [])]
    constraints = [portable(c, work, 100 + i) for i, c in enumerate(got.constraint_files)]
    files = files or constraints  # only constraints changed: they pin what they name
    uv = find_uv()
    if uv is not None:
        out = work / "resolved.txt"  # uv prefers the versions an existing output pins
        out.write_text("".join(f"{n}=={v}\n" for n, v in sorted(installed.items())))
        cmd = [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate",
               "--python", python, "-o", str(out)]
        for f in files:
            cmd.append(str(f))
        for c in constraints:
            cmd += ["-c", str(c)]
        _run(cmd, "resolving the declared dependencies (uv pip compile)")
        for line in out.read_text().splitlines():
            if m := _PIN.match(line.strip()):
                pins.setdefault(_canonical(m.group(1)), m.group(2))
        return pins, "uv"
    report = work / "report.json"
    cmd = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
           "--report", str(report)]
    for f in files:
        cmd += ["-r", str(f)]
    for c in constraints:
        cmd += ["-c", str(c)]
    _run(cmd, "resolving the declared dependencies (pip install --dry-run)")
    try:
        data = json.loads(report.read_text())
        for item in data.get("install") or []:
            meta = item.get("metadata") or {}
            pins.setdefault(_canonical(meta["name"]), meta["version"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise EnvBuildError(f"pip's resolution report {report} is unreadable ({e}): install "
                            "uv (pip install uv) to resolve with it instead") from None
    return pins, "pip"


def overlay_for(pins: Mapping[str, str], installed: Mapping[str, str], direct: set[str],
                editable: Sequence[str] = ()) -> dict[str, str]:
    """What must differ from the reference: pinned packages it has at another version, and
    declared ones it lacks; never the project's own editable install."""
    return {n: v for n, v in sorted(pins.items())
            if n not in editable and installed.get(n) != v and (n in installed or n in direct)}


def _site_dirs() -> list[str]:
    """The reference's site-packages, in its order."""
    dirs = list(site.getsitepackages())
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_VERIFY = ("import importlib.metadata as m, json, sys\n"
           "def v(n):\n"
           "    try: return m.version(n)\n"
           "    except Exception: return None\n"
           "print(json.dumps({n: v(n) for n in sys.argv[1:]}))\n")


def build(overlay: Mapping[str, str], cache: Path, installed: Mapping[str, str],
          python: str = sys.executable) -> tuple[str, str, bool]:
    """(interpreter, tool, cached) of the reference with ``overlay`` laid over it, built once
    per content under ``cache``/envs; concurrent builds of one content wait for each other."""
    key = hashlib.sha256(json.dumps([os.path.realpath(python), sys.version, _site_dirs(),
                                     sorted(overlay.items())]).encode()).hexdigest()[:16]
    root = cache / "envs"
    final = root / key
    bin_python = final / "bin" / "python"
    if (final / MARKER).is_file():
        return str(bin_python), json.loads((final / MARKER).read_text()).get("tool", ""), True
    _sweep(root)
    with _locked(root / f"{key}.lock"):
        if (final / MARKER).is_file():
            return str(bin_python), "", True
        tmp = root / f"{key}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        if final.exists():  # a build killed between rename and marker: start again
            shutil.rmtree(final, ignore_errors=True)
        try:
            _run([python, "-m", "venv", "--without-pip", str(tmp)], "creating the side's venv")
            purelib = _run([str(tmp / "bin" / "python"), "-c",
                            "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           "asking the side's venv for its site-packages").strip()
            lines = [f"import site; site.addsitedir({d!r})" for d in _site_dirs()]
            Path(purelib, "_perfgate_reference.pth").write_text("\n".join(lines) + "\n")
            pins = [f"{n}=={v}" for n, v in sorted(overlay.items())]
            uv = find_uv()
            if uv is not None:
                tool = "uv"
                _run([uv, "pip", "install", "--quiet", "--no-deps", "--python",
                      str(tmp / "bin" / "python"), *pins],
                     f"installing {', '.join(pins)} (uv pip install)")
            else:
                tool = "pip"
                _run([python, "-m", "pip", "install", "--quiet", "--no-deps",
                      "--disable-pip-version-check", "--target", purelib, *pins],
                     f"installing {', '.join(pins)} (pip install --target)")
            _verify(tmp / "bin" / "python", overlay, installed)
            os.rename(tmp, final)
            (final / MARKER).write_text(json.dumps({"overlay": dict(overlay), "tool": tool,
                                                    "reference": python}))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return str(bin_python), tool, False


def _sweep(root: Path) -> None:
    """Remove the half-built venvs of builds that were killed (their pid is gone)."""
    import psutil

    for tmp in root.glob("*.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _verify(python: Path, overlay: Mapping[str, str], installed: Mapping[str, str]) -> None:
    """The overlay imports the versions it was built for, and the reference's for the
    rest (a sample: pytest and every installed package up to 50)."""
    rest = [n for n in sorted(installed) if n not in overlay][:50]
    got = json.loads(_run([str(python), "-c", _VERIFY, *overlay, *rest],
                          "checking the side's environment") or "{}")
    wrong = [f"{n} {got.get(n)} (wanted {v})" for n, v in overlay.items() if got.get(n) != v]
    wrong += [f"{n} {got.get(n)} (the reference has {installed[n]})" for n in rest
              if got.get(n) != installed[n]]
    if wrong:
        raise EnvBuildError("the side's environment does not hold the versions it was built "
                            f"for: {', '.join(wrong[:5])}; report this with `pip list` of "
                            "both environments")


def side_env(tree: Path, changed: Sequence[str], cache: Path, python: str = sys.executable
             ) -> SideEnv | None:
    """The environment ``tree``'s declarations ask for, or None where the reference already
    holds it (an unrelated edit of a declaration)."""
    from pytest_perfgate.history.environment import installed as installed_dists

    start = time.monotonic()
    installed, editable = installed_dists()
    got = inputs(tree, changed)
    with tempfile.TemporaryDirectory(prefix="perfgate-resolve-") as work:
        pins, tool = resolve(got, installed, python, Path(work))
    overlay = overlay_for(pins, installed, got.direct(), editable)
    if not overlay:
        return None
    exe, built_with, cached = build(overlay, cache, installed, python)
    return SideEnv(exe, overlay, {n: installed.get(n) for n in overlay},
                   built_with or tool, time.monotonic() - start, cached, tuple(changed))


ENV_REFERENCE = "PERFGATE_ENV_REFERENCE"  # the tree whose declarations the env holds


def side_envs(root: Path, base_dir: Path, env_files: Sequence[str] | None
              ) -> tuple[SideEnv | None, SideEnv | None]:
    """Each side's own environment where its declarations say something else than the
    reference tree's (the checkout this environment was installed for: ``root``, or the one
    :data:`ENV_REFERENCE` names, e.g. a bisection's). ``env_files`` () turns it off."""
    from pytest_perfgate.sim.settled import cache_dir

    patterns = declarations.DEFAULT_PATTERNS if env_files is None else tuple(env_files)
    if not patterns:
        return None, None
    ref = Path(os.environ.get(ENV_REFERENCE) or root)
    if not ref.is_dir():
        raise declarations.DeclarationError(
            f"{ENV_REFERENCE}={str(ref)!r} is not a folder: it names the checkout this "
            "environment was installed for (perfgate bisect sets it for its probes); unset it")
    cache = cache_dir() or Path(tempfile.gettempdir()) / "pytest-perfgate"
    out = []
    for tree in (base_dir, root):
        changed = declarations.changed(ref, tree, patterns) if tree != ref else []
        out.append(side_env(tree, changed, cache) if changed else None)
    return out[0], out[1]
