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
    """Cumulative CPU ticks of the whole machine at one instant, and the CPU seconds this
    process and its descendants have used by then (None where they cannot be read)."""

    busy: int
    total: int
    ncpu: int
    ours_s: float | None = None

    @staticmethod
    def our_cores(before: LoadSample, after: LoadSample) -> float | None:
        """Average number of CPUs this process tree kept busy between two samples, over the
        same interval as :meth:`busy_cores`: a workload's side processes run while the
        window's edges are being agreed on too, and that is not outside load. None where
        either sample lacks the figure."""
        dt = after.total - before.total
        if dt <= 0 or before.ours_s is None or after.ours_s is None:
            return None
        elapsed_s = dt / after.ncpu / _CLK_TCK
        return max(0.0, after.ours_s - before.ours_s) / elapsed_s

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
        return LoadSample(busy=total - idle - steal, total=total, ncpu=_ncpu(),
                          ours_s=_our_cpu_s())


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _our_cpu_s() -> float | None:
    """CPU seconds of this process (its reaped children included) and of every live
    descendant (theirs included), walked through ``/proc/<pid>/task/<tid>/children``:
    20 us, where psutil's ``children(recursive=True)`` reads every process's stat on the
    machine (1.5 ms); psutil where the kernel has no children files; None where neither
    can say."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    try:
        todo = _children(os.getpid())
    except OSError:
        return _psutil_cpu_s()
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / _CLK_TCK  # utime stime cutime cstime
            todo += _children(pid)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile: its time joins its parent's children times once reaped
    return total


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
            out += [int(x) for x in f.read().split()]
    return out


def _psutil_cpu_s() -> float | None:
    try:
        import psutil

        me = psutil.Process()
        t = me.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in me.children(recursive=True):
            try:
                c = child.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            total += c.user + c.system + c.children_user + c.children_system
        return float(total)
    except Exception:  # no psutil, or /proc unreadable: the window's own figure stands
        return None


def _ncpu() -> int:
    """CPUs /proc/stat's aggregate line covers: every online CPU, not just our affinity."""
    return os.cpu_count() or 1


class NullProbe:
    """Use where the load guard is off (smoke mode, tests)."""

    def sample(self) -> LoadSample | None:
        return None
