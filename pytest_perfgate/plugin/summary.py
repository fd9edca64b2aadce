"""The end of a run: record it, write the reports, print the verdict table.

Each step on its own: a failure of one never stops the others, never loses the verdicts,
and ends the run with :data:`INFRA_EXIT`, never a regression's status (docs/measurement.md).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from pytest_perfgate.session.gating import GateSession

#: The exit status of a run whose reports or history could not be written.
INFRA_EXIT = pytest.ExitCode.INTERNAL_ERROR


class Summary:
    """What the end of the run wrote and what it could not."""

    def __init__(self, config: pytest.Config, session: GateSession,
                 where: dict[str, str]) -> None:
        self.config = config
        self.session = session
        self.where = where  # option -> where it was set, for messages
        self.written: list[Any] = []
        self.errors: list[str] = []
        # Imported now, not at the session's end: an import then compiles under whatever
        # the tests left (killed vector-env workers ended one in CPython's "AST constructor
        # recursion depth mismatch"), and the verdicts would be lost with it.
        from pytest_perfgate.report import render, write  # noqa: F401

    def finish(self, session: pytest.Session) -> None:
        """Record the run, then write the reports; runs before the terminal summary."""
        gs = self.session
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

            found = report_write.targets(gs.options, self.config.invocation_params.dir,
                                         self.where)
            run = {"run_id": gs.run_id if gs.record_path is not None else None,
                   "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   **gs.run_facts()}
            self.written, failed = report_write.write(found, gs.judged, gs.machine_meta, run)
            errors += failed
        self.errors = errors
        if errors and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED,
                                             pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = INFRA_EXIT

    def show(self, tr: Any) -> None:
        """The verdict table, then what could not be written: always, whatever failed."""
        gs = self.session
        if not gs.judged:
            return
        tr.section("perfgate" + (" (smoke mode: not measured, not recorded)" if gs.smoke
                                 else ""))
        try:
            from pytest_perfgate.report import render as report

            for line in report.table(gs.judged):
                tr.write_line(line)
            for line in report.notes(gs.judged):
                tr.write_line(line, yellow=True)
        except Exception as e:
            tr.write_line(f"perfgate: ERROR: could not render the verdicts: "
                          f"{type(e).__name__}: {e}", red=True)
        if gs.record_path is not None:
            tr.write_line(f"recorded run {gs.run_id} in {gs.record_path}")
        for t in self.written:
            tr.write_line(f"wrote the {t.what} to {t.path}")
        for text in self.errors:
            tr.write_line(f"perfgate: ERROR: {text}", red=True)
        if self.errors:
            tr.write_line(f"perfgate: exit status {int(INFRA_EXIT)}: an infrastructure "
                          "error, not a regression (the verdicts above stand)", red=True)


def _results_dir(gs: GateSession) -> str:
    try:
        return str(gs.options.results_path(gs.rootdir))
    except (OSError, ValueError):
        return gs.options.results_dir or "the results dir"
