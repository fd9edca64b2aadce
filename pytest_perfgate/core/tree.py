"""The workload is a process tree: this process and every process it started, recursively.

A step that drives worker processes (a subprocess vector env, DataLoader workers, a simulator
server) does its work in them. So the CPU time a window reports, the cores it used and the
outside-load guard (outside load = machine busy cores minus the tree's) count the tree, and
its memory is the tree's (docs/design.md §14).

Costs decide the shape: listing the descendants (psutil scans every /proc/<pid>/stat) took
~3-15 ms on the 2-vCPU runner and a psutil read ~15-60 us per process, so the list and the
memory are read at window boundaries only, and skipped at a boundary that comes sooner than
``REFRESH_COST_FACTOR`` times the last refresh's cost (overhead <= ~5%). A live descendant's
own CPU time is read from its kernel CPU clock (``clock_gettime`` on the pid's clock id,
~0.5 us, nanosecond precision) where Linux offers it, cheap enough for sampled phase
entries; psutil's tick-resolution ``cpu_times`` elsewhere.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any

REFRESH_COST_FACTOR = 20.0  # refresh when the last one cost <= 1/20 of the time since
_LINUX = sys.platform.startswith("linux")


def _cpu_clock(pid: int) -> int | None:
    """The clock id of process ``pid``'s CPU time (Linux's MAKE_PROCESS_CPUCLOCK), or None."""
    if not _LINUX:
        return None
    clk = ((~pid) << 3) | 2  # CPUCLOCK_SCHED, whole process (every thread)
    try:
        time.clock_gettime_ns(clk)
    except OSError:
        return None
    return clk


class _Member:
    """One descendant: its psutil handle, CPU clock, last CPU read and reaped-children CPU."""

    __slots__ = ("clock", "gone", "last_ns", "proc", "reaped_ns")

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.clock = _cpu_clock(proc.pid)
        self.last_ns = 0
        self.reaped_ns = 0
        self.gone = False  # reaped: its CPU time is now in its parent's children times

    def own_ns(self) -> int:
        """CPU time of the process's own threads (its last value once it is gone)."""
        if self.clock is not None:
            try:
                self.last_ns = time.clock_gettime_ns(self.clock)
            except OSError:  # a zombie still answers; only a reaped process does not
                self.gone = True
            return self.last_ns
        try:
            t = self.proc.cpu_times()
            self.last_ns = int((t.user + t.system) * 1e9)
        except Exception:  # psutil.Error: gone, or not ours to read
            self.gone = True
        return self.last_ns


@dataclass(frozen=True)
class MemorySample:
    """The tree's memory at one boundary, in bytes (uss/pss 0 where the OS does not tell)."""

    rss: int
    uss: int
    pss: int
    hwm: int  # the largest single-process high-water mark (VmHWM / ru_maxrss)
    hwm_since_start: bool  # every process's high-water mark was reset at the start
    processes: int


