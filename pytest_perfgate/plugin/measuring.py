"""The session plugin: one :class:`PerfgatePlugin` per pytest run, as pytest-xdist's
``DSession`` and pytest-benchmark's ``BenchmarkSession`` are.

Registered by :func:`pytest_perfgate.plugin.hooks.session_plugin`, it holds the
:class:`~pytest_perfgate.session.gating.GateSession` and implements the hooks of a run
that measures: each a few lines calling plain classes (docs/design.md §8).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest

from pytest_perfgate.core.judged import Judged, failing
from pytest_perfgate.plugin import markers, select, status_line
from pytest_perfgate.plugin.open_gate import JUDGED
from pytest_perfgate.plugin.summary import Summary
from pytest_perfgate.session.gating import GateSession
from pytest_perfgate.session.perfgate import PerfGate


class PerfgatePlugin:
    """The hooks of a run that measures (or smoke-runs perf tests), over one session."""

    def __init__(self, config: pytest.Config, session: GateSession,
                 where: dict[str, str]) -> None:
        self.config = config
        self.session = session
        self.summary = Summary(config, session, where)
        self.said_unpinned = False  # threads left unpinned: one warning per session

    @classmethod
    def start(cls, config: pytest.Config) -> PerfgatePlugin:
        """Every setting parsed and checked, the A/B base checked out, the session built."""
        from pytest_perfgate.plugin.setup import build_options, place, refuse_xdist, start_ab

        options, where = build_options(config)
        if options.enabled:
            refuse_xdist(config)
        ab = start_ab(config, options, where) if options.enabled and options.ab else None
        hook = config.hook
        session = GateSession(
            options, config.rootpath, ab=ab,
            on_verdict=lambda j: hook.pytest_perfgate_verdict(config=config, judged=j),
            machine_info=lambda info: hook.pytest_perfgate_machine_info(config=config,
                                                                         info=info),
            place=place(config) if options.enabled and options.remeasure else None)
        if ab is not None:  # the controller sets no perf test up: its sides run it
            from pytest_perfgate.modes.ab.controller import ABController
            from pytest_perfgate.plugin.by_sides import RunBySides

            assert isinstance(session.mode, ABController)
            config.pluginmanager.register(RunBySides(session, session.mode),
                                          "perfgate-ab-sides")
        if session.remeasure is not None:  # its worktrees go when the run ends
            config.add_cleanup(session.remeasure.close)
        status_line.install(config, session)
        return cls(config, session, where)

    def check_items(self, items: list[pytest.Item]) -> None:
        """Check every perfgate marker before any test runs: one usage error lists them all
        (a bad marker used to surface as an INTERNALERROR, or only when its test ran)."""
        problems = [p for item in items for p in markers.problems(item)]
        if problems:
            raise pytest.UsageError("perfgate: bad marker(s):\n  " + "\n  ".join(problems))
        select.apply(items, self.session.options.select)

    def fixture(self, item: pytest.Item) -> Iterator[PerfGate]:
        """The ``perfgate`` fixture's body: a PerfGate for ``item``, closed at teardown."""
        from pytest_perfgate.plugin.open_gate import open_gate

        with open_gate(item, self.session) as gate:
            yield gate

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when != "call":
            return report
        session = self.session
        judged = item.stash.get(JUDGED, [])
        bad = failing(judged)
        if report.passed and bad:
            from pytest_perfgate.report.render import explain

            hint = session.run_id if session.options.record and session.records else None
            report.outcome = "failed"
            report.longrepr = "\n\n".join(explain(j, hint) for j in bad)
        _warn_open_verdicts(item, judged)
        if not self.said_unpinned:
            self.said_unpinned = _warn_unpinned(item, judged)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, object, object]:
        """pytest-benchmark's ``benchmark`` measured by perfgate (plugin/benchmark_compat.py)."""
        from pytest_perfgate.plugin.benchmark_compat import measured_call

        return (yield from measured_call(pyfuncitem, self.session))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.summary.finish(session)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.summary.show(terminalreporter)


def _warn_open_verdicts(item: pytest.Item, judged: list[Judged]) -> None:
    """INCONCLUSIVE and NO BASELINE pass, but as pytest warnings on the test
    (docs/measurement.md); every verdict is also a ``perfgate`` property of the test's
    junit XML entry."""
    from pytest_perfgate.core.gate import Outcome
    from pytest_perfgate.plugin import PerfgateWarning

    for j in judged:
        v = j.verdict
        if v is None:
            continue
        text = f"{j.name}: {v.outcome.value}: {v.message}"
        item.user_properties.append(("perfgate", text))  # junit XML reads teardown's copy
        if v.outcome in (Outcome.INCONCLUSIVE, Outcome.NO_BASELINE) and not v.fails(j.rule):
            item.warn(PerfgateWarning(text))
        profile = j.result.extra.get("profile") if j.memory is None else None
        if isinstance(profile, dict) and "error" in profile:  # the verdict stands
            item.warn(PerfgateWarning(f"{j.result.name}: no profile: {profile['error']}"))


def _warn_unpinned(item: pytest.Item, judged: list[Judged]) -> bool:
    """Warn when a measured process ran a thread pool larger than its CPUs (the first such
    benchmark of the session: the setting is the same for the rest); True once warned."""
    from pytest_perfgate.placement.unpinned import KEY, describe
    from pytest_perfgate.plugin import PerfgateWarning

    for j in judged:
        found = j.result.extra.get(KEY)
        if j.verdict is None or not isinstance(found, list) or not found:
            continue  # a side or smoke mode measures nothing: nothing to say
        item.warn(PerfgateWarning(
            f"{j.result.name}: threads left unpinned: "
            + "; ".join(describe(f) for f in found)
            + " (said once per session)"))
        return True
    return False
