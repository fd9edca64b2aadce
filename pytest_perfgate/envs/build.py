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
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

RESOLVE_TIMEOUT_S = 600.0
MARKER = "perfgate-env.json"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#\\]+)")


class EnvBuildError(RuntimeError):
    """A side's environment cannot be built: an infrastructure error naming the package or
    file and the command to run, never a verdict."""


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


def _lock_pins(path: Path) -> dict[str, str]:
    """The pins of a lock file (uv.lock, poetry.lock, Pipfile.lock): already resolved."""
    try:
        if path.name == "Pipfile.lock":
            data = json.loads(path.read_text(encoding="utf-8"))
            out = {}
            for section in ("default", "develop"):
                for name, entry in (data.get(section) or {}).items():
                    v = entry.get("version", "") if isinstance(entry, dict) else ""
                    if isinstance(v, str) and v.startswith("=="):
                        out[_canonical(name)] = v[2:]
            return out
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EnvBuildError(f"cannot read the lock file {path}: {e}: fix it") from None
    pins = {}
    for pkg in data.get("package") or []:
        source = pkg.get("source") or {}
        if isinstance(source, dict) and ({"editable", "virtual"} & set(source)):
            continue  # the project itself
        if isinstance(pkg.get("name"), str) and isinstance(pkg.get("version"), str):
            pins[_canonical(pkg["name"])] = pkg["version"]
    return pins


def _pyproject_requirements(path: Path) -> list[str]:
    """pyproject.toml's declared requirements ([project] dependencies, its extras and
    dependency groups; the project's own name left out)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EnvBuildError(f"cannot read {path}: {e}: fix it") from None
    project = data.get("project") or {}
    me = _canonical(str(project.get("name", "")))
    reqs = list(project.get("dependencies") or [])
    for group in (project.get("optional-dependencies") or {}).values():
        reqs += list(group or [])
    for group in (data.get("dependency-groups") or {}).values():
        reqs += [r for r in group or [] if isinstance(r, str)]
    return [r for r in reqs if isinstance(r, str)
            and _canonical(re.split(r"[\s\[<>=!~;@(]", r.strip(), maxsplit=1)[0]) != me]


def _names(requirements: Sequence[str]) -> set[str]:
    return {_canonical(m.group(0)) for r in requirements
            if (m := re.match(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*", r))}


@dataclass
class Inputs:
    """What one tree's changed declarations ask for."""

    requirement_files: list[Path] = field(default_factory=list)
    constraint_files: list[Path] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)  # from pyproject.toml
    pins: dict[str, str] = field(default_factory=dict)  # from lock files

    def direct(self) -> set[str]:
        """Names the declarations ask for by name (an absent one is installed too)."""
        lines: list[str] = list(self.requirements)
        for f in self.requirement_files:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                lines += [x for x in f.read_text(encoding="utf-8").splitlines()
                          if x.strip() and not x.lstrip().startswith(("#", "-"))]
        return _names(lines)


def inputs(tree: Path, names: Sequence[str]) -> Inputs:
    """The resolver's inputs from ``tree``'s declarations ``names`` (relative paths)."""
    got = Inputs()
    for name in names:
        path = tree / name
        if not path.is_file():
            continue  # removed in this tree: what remains says what it needs
        base = path.name
        if base in ("uv.lock", "poetry.lock", "Pipfile.lock"):
            got.pins.update(_lock_pins(path))
        elif base == "pyproject.toml":
            got.requirements += _pyproject_requirements(path)
        elif base.startswith("constraints") and base.endswith(".txt"):
            got.constraint_files.append(path)
        elif base.endswith(".txt"):
            got.requirement_files.append(path)
        else:
            raise EnvBuildError(
                f"{name} changed, and perfgate builds environments with uv or pip, not conda: "
                f"build it yourself, or leave {name} out of perfgate_env_files (both sides "
                "then run in one environment, and the change is not measured)")
    return got


def resolve(got: Inputs, installed: Mapping[str, str], python: str, work: Path
            ) -> tuple[dict[str, str], str]:
    """Every version the declarations resolve to, preferring what is installed; and the
    tool that resolved them."""
    pins = dict(got.pins)
    if not (got.requirement_files or got.requirements or got.constraint_files):
        return pins, "lock file"
    reqs = work / "pyproject-requirements.txt"
    reqs.write_text("\n".join(got.requirements) + "\n")
    files = [*got.requirement_files, *([reqs] if got.requirements else [])]
    uv = find_uv()
    if uv is not None:
        out = work / "resolved.txt"  # uv prefers the versions an existing output pins
        out.write_text("".join(f"{n}=={v}\n" for n, v in sorted(installed.items())))
        cmd = [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate",
               "--python", python, "-o", str(out)]
        for f in files:
            cmd.append(str(f))
        for c in got.constraint_files:
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
    for c in got.constraint_files:
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
