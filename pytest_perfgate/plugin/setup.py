"""Setting a measuring run up: every setting parsed and checked, the A/B base checked out.

Everything here runs before any test, so a bad value is a usage error naming the value and
the fix, never a failure half-way through a run (docs/configuration.md).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_perfgate.plugin import select
from pytest_perfgate.session.options import SPECS, OptionError, Options, sources

if TYPE_CHECKING:
    from pytest_perfgate.modes.ab import ABSetup
    from pytest_perfgate.modes.place import Place


def build_options(config: pytest.Config) -> tuple[Options, dict[str, str]]:
    """The options, and where each set one came from (for messages)."""
    from pytest_perfgate.modes.ab.side import is_side_process, stray_side_variable
    from pytest_perfgate.modes.counts.worker import stray_counts_variable
    from pytest_perfgate.session import preflight

    counts = stray_counts_variable()
    if counts is not None:
        config_warning(config, f"perfgate: PERFGATE_COUNTS_OUT={counts!r} is set but this is "
                       "no counting worker (perfgate sets it only for the valgrind workers it "
                       "starts): ignored; unset it", "the environment")
    stray = stray_side_variable()
    if stray is not None:
        config_warning(config, f"perfgate: PERFGATE_SIDE_FD={stray!r} names no A/B "
                       "connection of this process (perfgate sets it only for the sides it "
                       "starts): ignored; unset it", "the environment")

    enabled = config.getoption("perfgate") or _ini_switch(config)
    flags = {s.name: config.getoption(f"perfgate_{s.name}") for s in SPECS}
    try:
        flags["select"] = select.from_flags(config, flags["select"])
    except OptionError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None
    ini = {s.name: config.getini(s.ini) for s in SPECS}
    try:
        options = Options.resolve(bool(enabled), flags, ini, os.environ)
        if is_side_process():  # its controller checked everything; a side writes nothing
            return options, {}
        where = sources(flags, ini, os.environ)
        warnings = preflight.check(options, config.rootpath, config.invocation_params.dir,
                                   where)
    except OptionError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None
    for text in warnings:
        config_warning(config, f"perfgate: {text}", _located(config, text, where))
    return options, where


def _located(config: pytest.Config, text: str, where: dict[str, str]) -> str:
    """Where the setting a warning is about was made, as pytest's warning summary shows a
    location: the command line, the ini file or the environment (never perfgate's code)."""
    said = [w for w in where.values() if w in text] or list(where.values())
    first = said[0] if said else ""
    if first.startswith("ini option"):
        return str(config.inipath or "the ini file")
    if first.startswith("environment variable"):
        return "the environment"
    return "the command line"


def config_warning(config: pytest.Config, text: str, location: str) -> None:
    """``config.issue_config_time_warning`` with the warning located at ``location`` (the
    user's command line or ini file) instead of the plugin's frame; the project's
    filterwarnings apply as they do there."""
    import warnings

    from _pytest.config import apply_warning_filters

    if config.pluginmanager.is_blocked("warnings"):
        return
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always", pytest.PytestConfigWarning)
        apply_warning_filters(config.getini("filterwarnings"),
                              config.known_args_namespace.pythonwarnings or [])
        warnings.warn_explicit(pytest.PytestConfigWarning(text), pytest.PytestConfigWarning,
                               location, 0)
    if records:
        config.hook.pytest_warning_recorded.call_historic(kwargs={
            "warning_message": records[0], "when": "config", "nodeid": "",
            "location": (location, 0, "")})


def _ini_switch(config: pytest.Config) -> bool:
    """The ``perfgate`` ini option (or ``-o perfgate=...``): pytest's own reading of a bool
    names neither the key nor the fix."""
    try:
        return bool(config.getini("perfgate"))
    except (ValueError, pytest.UsageError):
        raw = next((kv.split("=", 1)[1] for kv in reversed(config.option.override_ini or [])
                    if kv.split("=", 1)[0].strip() == "perfgate" and "=" in kv), None)
        shown = (f"perfgate = {raw!r} (from -o)" if raw is not None
                 else f"perfgate in {config.inipath}")
        raise pytest.UsageError(f"perfgate: ini option {shown} is not a true/false value: "
                                "use true or false, e.g. perfgate = true") from None


def refuse_xdist(config: pytest.Config) -> None:
    n = getattr(config.option, "numprocesses", None)
    dist = getattr(config.option, "dist", "no")
    if bool(n) or (dist not in (None, "no")) or hasattr(config, "workerinput"):
        how = ("--perfgate" if config.getoption("perfgate")
               else "perfgate (turned on by the ini option perfgate = true)")
        raise pytest.UsageError(
            f"perfgate: {how} cannot run under pytest-xdist: parallel tests steal each "
            "other's CPUs and every measurement would be wrong. Run perf tests with -n0 "
            "(or -p no:xdist), e.g. `pytest --perfgate -n0 perf/`.")


def start_ab(config: pytest.Config, options: Options, where: dict[str, str] | None = None
             ) -> ABSetup | None:
    """Check out the base revision beside the working tree; removed at unconfigure.
    None in a side process (the controller already did)."""
    from pytest_perfgate.modes.ab import ABSetupError, is_side_process, start_ab

    if is_side_process():
        return None
    assert options.ab is not None
    stack = contextlib.ExitStack()
    config.add_cleanup(stack.close)
    from pytest_perfgate.envs.build import EnvBuildError
    from pytest_perfgate.plugin.summary import INFRA_EXIT

    try:
        said = where or {}
        setup = start_ab(place(config), options.ab, options.ab_setup, stack,
                         said.get("ab", "--perfgate-ab"),
                         said.get("ab_setup", "--perfgate-ab-setup"), options.env_files)
        for line in setup.environment_lines():
            print(f"perfgate: {line}", flush=True)
        return setup
    except ABSetupError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None
    except EnvBuildError as e:  # never a verdict, never OK: the run stops, exit 3
        stack.close()
        pytest.exit(f"perfgate: infrastructure error: cannot build the environment the base "
                    f"{options.ab} declares: {e}", returncode=int(INFRA_EXIT))


def place(config: pytest.Config) -> Place:
    """Where this run stands in its repository (the one holding the rootdir, else the
    working directory), for a run of another revision to stand at the same place."""
    from pytest_perfgate.history.vcs import toplevel
    from pytest_perfgate.modes.place import Place

    cwd = config.invocation_params.dir
    top = toplevel(config.rootpath) or toplevel(cwd) or config.rootpath
    o = config.option
    confcut = getattr(o, "confcutdir", None)
    return Place.of(top, cwd, config.rootpath, config.inipath,
                    explicit_ini=bool(getattr(o, "inifilename", None)),
                    confcutdir=Path(confcut) if confcut else None,
                    options=_config_args(config))


def _config_args(config: pytest.Config) -> tuple[str, ...]:
    """The options besides ini file, rootdir and confcutdir that decide what a run collects
    and how it imports: ``-o name=value``, ``-p name``, ``--import-mode``,
    ``--noconftest``."""
    o = config.option
    args: list[str] = []
    for kv in getattr(o, "override_ini", None) or []:
        args += ["-o", str(kv)]
    for name in getattr(o, "plugins", None) or []:
        args += ["-p", str(name)]
    mode = getattr(o, "importmode", None)
    if mode and mode != "prepend":
        args.append(f"--import-mode={mode}")
    if getattr(o, "noconftest", False):
        args.append("--noconftest")
    return tuple(args)
