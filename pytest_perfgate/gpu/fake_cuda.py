"""A fake ``torch.cuda`` on a :class:`~pytest_perfgate.core.timing.FakeClock`: no GPU here.

Each device has a default stream and may have more (:meth:`FakeCuda.Stream`);
:meth:`FakeCuda.launch` queues GPU work on one stream and returns at once, as a kernel
launch does; an event completes when its stream reaches it, and reading the time between
two events before both completed raises as CUDA does. ``synchronize()`` waits for every
stream of one device (the current one unless named), as ``torch.cuda.synchronize`` does,
so work queued on another device is still running after it. A test thus sees what a host
timer around CUDA work sees, and what a timer that waits on the wrong device misses.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol


class FakeClock(Protocol):
    """core/timing.py's FakeClock, as the fake streams use it."""

    def wall_ns(self) -> int: ...

    def advance(self, wall_s: float, cpu_s: float | None = None) -> None: ...


@dataclass
class FakeStream:
    """One stream: when its queued work ends, and (``max_queued``) what is queued."""

    device: int
    free_ns: int = 0
    queued: list[int] = field(default_factory=list)


class FakeEvent:
    """``torch.cuda.Event(enable_timing=True)``."""

    def __init__(self, cuda: FakeCuda) -> None:
        self._cuda = cuda
        self.at_ns: int | None = None
        self.records = 0

    def record(self, stream: FakeStream | None = None) -> None:
        """Recorded on ``stream`` (default: the current device's current stream)."""
        self.records += 1
        self.at_ns = self._cuda.stream_end_ns(stream)

    def query(self) -> bool:
        return self.at_ns is not None and self.at_ns <= self._cuda.clock.wall_ns()

    def synchronize(self) -> None:
        """The host waits until the event completed."""
        if self.at_ns is not None:
            self._cuda.wait_until(self.at_ns)

    def elapsed_time(self, end: FakeEvent) -> float:
        """Milliseconds; raises as CUDA does (cudaErrorNotReady) before both completed."""
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        assert self.at_ns is not None and end.at_ns is not None
        return (end.at_ns - self.at_ns) / 1e6


@dataclass
class _Props:
    name: str = "Fake GPU"
    total_memory: int = 24 * 2**30
    major: int = 8
    minor: int = 9
    multi_processor_count: int = 128
    uuid: str = "00000000-0000-0000-0000-000000000000"


@dataclass
class _Memory:
    allocated: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0


def _reserved(n: int) -> int:
    return -(-n // 2**21) * 2**21  # the caching allocator's 2 MiB blocks


class FakeCuda:
    """The part of ``torch.cuda`` perfgate reads, on a fake clock, over ``devices`` GPUs."""

    def __init__(self, clock: FakeClock, initialized: bool = True,
                 max_queued: int | None = None, devices: int = 1) -> None:
        self.clock = clock
        self.initialized = initialized
        # launches a stream holds before a launch blocks the host, as CUDA's launch queue
        # does (None: never blocks)
        self.max_queued = max_queued
        self.current = 0
        self.streams = [[FakeStream(i)] for i in range(devices)]  # [0]: the default
        self._current_stream = [s[0] for s in self.streams]
        self.synchronizations = 0
        self.events_made = 0
        self.mem = [_Memory() for _ in range(devices)]
        self.device_props = [_Props(uuid=f"00000000-0000-0000-0000-{i:012d}")
                             for i in range(devices)]
        self.props = self.device_props[0]

    def is_initialized(self) -> bool:
        return self.initialized

    def device_count(self) -> int:
        return len(self.streams)

    def current_device(self) -> int:
        return self.current

    def set_device(self, index: int) -> None:
        self.current = index

    @contextmanager
    def device(self, index: int) -> Iterator[None]:
        prev, self.current = self.current, index
        try:
            yield
        finally:
            self.current = prev

    def _index(self, device: object) -> int:
        if device is None:
            return self.current
        return int(device if isinstance(device, int) else getattr(device, "index", 0) or 0)

    def Stream(self, device: object = None) -> FakeStream:
        s = FakeStream(self._index(device))
        self.streams[s.device].append(s)
        return s

    def current_stream(self, device: object = None) -> FakeStream:
        return self._current_stream[self._index(device)]

    @contextmanager
    def stream(self, s: FakeStream) -> Iterator[None]:
        prev = self._current_stream[s.device]
        self._current_stream[s.device] = s
        try:
            yield
        finally:
            self._current_stream[s.device] = prev

    def stream_end_ns(self, stream: FakeStream | None = None) -> int:
        s = stream if stream is not None else self.current_stream()
        return max(s.free_ns, self.clock.wall_ns())

    def wait_until(self, at_ns: int) -> None:
        wait = at_ns - self.clock.wall_ns()
        if wait > 0:
            self.clock.advance(wait / 1e9, 0.0)  # the host blocks, its CPU idle

    def launch(self, gpu_s: float, launch_s: float = 5e-6,
               stream: FakeStream | None = None) -> None:
        """Queue ``gpu_s`` of work on ``stream`` (default: the current one); the host pays
        only ``launch_s`` (and, with ``max_queued``, waits while the queue is full)."""
        s = stream if stream is not None else self.current_stream()
        self.clock.advance(launch_s)
        if self.max_queued is not None:
            now = self.clock.wall_ns()
            s.queued = [t for t in s.queued if t > now]
            if len(s.queued) >= self.max_queued:
                self.wait_until(s.queued[-self.max_queued])
                now = self.clock.wall_ns()
                s.queued = [t for t in s.queued if t > now]
        s.free_ns = self.stream_end_ns(s) + int(gpu_s * 1e9)
        if self.max_queued is not None:
            s.queued.append(s.free_ns)

    def synchronize(self, device: object = None) -> None:
        """Wait for every stream of one device: the current one unless named."""
        self.synchronizations += 1
        self.wait_until(max(s.free_ns for s in self.streams[self._index(device)]))

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        self.events_made += 1
        return FakeEvent(self)

    def alloc(self, nbytes: int, device: object = None) -> None:
        m = self.mem[self._index(device)]
        m.allocated += nbytes
        m.peak_allocated = max(m.peak_allocated, m.allocated)
        m.peak_reserved = max(m.peak_reserved, _reserved(m.allocated))

    def free(self, nbytes: int, device: object = None) -> None:
        self.mem[self._index(device)].allocated -= nbytes

    def max_memory_allocated(self, device: object = None) -> int:
        return self.mem[self._index(device)].peak_allocated

    def max_memory_reserved(self, device: object = None) -> int:
        return self.mem[self._index(device)].peak_reserved

    def reset_peak_memory_stats(self, device: object = None) -> None:
        m = self.mem[self._index(device)]
        m.peak_allocated = m.allocated
        m.peak_reserved = _reserved(m.allocated)

    def get_device_properties(self, index: object = None) -> _Props:
        return self.device_props[self._index(index)]


def fake_torch(cuda: FakeCuda) -> types.ModuleType:
    """A stand-in ``torch`` module for ``sys.modules`` carrying ``cuda``."""
    mod = types.ModuleType("torch")
    mod.cuda = cuda  # type: ignore[attr-defined]
    return mod
