"""The side's end of an A/B run: this process serves windows; the controller judges.

A side is a pytest run of one perf test started by the controller (modes/ab/remote.py).
When its test reaches ``perfgate.measure`` it announces the benchmark and then runs
windows on command until the controller says done (docs/design.md §3). Only a side started
for calibration (``SideSpec(calibration=True)``) wraps its step in the slowdown injector.
"""

from __future__ import annotations

import contextlib
import os
import stat
import traceback
from typing import TYPE_CHECKING, Any

from pytest_perfgate.core.judged import Judged, summarize
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.measure import Measurement
from pytest_perfgate.core.window import RawWindow, Window, WindowSource
from pytest_perfgate.modes.ab.remote import ENV_CALIBRATION, ENV_FD, SideError, _encode
from pytest_perfgate.modes.mode import BenchCall, recorded_extra

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from pytest_perfgate.modes.ab.slowdown import Slowed

NOT_CALIBRATING = ("this A/B side was not started for calibration: only a side started with "
                   "SideSpec(..., calibration=True), as `perfgate calibrate` does, takes an "
                   "injected slowdown")
NOT_A_LOOP = ("this workload cannot take an injected slowdown: only "
              "perfgate.measure(step, ...) steps can")


_taken: tuple[int | None, bool, str | None] | None = None  # (fd, calibration, bad value)


def _take() -> tuple[int | None, bool, str | None]:
    """Read this process's side variables once and remove the fd's, so nothing it starts
    (a test's own pytest) inherits it: (the connection's fd when the variable names an open
    socket, calibration, the variable's value when it names none)."""
    global _taken
    if _taken is None or ENV_FD in os.environ:  # set again (a test in this process)
        raw = os.environ.pop(ENV_FD, None)
        calibration = os.environ.get(ENV_CALIBRATION) == "1"  # inert without the fd
        fd = int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None
        if fd is not None:
            try:
                fd = fd if stat.S_ISSOCK(os.fstat(fd).st_mode) else None
            except (OSError, OverflowError):
                fd = None
        _taken = (fd, calibration, raw if raw and fd is None else None)
    return _taken


def is_side_process() -> bool:
    """True when the A/B controller started this process as one of its sides."""
    return _take()[0] is not None


def stray_side_variable() -> str | None:
    """The value of a side variable this process inherited that names no connection (a
    nested pytest under a side, or a variable set by hand), for a warning; else None.
    Said once: a later call (another session in this process) gets None."""
    global _taken
    fd, calibration, stray = _take()
    _taken = (fd, calibration, None)
    return stray


def side_connection() -> Connection | None:
    """The connection to the controller when this process is an A/B side, else None."""
    from multiprocessing.connection import Connection

    fd = _take()[0]
    return Connection(fd) if fd is not None else None


class ABSide:
    """The mode of a side process: serve the controller's windows, record nothing."""

    tag: str | None = None  # the controller records the run
    runs_step = True

    def __init__(self, conn: Any, calibration: bool = False) -> None:
        self.conn = conn
        self.calibration = calibration

    @classmethod
    def from_env(cls) -> ABSide:
        return cls(side_connection(), _take()[1])

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        slowed = None
        if self.calibration and isinstance(source, LoopSource):
            from pytest_perfgate.modes.ab.slowdown import Slowed

            slowed = Slowed(source)
        windows = serve(self.conn, source, call.name, call.transitions, slowed,
                        self.calibration, announcement(call))
        m = Measurement(tuple(Window.of(w) for w in windows), True, 0.0, 0)
        return Judged(summarize(call.name, m, call.transitions), None, call.rule, call.test_id)

    def end_test(self, test_id: str) -> None:
        """Tell the controller this test measures nothing more (it may still fail)."""
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(("end",))


def announcement(call: BenchCall) -> dict[str, Any]:
    """What the controller needs of a ``measure()`` call to judge it without running the
    test itself: the threshold the call asked for, its unit and its workload metadata."""
    return {"threshold": call.asked_threshold, "unit": call.unit, "extra": dict(call.extra)}


def serve(conn: Any, source: WindowSource, name: str, transitions: int,
          slowed: Slowed | None, calibration: bool,
          meta: dict[str, Any] | None = None) -> list[RawWindow]:
    """Run windows on the controller's command until it says done (the side's measure()).
    ``slowed`` is the injector around the step of a ``calibration`` side, else None;
    ``meta``: the call's :func:`announcement`."""
    conn.send(("bench", name, transitions, meta or {}))
    served: list[RawWindow] = []
    while True:
        msg = conn.recv()
        if msg[0] == "done":
            return served
        if msg[0] == "extra":  # after the windows: what the record takes from this process
            try:
                conn.send(("extra", recorded_extra(source)))
            except BaseException:
                conn.send(("error", traceback.format_exc()))
                raise
            continue
        if msg[0] == "slowdown":
            if not calibration or slowed is None:
                conn.send(("error", NOT_CALIBRATING if not calibration else NOT_A_LOOP))
                continue
            slowed.set(float(msg[1]))
            conn.send(("ok", slowed.fraction))
            continue
        if msg[0] != "window":
            raise SideError(f"unexpected message {msg[0]!r} from the A/B controller")
        try:
            w = source.run_window(float(msg[1]))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
            raise
        served.append(w)
        conn.send(_encode(w))
