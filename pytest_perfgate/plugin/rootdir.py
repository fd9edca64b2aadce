"""pytest's rootdir trap: benchmark names and the ini file must not follow it.

pytest finds its rootdir and ini file from the command line before plugin options are
known, so the value of a path option (``--perfgate-json /abs/out.json``, separate and an
existing path) counts as a test path and can move the rootdir out of the project. Names come
from a stable root instead (:func:`default_name`), and a lost ini file stops the run with a
usage error (:func:`pytest_sessionstart`, registered through :mod:`.hooks`).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from pytest_perfgate.session.options import SPECS
from pytest_perfgate.session.session import GateSession, derive_name, find_repo_root, stable_nodeid


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse a run whose configuration file pytest lost to one of our options' values.

    pytest finds its rootdir and ini file before plugin options are known, so the value of
    ``--perfgate-json /abs/out.json`` (separate, and an existing path) counts as a test path
    and can move the rootdir out of the project, losing pytest.ini and with it every
    ``perfgate_*`` setting (the results dir: a new history). Names and git facts no longer
    depend on the rootdir (:func:`default_name`); a lost ini file still would.
    """
    config = session.config
    lost = _ini_lost_to(config)
    if lost is not None:
        flag, value = lost
        raise pytest.UsageError(
            f"perfgate: pytest read the value of {flag} ({value}) as a test path and lost its "
            f"configuration file (rootdir became {config.rootpath}), so perfgate_* ini "
            f"settings would be ignored: write it with '=', e.g. {flag}={value}")


def _ini_lost_to(config: pytest.Config) -> tuple[str, str] | None:
    """(flag, value) of a perfgate option whose separate value moved pytest's ini file."""
    args = list(config.invocation_params.args)
    flags = {s.flag for s in SPECS}
    moved = [(a, b) for a, b in itertools.pairwise(args)
             if a in flags and os.path.exists(b)]
    if not moved:
        return None
    try:
        from _pytest.config.findpaths import determine_setup

        _, inipath, *_ = determine_setup(
            inifile=config.option.inifilename, override_ini=config.option.override_ini,
            args=[a for a in config.args if a not in {b for _, b in moved}],
            rootdir_cmd_arg=config.option.rootdir or None,
            invocation_dir=config.invocation_params.dir)
    except Exception:
        return None
    return moved[0] if inipath != config.inipath else None


def default_name(item: pytest.Item, session: GateSession) -> str:
    """The benchmark name of ``item``: its file relative to the session's stable root (the
    ini file's folder, else the git checkout), so an option that moves pytest's rootdir
    renames nothing. The first item seen also fixes where git is asked."""
    path = getattr(item, "path", None)
    root = session.note_test_file(path, item.config.inipath is not None)
    return derive_name(stable_nodeid(item.nodeid, path, root))


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
    session.locations[item.nodeid] = (rel, line + 1)
