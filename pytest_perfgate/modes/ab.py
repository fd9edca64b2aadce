"""Interleaved A/B: a base process and a head process measured in alternating short turns.

The machine's speed drifts by up to 1.5x within seconds (FIELD-NOTES 7); a base and a head
measured in the same few hundred milliseconds see the same machine, so the per-turn ratio
cancels the drift. Written by hand: no benchmarking library alternates two live processes.

Protocol (over a socketpair inherited by the side process, pickled tuples of plain data):
side -> ("bench", name, transitions) when its test reaches ``perfgate.measure``;
controller -> ("window", seconds) and side -> ("raw", transitions, wall_s, cpu_s, calls,
{phase: (calls, wall_ns, cpu_ns)}); controller -> ("done",) returns from measure; side ->
("error", text) when the step raised. Only one side runs at a time: the other waits idle.
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
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any, Iterator, Mapping

from pytest_perfgate.core.measure import Measurement, Meter, RawWindow, Window, WindowSource

ENV_FD = "PERFGATE_SIDE_FD"
ENV_ROLE = "PERFGATE_SIDE_ROLE"
START_TIMEOUT_S = 180.0  # a side imports the workload (torch, mujoco) before it says hello
WINDOW_GRACE_S = 60.0  # beyond the window itself: one step may be slow
EXIT_TIMEOUT_S = 30.0


class SideError(RuntimeError):
    """A side process failed (crashed, hung, raised); an infrastructure error, not a verdict."""


@dataclass(frozen=True)
class SideSpec:
    """How to start one side: where, with which import path and environment."""

    role: str  # "base" or "head"
    cwd: Path
    pythonpath: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    pytest_args: tuple[str, ...] = ()


def _encode(w: RawWindow) -> tuple[Any, ...]:
    return ("raw", w.to_wire())


def _decode(msg: tuple[Any, ...]) -> RawWindow:
    return RawWindow.from_wire(msg[1])


class Side:
    """A running side process (a pytest run of one test) and its end of the socketpair."""

    def __init__(self, spec: SideSpec, nodeid: str, plugin_root: str) -> None:
        self.spec = spec
        self.nodeid = nodeid
        parent, child = Pipe(duplex=True)
        self.conn: Connection = parent
        env = {**os.environ, **spec.env, ENV_FD: str(child.fileno()), ENV_ROLE: spec.role}
        env.pop("PYTEST_ADDOPTS", None)
        env.pop("PYTEST_XDIST_WORKER", None)
        paths = [*spec.pythonpath, env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        # Pin pytest_perfgate to the controller's copy so the protocol always matches, even
        # when the base revision carries an older plugin; the project itself comes from cwd.
        boot = ("import sys; sys.path.insert(0, %r); import pytest_perfgate.plugin.hooks; "
                "sys.path.pop(0); import pytest; sys.exit(pytest.main(sys.argv[1:]))"
                % plugin_root)
        args = [sys.executable, "-c", boot, nodeid, "-q", "-p", "no:cacheprovider",
                "-p", "no:randomly", *spec.pytest_args]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, cwd=spec.cwd, env=env, pass_fds=(child.fileno(),),
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        child.close()
        self.command = shlex.join(args[:1] + ["-m", "pytest", nodeid])

    def recv(self, timeout: float, waiting_for: str) -> tuple[Any, ...]:
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
                raise self._failure(f"sent nothing for {timeout:.0f} s while we waited for "
                                    f"{waiting_for}")

    def _failure(self, what: str) -> SideError:
        try:  # a closed pipe can be seen before the exit status is: wait a little for it
            code: int | None = self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            code = None
        how = ("still running" if code is None else f"exit code {code}" if code >= 0
               else f"killed by {signal.Signals(-code).name}")
        return SideError(f"{self.spec.role} side ({self.command} in {self.spec.cwd}) {what} "
                         f"[{how}]. Its output ends with:\n{self.output_tail()}")

    def output_tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.log.seek(0)
            return "\n".join(self.log.read().decode(errors="replace").splitlines()[-lines:])
        return "(no output)"

    def close(self) -> int | None:
        """Let the side finish its test, then terminate -> kill; never leaves it running."""
        with contextlib.suppress(OSError):
            self.conn.close()
        try:
            return self.proc.wait(EXIT_TIMEOUT_S)
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

    def inject_slowdown(self, fraction: float) -> None:
        """Calibration only: make every step of this side ``fraction`` slower (0 = off)."""
        self.side.conn.send(("slowdown", fraction))
        self.side.recv(WINDOW_GRACE_S, "the slowdown to be calibrated")

    def run_window(self, duration_s: float) -> RawWindow:
        self.side.conn.send(("window", duration_s))
        msg = self.side.recv(duration_s + WINDOW_GRACE_S, "a window's result")
        if msg[0] != "raw":
            raise SideError(f"{self.side.spec.role} side sent {msg[0]!r}, expected a window")
        return _decode(msg)


@dataclass
class Pair:
    """Both sides of one test, started together and closed together."""

    base: Side
    head: Side

    def close(self) -> None:
        self.base.close()
        self.head.close()
        self.base.log.close()
        self.head.log.close()

    def next_bench(self, name: str) -> tuple[RemoteSource, RemoteSource]:
        """Wait until both sides reach the ``measure()`` call of benchmark ``name``."""
        for side in (self.base, self.head):
            msg = side.recv(START_TIMEOUT_S, f"its measure() call for {name}")
            if msg[0] != "bench" or msg[1] != name:
                raise SideError(f"{side.spec.role} side reached {msg[:2]!r}, expected "
                                f"('bench', {name!r}): do base and head run the same test?")
        return RemoteSource(self.base), RemoteSource(self.head)

    def done(self) -> None:
        for side in (self.base, self.head):
            with contextlib.suppress(OSError):
                side.conn.send(("done",))


def measure_pair(base: WindowSource, head: WindowSource, meter: Meter, turns: int,
                 turn_s: float) -> tuple[Measurement, Measurement]:
    """Warm both sides up by the usual stability rule, then interleave ``turns`` turns."""
    warm_b = meter.warm_up(base)
    warm_h = meter.warm_up(head)
    b, h = interleave(base, head, turns, turn_s)
    return (Measurement(tuple(Window.of(w) for w in b), *warm_b),
            Measurement(tuple(Window.of(w) for w in h), *warm_h))


def interleave(base: WindowSource, head: WindowSource, turns: int, turn_s: float
               ) -> tuple[list[RawWindow], list[RawWindow]]:
    """ABBA turns: base, head, head, base, ... so a linear drift cancels within each pair."""
    b: list[RawWindow] = []
    h: list[RawWindow] = []
    for i in range(turns):
        if i % 2 == 0:
            b.append(base.run_window(turn_s))
            h.append(head.run_window(turn_s))
        else:
            h.append(head.run_window(turn_s))
            b.append(base.run_window(turn_s))
    return b, h


@contextlib.contextmanager
def worktree(repo: Path, rev: str) -> Iterator[Path]:
    """A detached temporary git worktree of ``rev``, removed afterwards."""
    from pytest_perfgate.history.vcs import resolve_commit

    commit = resolve_commit(repo, rev)
    if commit is None:
        raise SideError(f"--perfgate-ab {rev!r}: not a commit of the repository at {repo}; "
                        "give a branch, tag or hash that `git rev-parse` resolves")
    tmp = Path(tempfile.mkdtemp(prefix="perfgate-base-"))
    path = tmp / "base"
    proc = subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=repo,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SideError(f"could not check out {rev} ({commit[:10]}) into a worktree: "
                        f"{proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo,
                       capture_output=True, timeout=120)
        with contextlib.suppress(OSError):
            tmp.rmdir()


# ---- the side's end ---------------------------------------------------------------------


def side_connection() -> Connection | None:
    """The connection to the controller when this process is an A/B side, else None."""
    fd = os.environ.get(ENV_FD)
    return Connection(int(fd)) if fd else None


def serve(conn: Connection, source: WindowSource, name: str, transitions: int,
          slowed: Slowed | None = None) -> list[RawWindow]:
    """Run windows on the controller's command until it says done (the side's measure())."""
    conn.send(("bench", name, transitions))
    served: list[RawWindow] = []
    while True:
        msg = conn.recv()
        if msg[0] == "done":
            return served
        if msg[0] == "slowdown":
            if slowed is None:
                conn.send(("error", "this workload cannot take an injected slowdown: only "
                           "perfgate.measure(step, ...) steps can"))
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


class Slowed:
    """Injected slowdown for calibration: after each step, spin for ``fraction`` of its cost.

    The spin is a fixed count of loop iterations calibrated on the step's measured cost, so
    it is real extra work that the machine's speed affects like any other.
    """

    def __init__(self, source: Any) -> None:
        self.source = source
        self.fraction = 0.0
        self._spins = 0
        inner = source.step

        def step() -> object:
            out = inner()
            n = self._spins
            while n:
                n -= 1
            return out

        source.step = step

    def _spin_cost(self, min_s: float = 0.05) -> float:
        n, t = 10_000, 0.0
        while t < min_s:
            n *= 2
            t0 = time.perf_counter()
            k = n
            while k:
                k -= 1
            t = time.perf_counter() - t0
        return t / n

    def set(self, fraction: float, seconds: float = 0.5, rounds: int = 5) -> None:
        """Calibrate the spin to ``fraction`` of one step's current cost (0 turns it off).

        Step cost and spin cost are measured alternately and the median of their ratios is
        used: the machine's speed drifts (FIELD-NOTES 7), so a spin cost measured once, at
        another moment than the step's, biased the injected slowdown (10% measured as 7%).
        """
        self._spins = 0
        self.fraction = fraction
        if fraction <= 0:
            return
        ratios = []
        for _ in range(rounds):
            w = self.source.run_window(seconds / rounds)
            ratios.append(w.wall_s / max(1, w.calls) / self._spin_cost(0.01))
        self._spins = max(1, int(fraction * sorted(ratios)[rounds // 2]))
