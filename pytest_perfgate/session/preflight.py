"""What the settings point at, checked once at configure time, before any test measures.

The converters in :mod:`.options` check each value alone; these check what needs the
filesystem or the machine: the results dir (and asv.conf.json, which may name it), the
machine name the hostname gives, the report paths. A setting that cannot work is an
:class:`~pytest_perfgate.session.options.OptionError` naming the value and the fix (the
plugin shows it as a usage error) instead of a failure after every benchmark was measured.
``GITHUB_STEP_SUMMARY`` is set by the Actions runner, not by the user: a bad one only gives
a warning here, and an infrastructure error when the summary cannot be written at the end.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path

from pytest_perfgate.core.names import safe_name
from pytest_perfgate.report import write as report_write
from pytest_perfgate.session.options import OptionError, Options


def check(options: Options, rootdir: Path, invocation_dir: Path, where: Mapping[str, str]
          ) -> list[str]:
    """Raise OptionError for the first setting that cannot work; return warnings to show.

    Only a ``--perfgate`` run is checked (smoke mode reads and writes nothing); in smoke mode
    a flag given on the command line is named as ignored (ini settings are project-wide).
    """
    if not options.enabled:
        given = [w for name, w in where.items()
                 if w.startswith("--perfgate-") and name != "select"]  # select works anyway
        return [f"{', '.join(given)} ignored: without --perfgate perf tests run in smoke mode "
                "(nothing measured, recorded or written); add --perfgate"] if given else []
    _check_machine(options)
    _check_results_dir(options, rootdir, where)
    warnings = []
    found = report_write.targets(options, invocation_dir, where)
    for t in found:
        why = report_write.problem(t)
        if why is not None:
            if not t.automatic:
                raise OptionError(why)
            warnings.append(f"{why}; the verdicts are still printed, but the run will end "
                            "with an infrastructure error")
    clash = report_write.same_file(found)
    if clash:
        raise OptionError(clash)
    if options.profile_dir:
        _check_profile_dir(Path(options.profile_dir),
                           where.get("profile_dir", "--perfgate-profile-dir"))
    if options.ab_setup and not options.ab:
        warnings.append(f"{where.get('ab_setup', '--perfgate-ab-setup')} "
                        f"{options.ab_setup!r} is ignored without --perfgate-ab")
    return warnings


def _check_profile_dir(path: Path, source: str) -> None:
    """A folder the profiles' files can go into (made when missing)."""
    shown = f"{source} {path}"
    if path.exists() and not path.is_dir():
        raise OptionError(f"{shown} is a file, not a folder: give a folder (it is created if "
                          "missing), e.g. .perfgate/profiles")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OptionError(f"{shown}: {parent} is a file, not a folder: give a path in a "
                          "folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OptionError(f"{shown}: cannot create files in {parent}: give a writable folder")


def _check_machine(options: Options) -> None:
    """The hostname is the default machine name, and a machine name is a folder name."""
    if options.machine is not None:
        return  # parse_machine checked it
    host = socket.gethostname() or platform.node() or "unknown"
    try:
        safe_name(host, "machine name", "runner-gpu-03", shown=f"the hostname {host!r}")
    except ValueError as e:
        raise OptionError(f"{e}: set --perfgate-machine (or PERFGATE_MACHINE)") from None


def _check_results_dir(options: Options, rootdir: Path, where: Mapping[str, str]) -> None:
    """asv.conf.json is read now, not when the first benchmark opens the history; the
    folder must be a folder, and one this run can create files in when it records."""
    try:
        path = options.results_path(rootdir)
    except (OSError, ValueError) as e:
        raise OptionError(f"{e} (read for the default results dir; or give "
                          "--perfgate-results-dir)") from None
    source = where.get("results_dir", "the results dir (from asv.conf.json or the default)")
    shown = f"{source} {path}"
    if path.exists() and not path.is_dir():
        raise OptionError(f"{shown} is a file, not a folder: give a folder (it is created if "
                          "missing), e.g. .perfgate/results")
    if not options.record:
        return
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OptionError(f"{shown}: {parent} is a file, not a folder: give a folder path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OptionError(f"{shown}: cannot create files in {parent}: give a writable folder, "
                          "or pass --perfgate-record=false to gate without recording")
