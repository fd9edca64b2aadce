"""A perf test's benchmark name and location, from a stable root, not pytest's rootdir.

pytest's rootdir moves when a perfgate option's separate value is an existing path
(:mod:`.rootdir`), so names start at the ini file's folder, else the git checkout
(:func:`pytest_perfgate.session.naming.stable_root`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_perfgate.session.gating import GateSession
from pytest_perfgate.session.naming import derive_name, find_repo_root, stable_nodeid


def default_name(item: pytest.Item, session: GateSession) -> str:
    """The benchmark name of ``item``: its file relative to the session's stable root (the
    ini file's folder, else the git checkout), so an option that moves pytest's rootdir
    renames nothing. The first item seen also fixes where git is asked."""
    path = getattr(item, "path", None)
    root = session.note_test_file(path, item.config.inipath is not None)
    return derive_name(stable_nodeid(item.nodeid, path, root))


def test_file(item: pytest.Item) -> tuple[str, str] | None:
    """The file ``item`` is defined in and the rest of its node id after that file's node
    ("::test_walk[8]"): what another revision's run selects it by. A node id alone is no
    path: a file outside the rootdir has ids such as "::test_walk"."""
    path = getattr(item, "path", None)
    parent = next((n for n in reversed(item.listchain()) if isinstance(n, pytest.File)), None)
    if path is None or parent is None:
        return None
    nodeid, prefix = item.nodeid, parent.nodeid
    rest = nodeid[len(prefix):] if nodeid.startswith(prefix) else "::" + nodeid.partition(
        "::")[2]
    return str(path), rest


def note_location(item: pytest.Item, session: GateSession) -> None:
    """Remember where ``item`` is defined (file relative to its git checkout's top level,
    else to the stable root; 1-based line), so its results carry it for CI annotations."""
    path = getattr(item, "path", None)
    line = item.location[1]
    if path is None or line is None:
        return
    root = find_repo_root(Path(path)) or session.stable_root
    try:
        rel = Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return
    session.verdicts.locations[item.nodeid] = (rel, line + 1)
