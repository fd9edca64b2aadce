"""Live progress of ``--perfgate`` measurements in pytest's terminal output.

The observer and its wording are :mod:`pytest_perfgate.core.progress`; this module is the
status line over pytest's terminal reporter. A measurement runs inside a test's call phase,
where pytest captures output, so each write suspends capturing (as pytest's live logging
does). The status gets a line of its own: pytest's line in progress (file name and dots, or
``-v``'s test id) is ended first with the reporter's ``ensure_newline()``. On a terminal the
status is rewritten in place (``rewrite(erase=True)``), then replaced by the benchmark's
final line; in a log only the final line is written. Before pytest writes the test's letter,
the final line is ended and pytest's file name written again, so the letter and the
``[ NN%]`` column land where pytest expects them and no blank lines pile up. Silent under
``-q``, in smoke mode and in A/B side processes. Why each step: docs/design.md §13.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_perfgate.core.progress import LiveProgress

OURS = -2  # the reporter's currentfspath for "some other line is open" (pytest uses -2)


class TerminalStatus:
    """A :class:`~pytest_perfgate.core.progress.StatusLine` on pytest's terminal reporter.

    The reporter is looked up at each write (it registers itself after this plugin's
    configure hook ran); with ``-p no:terminal`` nothing is written."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._showing = False  # a status line of ours is on screen
        self._open = False  # our final line is the last thing written, not yet ended
        self._resume: tuple[Any, str] | None = None  # pytest's line we ended: key, prefix

    @property
    def live(self) -> bool:
        tr = self._reporter()
        if tr is None:
            return False
        isatty = tr.isatty  # an attribute before pytest 8.4, a method since
        return bool(isatty() if callable(isatty) else isatty)

    def _reporter(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    @contextlib.contextmanager
    def _uncaptured(self) -> Iterator[None]:
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman is not None else \
                contextlib.nullcontext():
            yield

    def _fit(self, text: str) -> str:
        """A status longer than the terminal would wrap, and ``\\r`` rewinds one row only."""
        width = self.config.get_terminal_writer().fullwidth - 1
        return text if len(text) <= width else text[:max(width - 3, 0)] + "..."

    def _own_line(self, tr: Any) -> None:
        key = tr.currentfspath
        if self._open and key == OURS:  # our previous final line is still open
            tr.write("\n")
            tr.currentfspath = None
        elif key:  # pytest's line (file name and dots, or -v's test id) is open: end it
            if isinstance(key, (str, Path)):
                text = key if isinstance(key, str) else os.path.relpath(key, tr.startpath) + " "
                self._resume = (key, text)
            tr.ensure_newline()
        self._open = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Before pytest writes the test's letter (or -v's word): end our final line and
        reopen pytest's, so the dot lands after the file name, not after our text."""
        tr = self._reporter()
        if tr is None or not self._open:
            return
        self._open = False
        if tr.currentfspath not in (OURS, None):  # pytest opened a line of its own since
            return
        resume, self._resume = self._resume, None
        if resume is None:
            tr.ensure_newline()
            return
        key, text = resume
        tr.write(("\n" if tr.currentfspath == OURS else "") + text)
        tr.currentfspath = key

    def show(self, text: str) -> None:
        tr = self._reporter()
        if tr is None:
            return
        with self._uncaptured():
            if not self._showing:
                self._own_line(tr)
                self._showing = True
            tr.rewrite(self._fit(text), erase=True)
            tr.flush()

    def done(self, text: str) -> None:
        tr = self._reporter()
        if tr is None:
            return
        with self._uncaptured():
            if self._showing:
                tr.rewrite(self._fit(text), erase=True)
            else:
                self._own_line(tr)
                tr.write(text)
            tr.flush()
            # pytest's own marker for "a line of something else is open": whatever pytest
            # writes next (a separator after Ctrl-C, a warning) starts on a new line
            tr.currentfspath = OURS
        self._showing = False
        self._open = True


class _SessionClock:
    """The session's clock as it is when read (a test may swap in a fake one later)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def wall_ns(self) -> int:
        return int(self.session.clock.wall_ns())

    def cpu_ns(self) -> int:
        return int(self.session.clock.cpu_ns())


def install(config: pytest.Config, session: Any) -> None:
    """Give ``session`` (a GateSession) a terminal progress renderer when it measures for
    real and pytest is not quiet."""
    if config.get_verbosity() < 0 or session.smoke or not session.records:
        return
    status = TerminalStatus(config)
    config.pluginmanager.register(status, "perfgate-progress")
    session.progress = LiveProgress(status, _SessionClock(session))
