"""pytest at the edge: options, the ``perfgate`` fixture, verdicts into test outcomes, reports.

Hooks stay thin; the work is in :mod:`pytest_perfgate.session`, the modes and
:mod:`pytest_perfgate.report`. Extension hooks for users: :mod:`.hookspec`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_perfgate.core.judged import Judged, failing
from pytest_perfgate.plugin import markers, progress, select
from pytest_perfgate.plugin.benchmark_compat import pytest_pyfunc_call  # noqa: F401
from pytest_perfgate.plugin.fixtures_mujoco import g1_scene, humanoid_xml, mujoco_pool, mujoco_sweep  # noqa: F401
from pytest_perfgate.plugin.fixtures_placement import numa_workers, pinned_workers  # noqa: F401
from pytest_perfgate.plugin.fixtures_ring import ring_pair  # noqa: F401
from pytest_perfgate.plugin.rootdir import default_name, note_location, pytest_sessionstart  # noqa: F401
from pytest_perfgate.session.options import SPECS, OptionError, Options, argparse_type
from pytest_perfgate.session.session import GateSession, PerfGate, PerfgateUsageError

if TYPE_CHECKING:
    from pytest_perfgate.modes.ab import ABSetup

session_key = pytest.StashKey[GateSession]()
_where_key = pytest.StashKey[dict[str, str]]()  # option -> where it was set, for messages
_judged_key = pytest.StashKey[list[Judged]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_perfgate.plugin import hookspec

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
        parser.addini(spec.ini, spec.full_help, default=None)


def build_options(config: pytest.Config) -> Options:
    """Every setting parsed, and what it points at checked, before any test runs."""
    from pytest_perfgate.modes.ab.side import is_side_process
    from pytest_perfgate.session import preflight
    from pytest_perfgate.session.options import sources

    enabled = config.getoption("perfgate") or config.getini("perfgate")
    flags = {s.name: config.getoption(f"perfgate_{s.name}") for s in SPECS}
    try:
        flags["select"] = select.from_flags(config, flags["select"])
    except OptionError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None
    ini = {s.name: config.getini(s.ini) for s in SPECS}
    try:
        options = Options.resolve(bool(enabled), flags, ini, os.environ)
        if is_side_process():  # its controller checked everything; a side writes nothing
            return options
        where = config.stash[_where_key] = sources(flags, ini, os.environ)
        warnings = preflight.check(options, config.rootpath, config.invocation_params.dir,
                                   where)
    except OptionError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None
    for text in warnings:
        config.issue_config_time_warning(pytest.PytestConfigWarning(f"perfgate: {text}"), 2)
    return options


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"perfgate({', '.join(markers.KWARGS)}=...): per-test "
                            "settings for pytest-perfgate, e.g. perfgate(threshold=0.1)")
    options = build_options(config)
    if options.enabled and _xdist_active(config):
        raise pytest.UsageError(
            "perfgate: --perfgate cannot run under pytest-xdist: parallel tests steal each "
            "other's CPUs and every measurement would be wrong. Run perf tests with -n0 "
            "(or -p no:xdist), e.g. `pytest --perfgate -n0 perf/`.")
    ab = _start_ab(config, options) if options.enabled and options.ab else None
    hook = config.hook
    config.stash[session_key] = GateSession(
        options, config.rootpath, ab=ab,
        on_verdict=lambda j: hook.pytest_perfgate_verdict(config=config, judged=j),
        machine_info=lambda info: hook.pytest_perfgate_machine_info(config=config, info=info))
    progress.install(config, config.stash[session_key])


def _start_ab(config: pytest.Config, options: Options) -> ABSetup | None:
    """Check out the base revision beside the working tree; removed at unconfigure.
    None in a side process (the controller already did)."""
    import contextlib

    from pytest_perfgate.modes.ab import ABSetupError, is_side_process, start_ab

    if is_side_process():
        return None
    assert options.ab is not None
    stack = contextlib.ExitStack()
    config.add_cleanup(stack.close)
    try:
        return start_ab(config.rootpath, options.ab, options.ab_setup, stack,
                        _config_args(config))
    except ABSetupError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None


def _config_args(config: pytest.Config) -> tuple[str, ...]:
    """The options that chose this run's configuration, for the A/B sides to use the same:
    ``-c FILE``, ``--rootdir``, ``-o name=value``, ``-p name``."""
    o = config.option
    args: list[str] = []
    if getattr(o, "inifilename", None):
        args += ["-c", str(o.inifilename)]
    if getattr(o, "rootdir", None):
        args += ["--rootdir", str(o.rootdir)]
    for kv in getattr(o, "override_ini", None) or []:
        args += ["-o", str(kv)]
    for name in getattr(o, "plugins", None) or []:
        args += ["-p", str(name)]
    return tuple(args)


def _xdist_active(config: pytest.Config) -> bool:
    n = getattr(config.option, "numprocesses", None)
    dist = getattr(config.option, "dist", "no")
    return bool(n) or (dist not in (None, "no")) or hasattr(config, "workerinput")


def _marker_threshold(item: pytest.Item) -> float | None:
    """The closest perfgate marker's threshold (None: the session's). Every marker was
    checked at collection (:func:`pytest_collection_modifyitems`); this re-raises for items
    created later, e.g. by a plugin."""
    mark = item.get_closest_marker("perfgate")
    if mark is None or "threshold" not in mark.kwargs:
        return None
    raw = mark.kwargs["threshold"]
    try:
        return markers.parse_threshold(raw)
    except OptionError as e:
        raise PerfgateUsageError(f"@pytest.mark.perfgate(threshold={raw!r}) on {item.nodeid}: "
                                 f"{e}") from None


class PerfgateWarning(pytest.PytestWarning):
    """A verdict that passes but needs a look (INCONCLUSIVE, NO BASELINE): shown by ``-rw``
    and in the warnings summary, attributed to the test. Filter it like any warning:
    ``-W ignore::pytest_perfgate.plugin.hooks.PerfgateWarning``."""


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Check every perfgate marker before any test runs: one usage error lists them all
    (a bad marker used to surface as an INTERNALERROR, or only when its test ran)."""
    problems = [p for item in items for p in markers.problems(item)]
    if problems:
        raise pytest.UsageError("perfgate: bad marker(s):\n  " + "\n  ".join(problems))
    select.apply(items, config.stash[session_key].options.select)


