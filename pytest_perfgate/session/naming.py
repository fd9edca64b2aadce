"""Default benchmark names: unique, stable, and independent of pytest's rootdir.

A benchmark's name is its history (asv series, baseline selection), so a rename silently
starts a new history and a collision silently merges two. Names derive from the test's
nodeid with its file part relative to a stable root (:func:`stable_root`).
"""

from __future__ import annotations

import configparser
import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any

from pytest_perfgate.core.names import is_safe_name

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")
_PARAM_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")  # '.' too: asv splits names into a tree on it


def derive_name(nodeid: str) -> str:
    """'perf/test_x.py::test_walk[256]' -> 'perf.test_x.test_walk_256_'.

    Unique and stable: where sanitising would merge distinct ids (``[x y]`` and ``[x_y]``,
    or a '.' inside a parameter, which asv would show as a tree level) a short hash of the
    original id is appended (``test_walk_x_y_-3f2a9c``); ids that were already safe keep
    the name they always had, so their history continues. ``nodeid``'s file part should be
    relative to a stable root (:func:`stable_nodeid`).
    """
    path, _, rest = nodeid.partition("::")
    base = path[:-3] if path.endswith(".py") else path
    func, bracket, param = rest.partition("[")
    if bracket and param.endswith("]"):
        param = param[:-1]
    else:
        func, param, bracket = rest, "", ""
    text = ".".join(p for p in [base.replace("/", "."), func.replace("::", ".")] if p)
    name = _UNSAFE.sub("_", text)
    changed = name != text
    if bracket:
        safe_param = _PARAM_UNSAFE.sub("_", param)
        changed = changed or safe_param != param
        name += f"_{safe_param}_"
    name = name.strip(".")
    while ".." in name:
        name, changed = name.replace("..", "."), True
    digest = hashlib.sha1(nodeid.encode("utf-8")).hexdigest()[:6]
    if len(name) > 128:
        name, changed = name[:120].rstrip("."), True
    if changed:
        name = f"{name}-{digest}"
    return name if is_safe_name(name) else f"benchmark-{digest}"


READABLE_MAX = 80  # a readable name fits a terminal's verdict table beside its figures


def readable_name(nodeid: str) -> str:
    """'tests/test_ecs.py::test_query[1000-dense]' -> 'tests.test_ecs.test_query-1000-dense'.

    The names of pytest-benchmark tests (a series new to perfgate, so no history to keep):
    parameters joined by '-' with no trailing '_', at most READABLE_MAX characters. Where
    sanitising or shortening would merge distinct ids, a short hash of the id is appended,
    as :func:`derive_name` does.
    """
    path, _, rest = nodeid.partition("::")
    base = path[:-3] if path.endswith(".py") else path
    func, bracket, param = rest.partition("[")
    param = param[:-1] if bracket and param.endswith("]") else ""
    text = ".".join(p for p in [base.replace("/", "."), func.replace("::", ".")] if p)
    name = _UNSAFE.sub("_", text)
    if param:
        name += "-" + _PARAM_UNSAFE.sub("_", param).strip("_")
    name = re.sub(r"\.{2,}", ".", name).strip(".")
    readable = f"{text}-{param}" if param else text
    digest = hashlib.sha1(nodeid.encode("utf-8")).hexdigest()[:6]
    if len(name) > READABLE_MAX:
        name = name[:READABLE_MAX - 7].rstrip(".-_")
    if name != readable:
        name = f"{name}-{digest}"
    return name if is_safe_name(name) else f"benchmark-{digest}"


def find_repo_root(path: Path) -> Path | None:
    """The top level of the git checkout holding ``path`` (a folder with ``.git``: a folder
    in a clone, a file in a worktree or submodule), else None. No subprocess: names must
    not depend on a git binary being usable."""
    p = path if path.is_dir() else path.parent
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return None


