"""A neighbour that comes and goes: CPU hogs switching on and off at random, for the study.

``perfgate calibrate --load one|both`` runs its trials beside one (or two) real busy-loop
processes, each on for 2-5 s, then off for 2-5 s, at random, in step with each other (the
same seeded schedule against the shared monotonic clock, so "both" loads both cores at
once). This is the load the A/B load-change rule exists for (docs/ab.md). Every hog asks
the kernel to kill it when the process that started it dies (PR_SET_PDEATHSIG) and checks
its parent is still there, so a killed study leaves no hog behind; :class:`ToggleHog`
ends them on exit (terminate, then kill).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import TracebackType

from pytest_perfgate.core import group

ON_OFF_S = (2.0, 5.0)  # each on and each off period lasts this long, uniformly at random
EXIT_S = 5.0

# The hog itself: no imports of ours, so it starts in milliseconds. argv: parent pid, seed,
# start (monotonic seconds), shortest and longest period.
HOG = """
import ctypes, os, random, signal, sys, time
try:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
parent = int(sys.argv[1])
if os.getppid() != parent:
    os._exit(0)
rng = random.Random(int(sys.argv[2]))
t, lo, hi = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
on = rng.random() < 0.5
while os.getppid() == parent:
    t += rng.uniform(lo, hi)
    if on:
        while time.monotonic() < t:
            pass
    else:
        time.sleep(max(0.0, t - time.monotonic()))
    on = not on
"""


class ToggleHog:
    """``cores`` busy-loop processes sharing one on/off schedule; a context manager."""

    def __init__(self, cores: int, seed: int = 0, period: tuple[float, float] = ON_OFF_S
                 ) -> None:
        if cores not in (1, 2):
            raise ValueError(f"cores={cores!r}: a hog runs on one core or both (1 or 2)")
        lo, hi = period
        if not 0 < lo <= hi:
            raise ValueError(f"period={period!r}: give (shortest, longest) seconds, 0 < a <= b")
        self.cores, self.seed, self.period = cores, seed, (float(lo), float(hi))
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> ToggleHog:
        start = time.monotonic() + 0.2  # every hog begins the schedule at the same instant
        lo, hi = self.period
        for _ in range(self.cores):
            self.procs.append(group.popen(
                [sys.executable, "-c", HOG, str(os.getpid()), str(self.seed), repr(start),
                 repr(lo), repr(hi)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        """End every hog: SIGTERM, then SIGKILL; bounded."""
        for p in self.procs:
            group.stop(p, term_wait=EXIT_S, kill_wait=EXIT_S)
        self.procs.clear()

    def __enter__(self) -> ToggleHog:
        return self.start()

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def hog_for(load: str, seed: int = 0) -> ToggleHog | None:
    """The hog of a study scenario ("quiet": none)."""
    if load == "quiet":
        return None
    return ToggleHog(1 if load == "one" else 2, seed)
