"""Clocks and per-phase timers: every time reading in the harness goes through here.

Tests inject :class:`FakeClock` (advances only when told), so timing logic is exact and
instant; production uses :data:`SYSTEM_CLOCK` (perf_counter_ns ~0.1 us, process_time_ns
~0.3 us on the reference machine).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_perfgate.core.names import is_safe_name, safe_name


class _Children(Protocol):
    def children_ns(self) -> int: ...


class Clock(Protocol):
    """Wall and process-CPU time in nanoseconds."""

    def wall_ns(self) -> int: ...

    def cpu_ns(self) -> int: ...


class SystemClock:
    """The real clocks: monotonic wall time and this process's CPU time (all threads)."""

    wall_ns = staticmethod(time.perf_counter_ns)
    cpu_ns = staticmethod(time.process_time_ns)


SYSTEM_CLOCK: Clock = SystemClock()


class FakeClock:
    """A clock that moves only when told: ``advance(wall_s, cpu_s)``."""

    def __init__(self, wall_s: float = 0.0, cpu_s: float = 0.0) -> None:
        self._wall = int(wall_s * 1e9)
        self._cpu = int(cpu_s * 1e9)

    def wall_ns(self) -> int:
        return self._wall

    def cpu_ns(self) -> int:
        return self._cpu

    def advance(self, wall_s: float, cpu_s: float | None = None) -> None:
        """Move wall time by ``wall_s`` and CPU time by ``cpu_s`` (default: one core busy)."""
        self._wall += int(wall_s * 1e9)
        self._cpu += int((wall_s if cpu_s is None else cpu_s) * 1e9)


@dataclass(frozen=True)
class PhaseStats:
    """Accumulated time of one named phase over a window; ``gpu_ns`` is its GPU time from
    CUDA events (None where the process did not use CUDA, gpu/cuda.py)."""

    calls: int
    wall_ns: int
    cpu_ns: int
    gpu_ns: int | None = None

    @property
    def ms_per_call(self) -> float:
        return self.wall_ns / 1e6 / self.calls if self.calls else 0.0

    @property
    def gpu_ms_per_call(self) -> float | None:
        if self.gpu_ns is None:
            return None
        return self.gpu_ns / 1e6 / self.calls if self.calls else 0.0

    @property
    def cores(self) -> float:
        """Cores actually used: process CPU time / wall time while in the phase."""
        return self.cpu_ns / self.wall_ns if self.wall_ns else 0.0

    def __add__(self, other: PhaseStats) -> PhaseStats:
        gpu = (None if self.gpu_ns is None and other.gpu_ns is None
               else (self.gpu_ns or 0) + (other.gpu_ns or 0))
        return PhaseStats(self.calls + other.calls, self.wall_ns + other.wall_ns,
                          self.cpu_ns + other.cpu_ns, gpu)


_CHECKED: set[str] = set()  # phase names that passed check_phase_name


def check_phase_name(name: object) -> str:
    """Return ``name`` if it may name a phase, else raise ValueError naming it and the fix.

    A phase becomes the asv series ``<benchmark>.phase.<name>_ms`` and asv publish turns
    series into file names, so phases follow the one name rule of core/names.py. Checked
    when the phase is first entered, not when the run is written after measuring.
    """
    if isinstance(name, str) and name in _CHECKED:
        return name
    if not is_safe_name(name):
        safe_name(name, "phase name (it becomes the asv series <benchmark>.phase.<name>_ms)",
                  "phase(\"physics\") or phase(\"policy.forward\")", shown=f"phase({name!r})")
    assert isinstance(name, str)
    _CHECKED.add(name)
    return name


CPU_SAMPLE_EVERY = 4  # read the process CPU clock (~0.3-0.4 us) on every 4th entry only


class _Phase:
    """Reusable context manager for one phase; a class, not @contextmanager, to stay ~1 us.

    Wall time is read on every entry; process CPU time on every CPU_SAMPLE_EVERY-th, and
    cores used is estimated from those sampled entries (CPU clock reads cost 3-4x a wall one).
    """

    __slots__ = ("_c0", "_cpu", "_w0", "_wall", "calls", "s_cpu_ns", "s_wall_ns", "wall_ns")

    def __init__(self, wall: Callable[[], int], cpu: Callable[[], int]) -> None:
        self._wall = wall
        self._cpu = cpu
        self.calls = 0
        self.wall_ns = 0
        self.s_wall_ns = 0  # wall time of the CPU-sampled entries
        self.s_cpu_ns = 0  # CPU time of the CPU-sampled entries
        self._w0 = 0
        self._c0 = -1

    def __enter__(self) -> None:
        if self.calls % CPU_SAMPLE_EVERY == 0:
            self._c0 = self._cpu()
        self._w0 = self._wall()

    def __exit__(self, *exc: object) -> None:
        dt = self._wall() - self._w0
        self.wall_ns += dt
        self.calls += 1
        if self._c0 >= 0:
            self.s_cpu_ns += self._cpu() - self._c0
            self.s_wall_ns += dt
            self._c0 = -1

    def stats(self) -> PhaseStats:
        cores = self.s_cpu_ns / self.s_wall_ns if self.s_wall_ns else 0.0
        return PhaseStats(self.calls, self.wall_ns, int(self.wall_ns * cores))

    def reset(self) -> None:
        self.calls = self.wall_ns = self.s_wall_ns = self.s_cpu_ns = 0


