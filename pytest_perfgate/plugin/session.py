"""The session plugin: one :class:`PerfgatePlugin` per pytest run, as pytest-xdist's
``DSession`` and pytest-benchmark's ``BenchmarkSession`` are.

Registered by :func:`pytest_perfgate.plugin.hooks.session_plugin`, it holds the
:class:`~pytest_perfgate.session.session.GateSession` and implements the hooks of a run
that measures: each a few lines calling plain classes (docs/design.md §8).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest

from pytest_perfgate.core.judged import Judged, failing
from pytest_perfgate.plugin import markers, progress, select
from pytest_perfgate.plugin.naming import default_name, note_location, test_file
from pytest_perfgate.plugin.summary import Summary
from pytest_perfgate.session.options import OptionError
from pytest_perfgate.session.session import GateSession, PerfGate, PerfgateUsageError

_judged_key = pytest.StashKey[list[Judged]]()  # a test's verdicts, for its report


class PerfgatePlugin:
    """The hooks of a run that measures (or smoke-runs perf tests), over one session."""

    def __init__(self, config: pytest.Config, session: GateSession,
                 where: dict[str, str]) -> None:
        self.config = config
        self.session = session
        self.summary = Summary(config, session, where)

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
        if session.remeasure is not None:  # its worktrees go when the run ends
            config.add_cleanup(session.remeasure.close)
        progress.install(config, session)
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
        session = self.session
        gate = PerfGate(session, item.nodeid, default_name(item, session),
                        marker_threshold(item), markers.marker_counts(item),
                        memory_threshold=markers.marker_memory_threshold(item),
                        unit=markers.marker_unit(item), test_file=test_file(item))
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
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when != "call":
            return report
        session = self.session
        judged = item.stash.get(_judged_key, [])
        bad = failing(judged)
        if report.passed and bad:
            from pytest_perfgate.report.render import explain

            hint = session.run_id if session.options.record and session.records else None
            report.outcome = "failed"
            report.longrepr = "\n\n".join(explain(j, hint) for j in bad)
        _warn_open_verdicts(item, judged)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, object, object]:
        """pytest-benchmark's ``benchmark`` measured by perfgate (plugin/benchmark_compat.py)."""
        from pytest_perfgate.plugin.benchmark_compat import measured_call

        return (yield from measured_call(pyfuncitem, self.session, _judged_key))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.summary.finish(session)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.summary.show(terminalreporter)


def marker_threshold(item: pytest.Item) -> float | None:
    """The closest perfgate marker's threshold (None: the session's). Every marker was
    checked at collection (:meth:`PerfgatePlugin.check_items`); this re-raises for items
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


def _warn_open_verdicts(item: pytest.Item, judged: list[Judged]) -> None:
    """INCONCLUSIVE and NO BASELINE pass, but as pytest warnings on the test
    (docs/measurement.md); every verdict is also a ``perfgate`` property of the test's
    junit XML entry."""
    from pytest_perfgate.core.gate import Outcome
    from pytest_perfgate.plugin.hooks import PerfgateWarning

    for j in judged:
        v = j.verdict
        if v is None:
            continue
        text = f"{j.result.name}: {v.outcome.value}: {v.message}"
        item.user_properties.append(("perfgate", text))  # junit XML reads teardown's copy
        if v.outcome in (Outcome.INCONCLUSIVE, Outcome.NO_BASELINE) and not v.fails(j.rule):
            item.warn(PerfgateWarning(text))
        profile = j.result.extra.get("profile")
        if isinstance(profile, dict) and "error" in profile:  # the verdict stands
            item.warn(PerfgateWarning(f"{j.result.name}: no profile: {profile['error']}"))


__all__ = ["PerfgatePlugin", "marker_threshold"]
