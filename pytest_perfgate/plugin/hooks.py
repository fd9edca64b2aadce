"""pytest at the edge: options, the ``perfgate`` fixture, verdicts into test outcomes, reports.

Hooks stay thin; the work is in :mod:`session`, :mod:`gate` and :mod:`report`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Iterator

import pytest

from pytest_perfgate.plugin.fixtures_mujoco import g1_scene, humanoid_xml, mujoco_pool, mujoco_sweep  # noqa: F401
from pytest_perfgate.plugin.fixtures_placement import numa_workers, pinned_workers  # noqa: F401
from pytest_perfgate.session.options import SPECS, OptionError, Options
from pytest_perfgate.session.session import ABSetup, GateSession, Judged, PerfGate, PerfgateUsageError, derive_name, failing

session_key = pytest.StashKey[GateSession]()
_judged_key = pytest.StashKey[list[Judged]]()


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except OptionError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = parse.__name__
    return convert


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "steady-state throughput gating (pytest-perfgate)")
    group.addoption("--perfgate", action="store_true", default=None,
                    help="measure perf tests at steady state, record asv history and fail on "
                    "regressions (without it perf tests run in a quick smoke mode)")
    parser.addini("perfgate", "enable --perfgate by default", type="bool", default=False)
    for spec in SPECS:
        env = f" [env: {spec.env}]" if spec.env else ""
        group.addoption(spec.flag, dest=f"perfgate_{spec.name}", default=None,
                        type=_argparse_type(spec.parse),
                        help=(spec.help + env).replace("%", "%%"))  # argparse formats help
        parser.addini(spec.ini, spec.help + env, default=None)


def build_options(config: pytest.Config) -> Options:
    enabled = config.getoption("perfgate") or config.getini("perfgate")
    flags = {s.name: config.getoption(f"perfgate_{s.name}") for s in SPECS}
    ini = {s.name: config.getini(s.ini) for s in SPECS}
    try:
        return Options.resolve(bool(enabled), flags, ini, os.environ)
    except OptionError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "perfgate(threshold=0.05): per-test settings for pytest-perfgate")
    options = build_options(config)
    if options.enabled and _xdist_active(config):
        raise pytest.UsageError(
            "perfgate: --perfgate cannot run under pytest-xdist: parallel tests steal each "
            "other's CPUs and every measurement would be wrong. Run perf tests with -n0 "
            "(or -p no:xdist), e.g. `pytest --perfgate -n0 perf/`.")
    session = GateSession(options, config.rootpath)
    config.stash[session_key] = session
    if options.enabled and options.ab and session.side_conn is None:
        _start_ab(config, session)


def _start_ab(config: pytest.Config, session: GateSession) -> None:
    """Check out the base revision beside the working tree; removed at unconfigure."""
    import contextlib
    import subprocess
    from pathlib import Path

    import pytest_perfgate

    from pytest_perfgate.modes.ab import SideError, SideSpec, worktree
    from pytest_perfgate.history.vcs import git_info, resolve_commit

    root = config.rootpath
    rev = session.options.ab
    assert rev is not None
    if not git_info(root).available:
        raise pytest.UsageError(f"perfgate: --perfgate-ab {rev}: {root} is not a git checkout; "
                                "the A/B mode checks the base revision out with git worktree")
    stack = contextlib.ExitStack()
    try:
        base_dir = stack.enter_context(worktree(root, rev))
    except SideError as e:
        raise pytest.UsageError(f"perfgate: {e}") from None
    config.add_cleanup(stack.close)
    if session.options.ab_setup:
        proc = subprocess.run(session.options.ab_setup, shell=True, cwd=base_dir,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise pytest.UsageError(
                f"perfgate: --perfgate-ab-setup {session.options.ab_setup!r} failed in the base "
                f"worktree (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    plugin_root = str(Path(pytest_perfgate.__file__).resolve().parent.parent)
    base = SideSpec("base", base_dir, (str(base_dir / "src"), str(base_dir)))
    head = SideSpec("head", root)
    commit = resolve_commit(root, rev) or rev
    session.ab = ABSetup(base, head, commit, rev, plugin_root)


def _xdist_active(config: pytest.Config) -> bool:
    n = getattr(config.option, "numprocesses", None)
    dist = getattr(config.option, "dist", "no")
    return bool(n) or (dist not in (None, "no")) or hasattr(config, "workerinput")


def _marker_threshold(item: pytest.Item) -> float | None:
    mark = item.get_closest_marker("perfgate")
    if mark is None or "threshold" not in mark.kwargs:
        return None
    from pytest_perfgate.session.options import parse_fraction

    raw = mark.kwargs["threshold"]
    try:
        return parse_fraction(str(raw))
    except OptionError as e:
        raise PerfgateUsageError(f"@pytest.mark.perfgate(threshold={raw!r}) on {item.nodeid}: "
                                 f"{e}") from None


@pytest.fixture
def perfgate(request: pytest.FixtureRequest) -> Iterator[PerfGate]:
    """Measure a step at steady state: ``perfgate.measure(step, transitions=num_envs)``."""
    session = request.config.stash[session_key]
    item = request.node
    gate = PerfGate(session, item.nodeid, derive_name(item.nodeid), _marker_threshold(item))
    item.stash[_judged_key] = gate.results
    try:
        yield gate
    finally:
        gate.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None] | Any:
    report = yield
    if call.when != "call":
        return report
    session = item.config.stash.get(session_key, None)
    if session is None:
        return report
    if report.passed and not session.smoke:
        _adopt_pytest_benchmark(item, session)
    judged = item.stash.get(_judged_key, [])
    bad = failing(judged)
    if bad and report.passed:
        from pytest_perfgate.report.render import explain

        report.outcome = "failed"
        report.longrepr = "\n\n".join(explain(j) for j in bad)
    return report


def _adopt_pytest_benchmark(item: pytest.Item, session: GateSession) -> None:
    """Record and gate pytest-benchmark results too: its rounds become our windows."""
    fixture = getattr(item, "funcargs", {}).get("benchmark")
    stats = getattr(getattr(fixture, "stats", None), "stats", None)
    data = list(getattr(stats, "data", None) or [])
    if not data:
        return
    from pytest_perfgate.plugin.benchmark_compat import result_from_rounds

    result = result_from_rounds(derive_name(item.nodeid), data)
    judged = item.stash.setdefault(_judged_key, [])
    judged.append(session.judge(result, item.nodeid, _marker_threshold(item)))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    session = config.stash.get(session_key, None)
    if session is None or not session.judged:
        return
    from pytest_perfgate.report import render as report

    tr = terminalreporter
    tr.section("perfgate" + (" (smoke mode: not measured, not recorded)" if session.smoke
                             else ""))
    for line in report.table(session.judged):
        tr.write_line(line)
    for line in report.notes(session.judged):
        tr.write_line(line, yellow=True)
    if session.record_path is not None:
        tr.write_line(f"recorded run {session.run_id} in {session.record_path}")
    if session.record_error:
        tr.write_line(f"perfgate: ERROR: {session.record_error} (the verdicts above stand; "
                      "fix the path or permissions, or pass --perfgate-record=false)", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    gs = session.config.stash.get(session_key, None)
    if gs is None:
        return
    try:
        gs.finish()
    except (OSError, ValueError) as e:
        # An infrastructure error: say so loudly and fail the run, never as a regression.
        gs.record_error = f"could not record history in {gs.options.results_dir or 'the results dir'}: {e}"
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    if gs.smoke or not gs.judged:
        return
    from pytest_perfgate.report import render as report

    meta = gs.history.meta if gs._ctx is not None else {}
    if gs.options.json:
        report.write_json(gs.options.json, gs.judged, meta)
    if gs.options.markdown:
        with open(gs.options.markdown, "a", encoding="utf-8") as f:
            f.write(report.markdown(gs.judged))