class DeviceTimer(Protocol):
    """An accelerator's clock as the phases use it (gpu/cuda.py ``CudaTimer``): an event
    recorded on the device's queue, a wait for the queue to drain, the time between two
    completed events, events handed back for reuse. ``sync_phases``: also drain at every
    phase exit (diagnosis)."""

    sync_phases: bool

    def record(self) -> object: ...

    def synchronize(self) -> None: ...

    def elapsed_ns(self, start: Any, end: Any) -> int: ...

    def release(self, events: list[tuple[Any, Any]]) -> None: ...


class _DevicePhase(_Phase):
    """A phase that also records a device event pair per entry; the pairs are read by
    :meth:`stats` after the window's closing synchronise, never inside the window."""

    __slots__ = ("_dev", "_ev0", "pairs")

    def __init__(self, wall: Callable[[], int], cpu: Callable[[], int], dev: DeviceTimer
                 ) -> None:
        super().__init__(wall, cpu)
        self._dev = dev
        self._ev0: object = None
        self.pairs: list[tuple[object, object]] = []

    def __enter__(self) -> None:
        _Phase.__enter__(self)
        self._ev0 = self._dev.record()

    def __exit__(self, *exc: object) -> None:
        self.pairs.append((self._ev0, self._dev.record()))
        if self._dev.sync_phases:
            self._dev.synchronize()
        _Phase.__exit__(self, *exc)

    def stats(self) -> PhaseStats:
        st = _Phase.stats(self)
        gpu = sum(self._dev.elapsed_ns(a, b) for a, b in self.pairs)
        return PhaseStats(st.calls, st.wall_ns, st.cpu_ns, gpu)

    def reset(self) -> None:
        _Phase.reset(self)
        self._dev.release(self.pairs)
        self.pairs.clear()


class PhaseRecorder:
    """Attributes time inside a step to named phases: ``with rec.phase("physics"): ...``.

    Phases may nest (the inner time then counts in both). A phase object is reused across
    calls, so one recorder serves the one thread that runs the step.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._cpu: Callable[[], int] = clock.cpu_ns
        self._phases: dict[str, _Phase] = {}
        self.device: DeviceTimer | None = None

    def use_device(self, dev: DeviceTimer) -> None:
        """Time every phase on ``dev`` too, from now on. Call between windows (after the
        device was synchronised), never inside a phase."""
        self.device = dev
        for name, ph in list(self._phases.items()):
            self._phases[name] = _DevicePhase(self._clock.wall_ns, ph._cpu, dev)

    def count_children(self, tree: _Children) -> None:
        """Count the live descendants' CPU time in each phase too (read on the sampled
        entries from their kernel CPU clocks, core/tree.py), so a phase whose work runs in
        worker processes shows the cores it really used."""
        own = self._clock.cpu_ns
        children = tree.children_ns

        def cpu() -> int:
            return own() + children()

        self._cpu = cpu
        for ph in self._phases.values():
            ph._cpu = cpu

    def phase(self, name: str) -> _Phase:
        try:  # the hot path: one dict lookup (try is free); names are checked on a miss
            ph = self._phases.get(name)
        except TypeError:  # unhashable, so not a name: check_phase_name says so
            ph = None
        if ph is None:
            ph = self._phases[check_phase_name(name)] = (
                _Phase(self._clock.wall_ns, self._cpu) if self.device is None
                else _DevicePhase(self._clock.wall_ns, self._cpu, self.device))
        return ph

    def take(self) -> dict[str, PhaseStats]:
        """Return the phases accumulated since the last take() and start afresh."""
        out = {n: p.stats() for n, p in self._phases.items() if p.calls}
        for p in self._phases.values():
            p.reset()
        return out


class _NullPhase:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL_PHASE = _NullPhase()
_active = threading.local()


def phase(name: str) -> _Phase | _NullPhase:
    """Time a named phase on the recorder active in this thread (a no-op when none is).

    Library code (a pool, a worker loop) calls this without being handed the fixture.
    """
    rec: PhaseRecorder | None = getattr(_active, "recorder", None)
    if rec is not None:
        return rec.phase(name)
    check_phase_name(name)  # a bad name fails here too, not first inside a measurement
    return _NULL_PHASE


class activate:
    """Make ``recorder`` the one :func:`phase` reports to in this thread, for a ``with`` block."""

    def __init__(self, recorder: PhaseRecorder) -> None:
        self._rec = recorder
        self._prev: PhaseRecorder | None = None

    def __enter__(self) -> PhaseRecorder:
        self._prev = getattr(_active, "recorder", None)
        _active.recorder = self._rec
        return self._rec

    def __exit__(self, *exc: object) -> None:
        _active.recorder = self._prev
