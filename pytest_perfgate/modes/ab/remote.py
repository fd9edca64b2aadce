"""The controller's handle on A/B side processes: start, talk to, and always end them.

A side is a pytest run of one perf test in its own process, connected by a socketpair it
inherits (the message protocol: :mod:`pytest_perfgate.modes.ab`). Failures of a side are
:class:`SideError`, an infrastructure error naming the side, never a verdict.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_perfgate.core import group
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.modes.place import Place, Where

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

ENV_FD = "PERFGATE_SIDE_FD"  # the inherited connection's file descriptor
ENV_CALIBRATION = "PERFGATE_SIDE_CALIBRATION"  # "1": the side takes injected slowdowns
START_TIMEOUT_S = 180.0  # a side imports the workload (torch, mujoco) before it says hello
WINDOW_FLOOR_S = 15.0  # a window may take this long on top of WINDOW_FACTOR x its length:
WINDOW_FACTOR = 10.0  # one step may be slow, the machine loaded (docs/ab.md)
WINDOW_GRACE_S = 60.0  # calibration only: an injected slowdown is measured, not one window
EXIT_TIMEOUT_S = 30.0
TAIL_LINES = 25  # of a failed side's output, shown in its error


def window_bound(duration_s: float) -> float:
    """How long a side may take to serve a window of ``duration_s`` before it counts as
    hung: proportionate to the window (turns are 0.1 s by default: 16 s), never below the
    floor, so a hang is reported within seconds of what the turn length makes normal."""
    return WINDOW_FLOOR_S + WINDOW_FACTOR * duration_s


class SideError(RuntimeError):
    """A side process failed (crashed, hung, raised); an infrastructure error, not a verdict."""


@dataclass(frozen=True)
class SideSpec:
    """How to start one side: where, and with which import path.

    ``calibration`` starts a side for the verdict-quality study (``perfgate calibrate``):
    only such a side wraps its step in the slowdown injector and answers slowdown requests.
    Production A/B sides never do, so their step runs unwrapped.
    """

    role: str  # "base" or "head"
    cwd: Path
    pythonpath: tuple[str, ...] = ()
    calibration: bool = False
    # the controller's configuration choices (-c FILE, --rootdir, -o k=v, -p no:x): a suite
    # run with `-c /dev/null` must not have its sides read the project's addopts
    pytest_args: tuple[str, ...] = ()
    # the user's run's place, and the worktree this side stands at that place in (None: the
    # user's own checkout): a test is selected from the same folder as the user selected it
    place: Place | None = None
    tree: Path | None = None
    # the interpreter of the side's own environment (envs/build.py), None: the controller's
    python: str | None = None

    def target(self, nodeid: str, where: Where = None) -> str:
        """The argument that selects the test from this side's working directory
        (``where``: its file and the rest of its node id, when the controller knows them)."""
        return nodeid if self.place is None else self.place.test_arg(nodeid, self.tree, where)


def _encode(w: RawWindow) -> tuple[Any, ...]:
    return ("raw", w.to_wire())


def _decode(msg: tuple[Any, ...]) -> RawWindow:
    return RawWindow.from_wire(msg[1])


class Side:
    """A running side process (a pytest run of one test) and its end of the socketpair."""

    def __init__(self, spec: SideSpec, nodeid: str, plugin_root: str, where: Where = None
                 ) -> None:
        from multiprocessing.connection import Pipe

        self.spec = spec
        self.nodeid = nodeid
        parent, child = Pipe(duplex=True)
        self.conn: Connection = parent
        env = {**os.environ, ENV_FD: str(child.fileno())}
        env.pop(ENV_CALIBRATION, None)
        if spec.calibration:
            env[ENV_CALIBRATION] = "1"
        env.pop("PYTEST_ADDOPTS", None)
        env.pop("PYTEST_XDIST_WORKER", None)
        inherited = env.get("PYTHONPATH", "")
        if spec.place is not None:
            inherited = spec.place.pythonpath(inherited, spec.tree)
        paths = [*spec.pythonpath, inherited]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        # Pin pytest_perfgate to the controller's copy so the protocol always matches, even
        # when the base revision carries an older plugin; the project itself comes from cwd.
        boot = (f"import sys; sys.path.insert(0, {plugin_root!r}); "
                "import pytest_perfgate.plugin.hooks; "
                "sys.path.pop(0); import pytest; sys.exit(pytest.main(sys.argv[1:]))")
        # The boot imported pytest_perfgate before pytest could mark it for assertion
        # rewriting; a project whose filterwarnings has "error" (this one) turned pytest's
        # warning about that into a failed start-up.
        self.target = spec.target(nodeid, where)
        args = [spec.python or sys.executable, "-c", boot, self.target, "-q", "-rs",
                "-p", "no:cacheprovider", "-p", "no:randomly",
                "-W", "ignore::pytest.PytestAssertRewriteWarning", *spec.pytest_args]
        self.log = tempfile.TemporaryFile()
        try:
            self.proc = group.popen(args, cwd=spec.cwd, env=env, pass_fds=(child.fileno(),),
                                    stdin=subprocess.DEVNULL, stdout=self.log,
                                    stderr=subprocess.STDOUT)
        except BaseException:  # not started: nothing of it stays open
            for end in (self.log, parent):
                end.close()
            raise
        finally:
            child.close()
        self.command = shlex.join([*args[:1], "-m", "pytest", self.target])
        self.hung = False  # it missed a deadline: close() ends it at once

    def recv(self, timeout: float, waiting_for: str, bound: str = "") -> tuple[Any, ...]:
        """The side's next message; ``bound`` says why ``timeout`` is what it is."""
        deadline = time.monotonic() + timeout
        while True:
            if self.conn.poll(min(0.5, max(0.0, deadline - time.monotonic()))):
                try:
                    msg = self.conn.recv()
                except (EOFError, OSError):
                    raise self._failure(f"closed its connection while we waited for "
                                        f"{waiting_for}") from None
                if msg[0] == "error":
                    raise SideError(f"{self.spec.role} side: the workload raised:\n{msg[1]}")
                return msg
            if self.proc.poll() is not None:
                raise self._failure(f"exited before {waiting_for}")
            if time.monotonic() >= deadline:
                self.hung = True
                raise self._failure(f"sent nothing for {timeout:.3g} s{bound} while we waited "
                                    f"for {waiting_for}, so it counts as hung")

    def _failure(self, what: str) -> SideError:
        try:  # a closed pipe can be seen before the exit status is: wait a little for it
            code: int | None = self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            code = None
        how = ("still running" if code is None else f"exit code {code}" if code >= 0
               else f"killed by {signal.Signals(-code).name}")
        return SideError(f"{self.spec.role} side ({self.command} in {self.spec.cwd}) {what} "
                         f"[{how}]. Its output ends with:\n{self.output_tail()}")

    def announced(self, timeout: float = START_TIMEOUT_S) -> tuple[Any, ...] | None:
        """The next ("bench", name, transitions, meta) of a side that runs its test on its
        own, or None once its test measures nothing more: it said so, closed its connection
        or exited (its exit status says how the test ended). Silence past ``timeout`` is a
        hang, a SideError."""
        try:
            msg = self.recv(timeout, "its test's next measure() call or its end",
                            " (the bound for a test's set-up before a measure() call)")
        except SideError:
            if self.hung:
                raise
            return None
        if msg[0] == "end":
            return None
        if msg[0] != "bench":
            raise SideError(f"{self.spec.role} side sent {msg[0]!r}, expected a measure() "
                            "call or the end of its test")
        return msg

    def skip_reason(self) -> str:
        """The reason pytest's -rs summary gives for this side's skipped test."""
        for line in reversed(self.output_tail().splitlines()):
            if line.startswith("SKIPPED ["):
                return line.partition("] ")[2] or line
        return "skipped (no reason given)"

    def lacks_test(self) -> bool:
        """True when this side's pytest ended because its file has no such test (exit 4
        "no match": a new function or parameter; exit 5: nothing collected). A file that is
        not found is not this: the caller checks the file itself (:meth:`Place.missing`)."""
        code = self.proc.poll()
        return code == 5 or (code == 4 and "(no match in any of" in self.output_tail())

    def skipped(self) -> bool:
        """True when this side's pytest ended with its test skipped (pytest's summary)."""
        tail = self.output_tail().splitlines()
        return bool(tail) and " skipped" in tail[-1] and " passed" not in tail[-1]

    def not_found(self) -> bool:
        """True when this side's pytest could not find the path it was given (exit 4)."""
        return self.proc.poll() == 4 and "file or directory not found" in self.output_tail()

    def output_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.log.seek(0)
            text = self.log.read().decode(errors="replace")
            return "\n".join(text.splitlines()[-TAIL_LINES:])
        return "(no output)"

    def close(self) -> int | None:
        """Let the side finish its test, then terminate -> kill; never leaves it running."""
        with contextlib.suppress(OSError):
            self.conn.close()
        try:  # a hung side will not finish: end it at once
            return self.proc.wait(0.5 if self.hung else EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self.proc.wait(wait)
        return self.proc.poll()


class RemoteSource:
    """A WindowSource whose windows run in a side process."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self._first = True  # its first window makes the step's first call: lazy set-up

    def inject_slowdown(self, fraction: float) -> None:
        """Calibration only: make every step of this side ``fraction`` slower (0 = off).
        The side must have been started with ``SideSpec(..., calibration=True)``."""
        self.side.conn.send(("slowdown", fraction))
        self.side.recv(WINDOW_GRACE_S, "the slowdown to be calibrated")

    def run_window(self, duration_s: float) -> RawWindow:
        self.side.conn.send(("window", duration_s))
        timeout = window_bound(duration_s)
        bound = (f" (the bound for a {duration_s:g} s window: {WINDOW_FLOOR_S:g} s + "
                 f"{WINDOW_FACTOR:g} x the window; a step that takes longer needs a longer "
                 "--perfgate-ab-turn-time)")
        if self._first:  # the step's first call may compile or load: the start-up bound
            timeout = max(timeout, START_TIMEOUT_S)
            bound = " (the bound for a side's first window, which makes the step's first call)"
        msg = self.side.recv(timeout, "a window's result", bound)
        self._first = False
        if msg[0] != "raw":
            raise SideError(f"{self.side.spec.role} side sent {msg[0]!r}, expected a window")
        return _decode(msg)


    def recorded(self) -> dict[str, Any]:
        """What the side's process adds to the record's ``extra`` after its windows (a ring
        pair's ``ring_pair``: modes/mode.py ``recorded_extra``), as history mode records it."""
        self.side.conn.send(("extra",))
        msg = self.side.recv(WINDOW_FLOOR_S, "what its process records",
                             f" (the bound for an answer that runs no window: "
                             f"{WINDOW_FLOOR_S:g} s)")
        if msg[0] != "extra" or not isinstance(msg[1], dict):
            raise SideError(f"{self.side.spec.role} side sent {msg[0]!r}, expected what its "
                            "process records")
        return msg[1]


def reach(side: Side, name: str) -> None:
    """Wait until ``side`` reaches the ``measure()`` call of benchmark ``name``."""
    msg = side.recv(START_TIMEOUT_S, f"its measure() call for {name}",
                    " (the bound for starting a side, importing and collecting its test)")
    if msg[0] == "end":  # its test measured nothing (more): it skipped, or never measures
        with contextlib.suppress(subprocess.TimeoutExpired):
            side.proc.wait(EXIT_TIMEOUT_S)
        raise SideError(f"{side.spec.role} side's test ended before its measure() call for "
                        f"{name}")
    if msg[0] != "bench" or msg[1] != name:
        raise SideError(f"{side.spec.role} side reached {msg[:2]!r}, expected "
                        f"('bench', {name!r}): do base and head run the same test?")


@dataclass
class Pair:
    """Both sides of one test, started together and closed together."""

    base: Side
    head: Side

    @classmethod
    def start(cls, base: SideSpec, head: SideSpec, nodeid: str, plugin_root: str,
              where: Where = None) -> Pair:
        """Both sides of ``nodeid``, or neither: a side that cannot start ends the one that
        did (its failure a :class:`SideError`, an infrastructure error)."""
        sides: list[Side] = []
        try:
            for spec in (base, head):
                sides.append(Side(spec, nodeid, plugin_root, where))
        except BaseException as e:
            for side in sides:
                side.close()
                side.log.close()
            if isinstance(e, OSError):
                raise SideError(f"could not start a side process: {e}") from None
            raise
        return cls(*sides)

    def close(self) -> None:
        """End both sides: both hear the connection close first, so they end together."""
        for side in (self.base, self.head):
            with contextlib.suppress(OSError):
                side.conn.close()
        self.base.close()
        self.head.close()
        self.base.log.close()
        self.head.log.close()

    def next_bench(self, name: str) -> tuple[RemoteSource, RemoteSource]:
        """Wait until both sides reach the ``measure()`` call of benchmark ``name``."""
        for side in (self.base, self.head):
            reach(side, name)
        return RemoteSource(self.base), RemoteSource(self.head)

    def done(self) -> None:
        for side in (self.base, self.head):
            with contextlib.suppress(OSError):
                side.conn.send(("done",))