@pytest.fixture
def perfgate(request: pytest.FixtureRequest) -> Iterator[PerfGate]:
    """Measure a step at steady state: ``perfgate.measure(step, transitions=num_envs)``."""
    session = request.config.stash[session_key]
    item = request.node
    gate = PerfGate(session, item.nodeid, default_name(item, session), _marker_threshold(item),
                    markers.marker_counts(item),
                    memory_threshold=markers.marker_memory_threshold(item),
                    unit=markers.marker_unit(item))
    note_location(item, session)
    why = session.counts_unavailable(gate.counts)
    if why:  # never a silent pass without the counts the test asked for (§10)
        pytest.skip(f"perfgate: {why}")
    item.stash[_judged_key] = gate.results
    try:
        yield gate
    finally:
        gate.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when != "call":
        return report
    session = item.config.stash.get(session_key, None)
    if session is None:
        return report
    judged = item.stash.get(_judged_key, [])
    bad = failing(judged)
    if report.passed and bad:
        from pytest_perfgate.report.render import explain

        hint = session.run_id if session.options.record and session.records else None
        report.outcome = "failed"
        report.longrepr = "\n\n".join(explain(j, hint) for j in bad)
    _warn_open_verdicts(item, report, judged)
    return report


def _warn_open_verdicts(item: pytest.Item, report: pytest.TestReport,
                        judged: list[Judged]) -> None:
    """INCONCLUSIVE and NO BASELINE pass, but as pytest warnings on the test (README); every
    verdict is also a ``perfgate`` property of the test's junit XML entry."""
    from pytest_perfgate.core.gate import Outcome

    for j in judged:
        v = j.verdict
        if v is None:
            continue
        text = f"{j.result.name}: {v.outcome.value}: {v.message}"
        item.user_properties.append(("perfgate", text))  # junit XML reads teardown's copy
        if v.outcome in (Outcome.INCONCLUSIVE, Outcome.NO_BASELINE) and not v.fails(j.rule):
            item.warn(PerfgateWarning(text))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    """The verdict table, then what could not be written: always, whatever failed."""
    session = config.stash.get(session_key, None)
    if session is None or not session.judged:
        return
    from pytest_perfgate.report import render as report

    tr = terminalreporter
    tr.section("perfgate" + (" (smoke mode: not measured, not recorded)" if session.smoke
                             else ""))
    try:
        for line in report.table(session.judged):
            tr.write_line(line)
        for line in report.notes(session.judged):
            tr.write_line(line, yellow=True)
    except Exception as e:
        tr.write_line(f"perfgate: ERROR: could not render the verdicts: "
                      f"{type(e).__name__}: {e}", red=True)
    if session.record_path is not None:
        tr.write_line(f"recorded run {session.run_id} in {session.record_path}")
    for t in config.stash.get(_written_key, []):
        tr.write_line(f"wrote the {t.what} to {t.path}")
    errors = config.stash.get(_errors_key, [])
    for text in errors:
        tr.write_line(f"perfgate: ERROR: {text}", red=True)
    if errors:
        tr.write_line(f"perfgate: exit status {int(pytest.ExitCode.INTERNAL_ERROR)}: an "
                      "infrastructure error, not a regression (the verdicts above stand)",
                      red=True)


def _results_dir(gs: GateSession) -> str:
    try:
        return str(gs.options.results_path(gs.rootdir))
    except (OSError, ValueError):
        return gs.options.results_dir or "the results dir"


_written_key = pytest.StashKey[list[Any]]()
_errors_key = pytest.StashKey[list[str]]()
#: The exit status of a run whose reports or history could not be written (README).
INFRA_EXIT = pytest.ExitCode.INTERNAL_ERROR


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Record the run, then write the reports, each on its own: a failure of one never
    stops the other, never loses the verdicts (printed next), and ends the run with
    :data:`INFRA_EXIT`, never a regression's status. Runs before the terminal summary."""
    config = session.config
    gs = config.stash.get(session_key, None)
    if gs is None:
        return
    errors: list[str] = []
    try:
        gs.finish()
    except Exception as e:
        errors.append(f"could not record the run in {_results_dir(gs)}: "
                      f"{type(e).__name__}: {e} (fix the path or permissions, or pass "
                      "--perfgate-record=false)")
    gs.record_error = errors[0] if errors else None
    if not gs.smoke and gs.judged and gs.records:
        from pytest_perfgate.report import write as report_write

        where: dict[str, str] = config.stash.get(_where_key, {})
        found = report_write.targets(gs.options, config.invocation_params.dir, where)
        run = {"run_id": gs.run_id if gs.record_path is not None else None,
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               **gs.run_facts()}
        written, failed = report_write.write(found, gs.judged, gs.machine_meta, run)
        config.stash[_written_key] = written
        errors += failed
    config.stash[_errors_key] = errors
    if errors and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED,
                                         pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = INFRA_EXIT