def stable_root(test_file: Path | None, rootdir: Path, has_ini: bool) -> Path:
    """The folder names and relative results paths start from.

    pytest's rootdir when it is the folder of an ini file inside the test file's checkout
    (stable, and today's names: a monorepo's subproject keeps its names); else the git top
    level of the test file. Without an ini file pytest's rootdir follows the command line
    (the current folder, or an option's value that happens to be an existing path), so it
    is no anchor; a lost ini file is refused at session start (plugin/hooks.py).
    """
    repo = find_repo_root(Path(test_file)) if test_file is not None else None
    if repo is None:
        return rootdir
    if has_ini and _within(rootdir, repo):
        return rootdir
    return repo


def _within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def stable_nodeid(nodeid: str, test_file: Path | None, root: Path) -> str:
    """``nodeid`` with its file part made relative to ``root`` (:func:`stable_root`): an
    option whose value is an existing path moves pytest's rootdir, and with it every
    nodeid, but not the repository."""
    if test_file is None:
        return nodeid
    _, sep, rest = nodeid.partition("::")
    path = Path(test_file).resolve()
    # A file outside the root (``-c`` naming an ini file elsewhere) has node ids such as
    # "::test_walk": it is named from its git checkout's top level instead.
    for base in (root, find_repo_root(path)):
        if base is not None and _within(path, base):
            return f"{path.relative_to(base.resolve()).as_posix()}{sep}{rest}"
    return nodeid


# pytest's configuration files in the order its search tries them in each folder.
INI_NAMES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
             "tox.ini", "setup.cfg")


def _ini_settings(path: Path) -> dict[str, Any] | None:
    """The pytest settings ``path`` holds, or None when pytest would pass it by (no pytest
    section, unreadable)."""
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            if path.name != "pyproject.toml":
                table = data.get("pytest", {})
                return table if isinstance(table, dict) else {}
            tool = data.get("tool", {}).get("pytest")
            if not isinstance(tool, dict):
                return None
            opts = tool.get("ini_options", tool)
            return opts if isinstance(opts, dict) else {}
        cp = configparser.ConfigParser(interpolation=None)
        cp.read_string(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, configparser.Error, AttributeError):
        return None
    section = {"setup.cfg": "tool:pytest"}.get(path.name, "pytest")
    if cp.has_section(section):
        return dict(cp[section])
    return {} if path.name in ("pytest.ini", ".pytest.ini") else None


def _is_toml(path: Path) -> bool:
    try:
        tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def find_ini(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The configuration file ``pytest`` started in ``start`` would read, and its settings:
    pytest's own search, written out because it is no public API and the command line does
    not import pytest (the first folder upwards holding one; else the first
    pyproject.toml, with no settings)."""
    first_pyproject = None
    for folder in (start, *start.parents):
        for name in INI_NAMES:
            path = folder / name
            if not path.is_file():
                continue
            settings = _ini_settings(path)
            if name == "pyproject.toml" and first_pyproject is None and _is_toml(path):
                first_pyproject = path
            if settings is not None:
                return path, settings
    return (first_pyproject, {}) if first_pyproject is not None else None


def project_root(start: Path, inifile: Path | None = None, rootdir: Path | None = None
                 ) -> tuple[Path, dict[str, Any]]:
    """Where ``pytest --perfgate`` started in ``start`` (with ``-c inifile`` and
    ``--rootdir rootdir`` when given) names benchmarks from and keeps its history
    (:func:`stable_root`), and the settings of its ini file: pytest's rootdir (the ini
    file's folder unless --rootdir says otherwise) when there is an ini file and the
    rootdir lies inside the git checkout (or there is none), else the checkout's top level,
    else the rootdir pytest would take without one (``start`` or --rootdir)."""
    start = start.resolve()
    repo = find_repo_root(start)
    if inifile is not None:
        ini = (start / inifile).resolve()
        found: tuple[Path, dict[str, Any]] | None = (ini, _ini_settings(ini) or {})
    else:
        found = find_ini(start)
    root = (start / rootdir).resolve() if rootdir is not None else None
    if found is not None:
        root = root or found[0].parent
        if repo is None or _within(root, repo):
            return root, found[1]
    return (repo or root or start), {}
