"""The pytest entry point: options, ini keys, the marker, the hooks and the fixtures.

It costs a pytest run that does not measure next to nothing (docs/measurement.md): this
module imports only the option table and the fixture modules (whose bodies import what they
drive when a test asks for them). The session, a plugin object
(:class:`pytest_perfgate.plugin.measuring.PerfgatePlugin`), is registered by
:func:`pytest_configure` when ``--perfgate`` (or any perfgate flag) is given, else on first
use: a perf fixture, a ``perfgate`` marker, ``perfgate_select`` in the ini file.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_perfgate.plugin import PerfgateWarning  # noqa: F401  (its documented path)
from pytest_perfgate.plugin.fixtures_mujoco import g1_scene, humanoid_xml, mujoco_pool, mujoco_sweep  # noqa: F401
from pytest_perfgate.plugin.fixtures_placement import numa_workers, pinned_workers  # noqa: F401
from pytest_perfgate.plugin.fixtures_ring import ring_pair  # noqa: F401
from pytest_perfgate.session.options import SPECS, OptionError, Options, argparse_type

if TYPE_CHECKING:
    from pytest_perfgate.plugin.measuring import PerfgatePlugin
    from pytest_perfgate.session.gating import GateSession
    from pytest_perfgate.session.perfgate import PerfGate

PLUGIN = "perfgate-session"  # the session plugin's name in pytest's plugin manager
FLAGS = frozenset(s.flag for s in SPECS)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    import pytest_perfgate.plugin as hookspec  # the specs live in the package module

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "steady-state throughput gating (pytest-perfgate)")
    group.addoption("--perfgate", action="store_true", default=None,
                    help="measure perf tests at steady state, record asv history and fail on "
                    "regressions (without it perf tests run in a quick smoke mode)")
    parser.addini("perfgate", "enable --perfgate by default", type="bool", default=False)
    group.addoption("--perfgate-only", action="store_true", default=False,
                    help="run only the perf tests (those using the perfgate fixture), like "
                    "pytest-benchmark's --benchmark-only")
    group.addoption("--perfgate-skip", action="store_true", default=False,
                    help="run every test but the perf tests, like --benchmark-skip")
    for spec in SPECS:
        kind: dict[str, Any] = ({"action": "store_true"} if spec.switch
                                else {"type": argparse_type(spec.parse)})
        group.addoption(spec.flag, dest=f"perfgate_{spec.name}", default=None,
                        help=spec.full_help.replace("%", "%%"), **kind)  # argparse formats
        for word in spec.words:  # a switch's documented value forms (--perfgate-profile=off):
            # argparse matches the whole string first; a switch may not take a value else
            group.addoption(f"{spec.flag}={word}", dest=f"perfgate_{spec.name}",
                            action="store_const", const=word, help=argparse.SUPPRESS)
        parser.addini(spec.ini, spec.full_help, default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perfgate(**settings): per-test settings for "
                            "pytest-perfgate, e.g. perfgate(threshold=0.1) (docs/fixtures.md)")
    if _asked_for(config):
        session_plugin(config)
    else:
        _check_ini(config)


# An A/B side (modes/ab/remote.ENV_FD) or a counting worker (modes/counts/side.ENV_OUT):
# named here, not imported, so that loading the plugin loads neither module.
SIDE_ENVS = ("PERFGATE_SIDE_FD", "PERFGATE_COUNTS_OUT")


def _asked_for(config: pytest.Config) -> bool:
    """--perfgate (flag or ini), any perfgate flag on the command line, or a process the
    plugin started to measure (a side: its pytest-benchmark tests use no perfgate fixture):
    set up now, so a bad value is a usage error before anything runs."""
    opt = config.option
    try:
        ini_on = config.getini("perfgate")
    except (ValueError, pytest.UsageError):  # not a bool: the setup says so, naming the key
        ini_on = True
    return bool(config.getoption("perfgate") or ini_on
                or opt.perfgate_only or opt.perfgate_skip
                or any(getattr(opt, f"perfgate_{s.name}") is not None for s in SPECS)
                or any(os.environ.get(name) for name in SIDE_ENVS))


def _check_ini(config: pytest.Config) -> None:
    """A bad perfgate_* ini value is a usage error in every run, measuring or not (parsing
    is cheap; the session and its checks of paths wait for a perf test)."""
    ini = {s.name: config.getini(s.ini) for s in SPECS}
    if all(v is None for v in ini.values()):
        return
    try:
        Options.resolve(False, dict.fromkeys(ini), ini, os.environ)
    except OptionError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None


def session_plugin(config: pytest.Config) -> PerfgatePlugin:
    """The session plugin, registered on first call (checks every setting first)."""
    found = config.pluginmanager.get_plugin(PLUGIN)
    if found is not None:
        return found
    from pytest_perfgate.plugin.measuring import PerfgatePlugin

    plugin = PerfgatePlugin.start(config)
    config.pluginmanager.register(plugin, PLUGIN)
    return plugin


def gate_session(config: pytest.Config) -> GateSession:
    """The :class:`GateSession` of this run (set up on first call), for conftest files."""
    return session_plugin(config).session


def pytest_sessionstart(session: pytest.Session) -> None:
    if FLAGS.intersection(session.config.invocation_params.args):
        from pytest_perfgate.plugin.rootdir import refuse_lost_ini

        refuse_lost_ini(session.config, FLAGS)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Check every perfgate marker before any test runs; apply --perfgate-only/-skip."""
    if (config.pluginmanager.get_plugin(PLUGIN) is not None or config.getini("perfgate_select")
            or any(i.get_closest_marker("perfgate") for i in items)):
        session_plugin(config).check_items(items)


@pytest.fixture
def perfgate(request: pytest.FixtureRequest) -> Iterator[PerfGate]:
    """Measure a step at steady state: ``perfgate.measure(step, transitions=num_envs)``."""
    yield from session_plugin(request.config).fixture(request.node)
