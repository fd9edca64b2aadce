"""pytest's rootdir trap: a lost ini file stops the run with a usage error.

pytest finds its rootdir and ini file from the command line before plugin options are
known, so the value of a path option (``--perfgate-json /abs/out.json``, separate and an
existing path) counts as a test path and can move the rootdir out of the project, losing
pytest.ini and with it every ``perfgate_*`` setting (the results dir: a new history). Names
and git facts do not depend on the rootdir (:mod:`.naming`); a lost ini file still would.
"""

from __future__ import annotations

import inspect
import itertools
import os
from collections.abc import Iterable

import pytest


def refuse_lost_ini(config: pytest.Config, flags: Iterable[str]) -> None:
    """Raise a usage error naming the flag whose separate value moved pytest's ini file."""
    lost = ini_lost_to(config, set(flags))
    if lost is not None:
        flag, value = lost
        raise pytest.UsageError(
            f"perfgate: pytest read the value of {flag} ({value}) as a test path and lost its "
            f"configuration file (rootdir became {config.rootpath}), so perfgate_* ini "
            f"settings would be ignored: write it with '=', e.g. {flag}={value}")


def ini_lost_to(config: pytest.Config, flags: set[str]) -> tuple[str, str] | None:
    """(flag, value) of a perfgate option whose separate value moved pytest's ini file."""
    args = list(config.invocation_params.args)
    moved = [(a, b) for a, b in itertools.pairwise(args)
             if a in flags and os.path.exists(b)]
    if not moved:
        return None
    from _pytest.config.findpaths import determine_setup

    kw = {"inifile": config.option.inifilename,
          "args": [a for a in config.args if a not in {b for _, b in moved}],
          "rootdir_cmd_arg": config.option.rootdir or None,
          "invocation_dir": config.invocation_params.dir}
    if "override_ini" in inspect.signature(determine_setup).parameters:  # pytest >= 9
        kw["override_ini"] = config.option.override_ini
    _, inipath, *_ = determine_setup(**kw)
    return moved[0] if inipath != config.inipath else None
