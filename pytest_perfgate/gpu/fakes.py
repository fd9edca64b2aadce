"""A fake ``torch.cuda`` and a fake NVML, for the tests and the docs' examples: no GPU here.

:class:`FakeCuda` keeps one stream on a :class:`~pytest_perfgate.core.timing.FakeClock`'s
time line: :meth:`FakeCuda.launch` queues GPU work and returns at once, as a kernel launch
does; an event completes when the stream reaches it; ``synchronize`` moves the clock to
the moment the stream drains. So a test sees exactly what a host timer around CUDA work
sees: the launch, with the work charged to the next blocking call.

:class:`FakeNvml` is a module-like object with the pynvml functions gpu/nvml.py calls;
each device's readings are plain attributes a test changes between calls.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Protocol


class FakeClock(Protocol):
    """core/timing.py's FakeClock, as the fake stream uses it."""

    def wall_ns(self) -> int: ...

    def advance(self, wall_s: float, cpu_s: float | None = None) -> None: ...


class FakeEvent:
    """``torch.cuda.Event(enable_timing=True)`` on :class:`FakeCuda`'s stream."""

    def __init__(self, cuda: FakeCuda) -> None:
        self._cuda = cuda
        self.at_ns: int | None = None
        self.records = 0

    def record(self) -> None:
        self.records += 1
        self.at_ns = self._cuda.stream_end_ns()

    def query(self) -> bool:
        return self.at_ns is not None and self.at_ns <= self._cuda.clock.wall_ns()

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


class FakeCuda:
    """The part of ``torch.cuda`` perfgate reads, on a fake clock."""

    def __init__(self, clock: FakeClock, initialized: bool = True,
                 max_queued: int | None = None) -> None:
        self.clock = clock
        self.initialized = initialized
        # launches the stream holds before a launch blocks the host, as CUDA's launch queue
        # does (None: never blocks)
        self.max_queued = max_queued
        self._queued: list[int] = []  # when each queued launch finishes (max_queued only)
        self._stream_free_ns = 0
        self.synchronizations = 0
        self.events_made = 0
        self.allocated = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.props = _Props()

    def is_initialized(self) -> bool:
        return self.initialized

    def stream_end_ns(self) -> int:
        return max(self._stream_free_ns, self.clock.wall_ns())

    def launch(self, gpu_s: float, launch_s: float = 5e-6) -> None:
        """Queue ``gpu_s`` of work on the stream; the host pays only ``launch_s`` (and, with
        ``max_queued``, waits while the queue is full)."""
        self.clock.advance(launch_s)
        if self.max_queued is not None:
            now = self.clock.wall_ns()
            self._queued = [t for t in self._queued if t > now]
            if len(self._queued) >= self.max_queued:
                wait = self._queued[-self.max_queued] - now
                self.clock.advance(wait / 1e9, 0.0)  # the host blocks, its CPU idle
                now = self.clock.wall_ns()
                self._queued = [t for t in self._queued if t > now]
        self._stream_free_ns = self.stream_end_ns() + int(gpu_s * 1e9)
        if self.max_queued is not None:
            self._queued.append(self._stream_free_ns)

    def alloc(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, -(-self.allocated // 2**21) * 2**21)

    def free(self, nbytes: int) -> None:
        self.allocated -= nbytes

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        self.events_made += 1
        return FakeEvent(self)

    def synchronize(self) -> None:
        self.synchronizations += 1
        wait = self._stream_free_ns - self.clock.wall_ns()
        if wait > 0:
            self.clock.advance(wait / 1e9, 0.0)  # the host blocks, its CPU idle

    def max_memory_allocated(self) -> int:
        return self.peak_allocated

    def max_memory_reserved(self) -> int:
        return self.peak_reserved

    def reset_peak_memory_stats(self) -> None:
        self.peak_allocated = self.allocated
        self.peak_reserved = -(-self.allocated // 2**21) * 2**21

    def current_device(self) -> int:
        return 0

    def get_device_properties(self, index: int) -> _Props:
        return self.props


def fake_torch(cuda: FakeCuda) -> types.ModuleType:
    """A stand-in ``torch`` module for ``sys.modules`` carrying ``cuda``."""
    mod = types.ModuleType("torch")
    mod.cuda = cuda  # type: ignore[attr-defined]
    return mod


@dataclass
class FakeDevice:
    """One GPU as NVML reports it; change the attributes to change the readings."""

    name: str = "NVIDIA GeForce RTX 5090"
    memory_total: int = 32607 * 2**20
    memory_used: int = 1200 * 2**20
    compute_capability: tuple[int, int] = (12, 0)
    sm_count: int | None = 170
    mig: tuple[int, int] | None = None  # None: not supported (consumer cards)
    persistence: int = 1
    power_limit_mw: int = 575000
    app_clocks: tuple[int, int] | None = (2407, 14001)  # SM, memory MHz
    sm_clock: int = 2407
    throttle: int = 0
    pids: list[int] = field(default_factory=list)
    bus_id: str = "00000000:01:00.0"
    uuid: str = "GPU-8f2c1e9a-0000-4000-8000-123456789abc"
    serial: str = "1652223012345"


class NVMLError(Exception):
    """pynvml.NVMLError's stand-in: what an unsupported query raises."""


class FakeNvml(types.ModuleType):
    """A module-like pynvml over :class:`FakeDevice` objects (index order = NVML's)."""

    def __init__(self, devices: list[FakeDevice] | None = None, driver: str = "575.51.03",
                 cuda_driver: int = 12090, fail_init: bool = False) -> None:
        super().__init__("pynvml")
        self.devices = list(devices if devices is not None else [FakeDevice()])
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.fail_init = fail_init
        self.calls: list[str] = []

    def _dev(self, h: Any) -> FakeDevice:
        assert isinstance(h, FakeDevice)
        return h

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeDevice:
        return self.devices[i]

    def nvmlDeviceGetName(self, h: Any) -> str:
        return self._dev(h).name

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        d = self._dev(h)
        return types.SimpleNamespace(total=d.memory_total, used=d.memory_used,
                                     free=d.memory_total - d.memory_used)

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        return self._dev(h).compute_capability

    def nvmlDeviceGetAttributes(self, h: Any) -> Any:
        n = self._dev(h).sm_count
        if n is None:
            raise NVMLError("Not Supported")
        return types.SimpleNamespace(multiprocessorCount=n)

    def nvmlDeviceGetMigMode(self, h: Any) -> tuple[int, int]:
        mig = self._dev(h).mig
        if mig is None:
            raise NVMLError("Not Supported")
        return mig

    def nvmlDeviceGetPersistenceMode(self, h: Any) -> int:
        return self._dev(h).persistence

    def nvmlDeviceGetPowerManagementLimit(self, h: Any) -> int:
        return self._dev(h).power_limit_mw

    def nvmlDeviceGetApplicationsClock(self, h: Any, kind: int) -> int:
        clocks = self._dev(h).app_clocks
        if clocks is None:
            raise NVMLError("Not Supported")
        return clocks[0] if kind == 1 else clocks[1]

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        return self._dev(h).sm_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        self.calls.append("reasons")
        return self._dev(h).throttle

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        return [types.SimpleNamespace(pid=p, usedGpuMemory=None) for p in self._dev(h).pids]

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return types.SimpleNamespace(busId=self._dev(h).bus_id.encode())

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return self._dev(h).uuid

    def nvmlDeviceGetSerial(self, h: Any) -> str:
        self.calls.append("serial")
        return self._dev(h).serial

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver
