"""What a tree's changed dependency declarations ask the resolver for: requirement and
constraint files (made portable: includes absolute, the project's own ``-e .`` left out),
pyproject.toml's requirements, a lock file's pins. Read, never resolved here."""

from __future__ import annotations

import contextlib
import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


class EnvBuildError(RuntimeError):
    """A side's environment cannot be built: an infrastructure error naming the package or
    file and the command to run, never a verdict."""


_LOCAL = re.compile(r"^\s*(-e\b|--editable\b|\.|/|file:)")
_INCLUDE = re.compile(r"^\s*(-r|--requirement|-c|--constraint)[\s=]+(\S+)")



def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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
        """Names the declarations ask for by name, their ``-r`` includes' too (an absent
        one is installed too)."""
        lines: list[str] = list(self.requirements)
        todo, seen = list(self.requirement_files), set[Path]()
        while todo and len(seen) < 50:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            with contextlib.suppress(OSError, UnicodeDecodeError):
                for x in f.read_text(encoding="utf-8").splitlines():
                    if m := _INCLUDE.match(x):
                        if m.group(1) in ("-r", "--requirement"):
                            todo.append((f.parent / m.group(2)).resolve())
                    elif x.strip() and not x.lstrip().startswith(("#", "-")):
                        lines.append(x)
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
        elif name.startswith("constraints") and base.endswith(".txt"):
            got.constraint_files.append(path)
        elif base.endswith(".txt"):
            got.requirement_files.append(path)
        else:
            raise EnvBuildError(
                f"{name} changed, and perfgate builds environments with uv or pip, not conda: "
                f"build it yourself, or leave {name} out of perfgate_env_files (both sides "
                "then run in one environment, and the change is not measured)")
    return got


def portable(path: Path, work: Path, n: int) -> Path:
    """A copy of a requirements file the resolver can read from anywhere: includes made
    absolute, and the project's own local installs (``-e .``, ``./pkg``) left out: they are
    the code under test, and building their metadata would need their build backend."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise EnvBuildError(f"cannot read {path}: {e}: fix it") from None
    out = []
    for line in lines:
        if _LOCAL.match(line):
            continue
        if m := _INCLUDE.match(line):
            line = f"{m.group(1)} {(path.parent / m.group(2)).resolve()}"
        out.append(line)
    copy = work / f"{n}-{path.name}"
    copy.write_text("\n".join(out) + "\n")
    return copy
