"""Whole-machine CPU load from /proc/stat, to flag windows polluted by outside work.

Note (docs/design.md §1): the machine-speed drift seen on shared hosts does not show up
here; this guard catches only load inside our own machine (another job on the runner).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class LoadSample:
    """Cumulative CPU ticks of the whole machine at one instant."""

    busy: int
    total: int
    ncpu: int

    @staticmethod
    def busy_cores(before: LoadSample, after: LoadSample) -> float | None:
        """Average number of busy CPUs between two samples (None if no ticks elapsed)."""
        dt = after.total - before.total
        if dt <= 0:
            return None
        return (after.busy - before.busy) / dt * after.ncpu


class LoadProbe(Protocol):
    def sample(self) -> LoadSample | None: ...


class ProcStatProbe:
    """Reads the aggregate ``cpu`` line of /proc/stat; returns None where it is missing."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self.path = path

    def sample(self) -> LoadSample | None:
        try:
            with open(self.path, "rb") as f:
                head = f.readline().split()
        except OSError:
            return None
        if len(head) < 5 or head[0] != b"cpu":
            return None
        try:
            ticks = [int(x) for x in head[1:]]
        except ValueError:
            return None
        # user nice system idle iowait irq softirq steal [guest guest_nice: already in user]
        total = sum(ticks[:8])
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        steal = ticks[7] if len(ticks) > 7 else 0
        return LoadSample(busy=total - idle - steal, total=total, ncpu=_ncpu())


def _ncpu() -> int:
    """CPUs /proc/stat's aggregate line covers: every online CPU, not just our affinity."""
    return os.cpu_count() or 1


class NullProbe:
    """Use where the load guard is off (smoke mode, tests)."""

    def sample(self) -> LoadSample | None:
        return None
