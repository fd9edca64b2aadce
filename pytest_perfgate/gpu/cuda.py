"""CUDA-correct windows and phases for a process that initialised CUDA through torch.

CUDA work is queued: a timer around ``loss.backward()`` measures the launches, and the
kernels' time lands at whichever later call blocks (docs/gpu.md). So, once the measured
process has initialised CUDA, every window edge synchronises the device (the window holds
exactly its own work) and each phase records a CUDA event pair on the current stream at
its entry and exit; the pairs are read after the closing synchronise, so timing never
blocks inside a window and the workload's own CPU/GPU overlap is kept.

``PERFGATE_CUDA_SYNC=phases`` also synchronises at every phase exit, for diagnosis: each
phase's CPU wall then holds its GPU work, but the overlap between phases is gone, so the
step is slower than the workload really is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, Protocol

SYNC_ENV = "PERFGATE_CUDA_SYNC"
SYNC_MODES = ("edges", "phases")


class CudaEvent(Protocol):
    """The part of ``torch.cuda.Event`` used here."""

    def record(self, stream: Any = None) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


def active_cuda(modules: Mapping[str, Any] | None = None) -> Any | None:
    """``torch.cuda`` when the process imported torch and initialised CUDA, else None.

    Never imports torch: a process that did not is CPU-only by definition here."""
    torch = (sys.modules if modules is None else modules).get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None:
        return None
    try:
        return cuda if cuda.is_initialized() else None
    except Exception:  # a torch build without CUDA may raise instead of answering False
        return None


def sync_mode(env: Mapping[str, str] | None = None) -> str:
    """The synchronising mode asked for by ``PERFGATE_CUDA_SYNC``; ValueError names a bad
    value and the fix."""
    raw = (os.environ if env is None else env).get(SYNC_ENV, "").strip().lower() or "edges"
    if raw not in SYNC_MODES:
        raise ValueError(f"{SYNC_ENV}={raw!r}: use 'edges' (default: the device is "
                         "synchronised at window edges only) or 'phases' (also at every "
                         "phase exit, for diagnosis; it removes the CPU/GPU overlap)")
    return raw


class CudaTimer:
    """Window edges and per-phase event pairs on one ``torch.cuda`` surface.

    Implements core/timing.py's DeviceTimer. Events are pooled: a window's pairs are
    read once the closing synchronise has completed them, then reused, so a phase costs
    two ``Event.record`` calls and no allocation in steady state. ``device``: the CUDA
    device the work runs on, where it is not the current one (a learner given
    ``cuda:1``): events are recorded on its stream and the edges wait for it.
    """

    def __init__(self, cuda: Any, sync_phases: bool = False, device: int | None = None
                 ) -> None:
        self._cuda = cuda
        self.sync_phases = sync_phases
        self.device = device
        self._free: list[CudaEvent] = []

    @property
    def mode(self) -> str:
        return "phases" if self.sync_phases else "edges"

    def record(self) -> CudaEvent:
        """An event recorded now on the current stream (of ``device``, where named)."""
        ev: CudaEvent = self._free.pop() if self._free else self._cuda.Event(
            enable_timing=True)
        if self.device is None:
            ev.record()
        else:
            ev.record(self._cuda.current_stream(self.device))
        return ev

    def synchronize(self) -> None:
        """Wait for every stream of the device."""
        self._cuda.synchronize(self.device)

    def elapsed_ns(self, start: CudaEvent, end: CudaEvent) -> int:
        """GPU time between two events, once both completed: a pair recorded on another
        stream or device than the one the edges waited for may still be pending, and
        CUDA refuses to read it then (cudaErrorNotReady)."""
        start.synchronize()
        end.synchronize()
        return int(start.elapsed_time(end) * 1e6)

    def release(self, events: list[tuple[CudaEvent, CudaEvent]]) -> None:
        """Events read (or no longer wanted) go back to the pool."""
        for a, b in events:
            self._free.append(a)
            self._free.append(b)

    def memory(self) -> dict[str, int]:
        """Peak allocated and reserved bytes since the last :meth:`reset_peak` (torch's
        caching allocator, on ``device`` or the current one)."""
        out: dict[str, int] = {}
        for key, fn in (("gpu_peak_allocated", "max_memory_allocated"),
                        ("gpu_peak_reserved", "max_memory_reserved")):
            try:
                out[key] = int(getattr(self._cuda, fn)(self.device))
            except Exception:
                continue
        return out

    def describe(self) -> dict[str, Any]:
        """What a window timed by this says about it: the mode, and the device by CUDA's
        numbering (a process that only receives the window watches that one)."""
        out: dict[str, Any] = {"sync": self.mode}
        try:
            out["device"] = (self.device if self.device is not None
                             else int(self._cuda.current_device()))
        except Exception:
            pass
        return out

    def reset_peak(self) -> None:
        try:
            self._cuda.reset_peak_memory_stats(self.device)
        except Exception:
            pass

    def take_peak(self) -> dict[str, int]:
        """The peaks since the last call (:meth:`memory`), and a fresh start for the next."""
        out = self.memory()
        self.reset_peak()
        return out


class Sink(Protocol):
    """Where :class:`PendingPhases` reports: ring/sides.py's SideRecorder ``add_gpu``."""

    def add_gpu(self, name: str, gpu_ns: int) -> None: ...