class ProcessTree:
    """This process and its descendants: CPU time, cores and memory of the workload."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._members: dict[int, _Member] = {}
        self._self: Any = None
        self._last_refresh = -1.0  # monotonic seconds
        self._refresh_cost = 0.0
        self._hwm_reset = False
        self.memory: MemorySample | None = None  # the last sample taken
        # CPU time the last refresh found that a reading with the older list missed: new
        # processes, and descendants reaped by descendants (see settle); a window's end
        # reading adds it
        self.late_ns = 0

    # ---- listing -----------------------------------------------------------------
    def _psutil(self) -> Any:
        import psutil

        if self._self is None:
            self._self = psutil.Process(self.pid)
        return psutil

    def start(self) -> None:
        """Begin a measurement: list the tree and reset each process's memory high-water
        mark (Linux clear_refs "5"), so the peak is this measurement's, not the process's."""
        self.refresh(force=True)
        # a process born later has a high-water mark since its birth, after the start
        self._hwm_reset = all([_reset_hwm(self.pid),
                               *(_reset_hwm(m.proc.pid) for m in self._members.values())])
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> bool:
        """Re-list the descendants and sample memory, unless the last refresh was too
        recent for its cost (see the module docstring). True when it refreshed."""
        now = time.monotonic()
        if not force and self._last_refresh >= 0 and \
                now - self._last_refresh < REFRESH_COST_FACTOR * self._refresh_cost:
            return False
        psutil = self._psutil()
        try:
            kids = self._self.children(recursive=True)
        except psutil.Error:
            kids = []
        seen: dict[int, _Member] = {}
        new: list[_Member] = []
        for p in kids:
            m = self._members.get(p.pid)
            if m is None or m.proc != p:  # new, or the pid was reused
                m = _Member(p)
                new.append(m)
            seen[p.pid] = m
        self._members = seen
        # processes born since the last listing: all their CPU time is since then
        self.late_ns = self.settle() + sum(m.own_ns() for m in new)
        self.memory = self._sample_memory(psutil)
        self._last_refresh = time.monotonic()
        self._refresh_cost = self._last_refresh - now
        return True

    def settle(self) -> int:
        """Re-read the listed descendants' children times (one psutil read each, no
        listing): returns the CPU time of descendants that a descendant reaped since the
        last read, which a reading before had not seen."""
        import psutil

        late = 0
        for m in self._members.values():
            try:
                t = m.proc.cpu_times()
            except psutil.Error:
                continue
            reaped = int((t.children_user + t.children_system) * 1e9)
            late += reaped - m.reaped_ns
            m.reaped_ns = reaped
        return late

    # ---- CPU ---------------------------------------------------------------------
    def cpu_ns(self) -> int:
        """CPU time of the whole tree: this process, its live descendants, and every
        descendant already reaped (counted in its parent's children times)."""
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = time.process_time_ns() + int((ru.ru_utime + ru.ru_stime) * 1e9)
        for m in self._members.values():
            own = m.own_ns()
            if not m.gone:
                total += own + m.reaped_ns
        return total

    def children_ns(self) -> int:
        """Own CPU time of the listed live descendants from their kernel CPU clocks (0 where
        there are none): cheap enough for sampled phase entries."""
        total = 0
        for m in self._members.values():
            if m.clock is not None:
                total += m.own_ns()
        return total

    @property
    def processes(self) -> int:
        return 1 + len(self._members)

    # ---- memory ------------------------------------------------------------------
    def _sample_memory(self, psutil: Any) -> MemorySample:
        rss = uss = pss = hwm = 0
        n = 0
        for proc in (self._self, *(m.proc for m in self._members.values())):
            try:
                info = proc.memory_full_info()
            except psutil.AccessDenied:
                try:
                    info = proc.memory_info()
                except psutil.Error:
                    continue
            except psutil.Error:
                continue
            n += 1
            rss += int(info.rss)
            uss += int(getattr(info, "uss", 0) or 0)
            pss += int(getattr(info, "pss", 0) or 0)
            hwm = max(hwm, _hwm(proc.pid))
        return MemorySample(rss, uss, pss, hwm, self._hwm_reset, max(n, 1))


def _reset_hwm(pid: int) -> bool:
    """Reset the peak RSS the kernel keeps for ``pid`` (Linux >= 4.0); False elsewhere."""
    if not _LINUX:
        return False
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _hwm(pid: int) -> int:
    """VmHWM of ``pid`` in bytes (0 where /proc does not tell)."""
    if not _LINUX:
        return 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class PeakMemory:
    """The running peak of one measurement's tree memory, from the samples it is shown.

    peak_rss is a lower bound of the tree's true peak: the largest of the sampled sums of
    resident memory and of any one process's high-water mark since the start (when the
    kernel's marks could be reset; else the sampled sums alone). uss/pss are the last
    sample's (steady state). docs/vector-envs.md says what the figures mean.
    """

    def __init__(self) -> None:
        self.peak_rss = 0
        self.last: MemorySample | None = None

    def add(self, s: MemorySample | None) -> None:
        if s is None:
            return
        self.last = s
        self.peak_rss = max(self.peak_rss, s.rss, s.hwm if s.hwm_since_start else 0)

    def summary(self) -> dict[str, int]:
        """JSON-ready bytes; empty when nothing was sampled."""
        s = self.last
        if s is None or self.peak_rss <= 0:
            return {}
        out = {"peak_rss": self.peak_rss, "rss": s.rss, "processes": s.processes}
        if s.uss:
            out["uss"] = s.uss
        if s.pss:
            out["pss"] = s.pss
        return out