class PendingPhases:
    """GPU time of phases in a process whose windows nobody synchronises (a ring pair's
    learner runs free between snapshots): each phase's event pair waits until the device
    has passed it (``Event.query``, never blocking), then its GPU time is reported to
    ``sink`` as the GPU time of the phase ``name``, beside its CPU wall."""

    def __init__(self, timer: CudaTimer, sink: Sink) -> None:
        self.timer = timer
        self.sink = sink
        self._pending: list[tuple[str, CudaEvent, CudaEvent]] = []

    def start(self) -> CudaEvent:
        return self.timer.record()

    def end(self, name: str, start: CudaEvent) -> None:
        self._pending.append((name, start, self.timer.record()))

    def flush(self) -> int:
        """Report the pairs the device has completed, oldest first; how many."""
        done = 0
        for name, a, b in self._pending:
            if not (a.query() and b.query()):
                break  # later pairs on its stream are not done either
            self.sink.add_gpu(name, self.timer.elapsed_ns(a, b))
            self.timer.release([(a, b)])
            done += 1
        del self._pending[:done]
        return done


DISAGREE = 2.0  # a phase whose CPU wall and GPU time differ by this factor shows both
NOTICED_MS = 0.01  # below this per call, neither figure is worth a line


def phase_note(name: str, wall_ms: float, gpu_ms: float | None) -> str | None:
    """A line for a phase whose CPU wall and GPU time disagree a lot, else None."""
    if gpu_ms is None:
        return None
    hi, lo = max(wall_ms, gpu_ms), min(wall_ms, gpu_ms)
    if hi < NOTICED_MS or hi < DISAGREE * lo:
        return None
    why = ("its kernels run after the CPU has moved on: the GPU time is what it costs"
           if gpu_ms > wall_ms else "the CPU works or waits longer than the GPU does")
    return f"phase {name}: CPU wall {wall_ms:.3g} ms, GPU {gpu_ms:.3g} ms per call ({why})"


EVENTS_ONLY = "events"  # the mode of a ring learner's windows: events, no synchronise


def sync_note(mode: object) -> str:
    """How the GPU work was timed, in words."""
    if mode == EVENTS_ONLY:
        return ("CUDA timed by events only: the learner runs free between the windows' "
                "snapshots, nothing synchronises it, and a phase's GPU time counts in the "
                "window in which the device finished it")
    if mode == "phases":
        return ("CUDA synchronised at every phase exit (PERFGATE_CUDA_SYNC=phases, for "
                "diagnosis): each phase's CPU wall holds its GPU work, but the overlap of CPU "
                "and GPU is gone, so the rate is lower than the workload's own")
    return ("CUDA timed: window edges synchronise the device, phases carry GPU time from "
            "CUDA events")


def timer_if_active(modules: Mapping[str, Any] | None = None,
                    env: Mapping[str, str] | None = None) -> CudaTimer | None:
    """A :class:`CudaTimer` when CUDA is initialised in this process, else None."""
    cuda = active_cuda(modules)
    if cuda is None:
        return None
    return CudaTimer(cuda, sync_phases=sync_mode(env) == "phases")
