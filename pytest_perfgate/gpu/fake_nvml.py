"""A fake NVML: a module-like object with the pynvml functions gpu/nvml.py calls, over
devices whose readings are plain attributes a test changes between calls.

It answers as a real driver does where the first fakes did not: ``nvmlDeviceGetAttributes``
is documented for MIG devices only and raises NotSupported on a whole GPU (unless
``attributes="answer"``, as some drivers do, or ``"none"``); a MIG-enabled GPU has slices,
each with its own ``MIG-`` UUID, memory, SMs and processes, while the parent lists every
tenant's processes and the slices refuse clock and throttle queries; per-process
utilisation may be refused.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any


class NVMLError(Exception):
    """pynvml.NVMLError's stand-in."""


class NVMLError_NotSupported(NVMLError):
    """What a query the device does not support raises."""


class NVMLError_NotFound(NVMLError):
    """No such object (an empty MIG slot, no utilisation sample since the time asked)."""


def _unsupported() -> NVMLError:
    return NVMLError_NotSupported("Not Supported")


@dataclass
class FakeMig:
    """One MIG slice of a :class:`FakeDevice`."""

    profile: str = "1g.10gb"
    uuid: str = "MIG-1d5a0000-0000-4000-8000-000000000001"
    memory_total: int = 9984 * 2**20
    memory_used: int = 13 * 2**20
    sm_count: int = 16
    pids: list[int] = field(default_factory=list)
    parent: FakeDevice | None = None


@dataclass
class FakeDevice:
    """One GPU as NVML reports it; change the attributes to change the readings."""

    name: str = "NVIDIA GeForce RTX 5090"
    memory_total: int = 32607 * 2**20
    memory_used: int = 1200 * 2**20
    compute_capability: tuple[int, int] = (12, 0)
    sm_count: int | None = 170
    # nvmlDeviceGetAttributes on the whole GPU: "unsupported" (documented: MIG devices
    # only), "answer" (some drivers do), "none" (a binding that returns nothing)
    attributes: str = "unsupported"
    mig: tuple[int, int] | None = None  # None: not supported (consumer cards)
    slices: list[FakeMig] = field(default_factory=list)  # with mig (1, 1)
    persistence: int = 1
    power_limit_mw: int = 575000
    app_clocks: tuple[int, int] | None = (2407, 14001)  # SM, memory MHz
    sm_clock: int = 2407
    throttle: int = 0
    pids: list[int] = field(default_factory=list)
    # per-process utilisation samples (pid, SM %, timestamp in us); None: refused
    util: list[tuple[int, int, int]] | None = field(default_factory=list)
    minor: int = 0  # /dev/nvidia<minor>
    bus_id: str = "00000000:01:00.0"
    uuid: str = "GPU-8f2c1e9a-0000-4000-8000-123456789abc"
    serial: str = "1652223012345"


class FakeNvml(types.ModuleType):
    """A module-like pynvml over :class:`FakeDevice` objects (index order = NVML's)."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound

    def __init__(self, devices: list[FakeDevice] | None = None, driver: str = "575.51.03",
                 cuda_driver: int = 12090, fail_init: bool = False) -> None:
        super().__init__("pynvml")
        self.devices = list(devices if devices is not None else [FakeDevice()])
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.fail_init = fail_init
        self.calls: list[str] = []

    def _dev(self, h: Any) -> FakeDevice:
        assert isinstance(h, FakeDevice | FakeMig)
        if isinstance(h, FakeMig):
            raise _unsupported()  # a whole-GPU query asked of a slice
        return h

    def _slices(self, d: FakeDevice) -> list[FakeMig]:
        for s in d.slices:
            s.parent = d
        return d.slices if d.mig is not None and d.mig[0] else []

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeDevice:
        return self.devices[i]

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeDevice | FakeMig:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for d in self.devices:
            handles: list[FakeDevice | FakeMig] = [d, *self._slices(d)]
            for h in handles:
                if h.uuid == text:
                    return h
        raise NVMLError_NotFound("Not Found")

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        if self._dev(h).mig is None:
            raise _unsupported()
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, i: int) -> FakeMig:
        slices = self._slices(self._dev(h))
        if not 0 <= i < len(slices):
            raise NVMLError_NotFound("Not Found")
        return slices[i]

    def nvmlDeviceIsMigDeviceHandle(self, h: Any) -> bool:
        return isinstance(h, FakeMig)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: Any) -> FakeDevice:
        if not isinstance(h, FakeMig) or h.parent is None:
            raise NVMLError("Invalid Argument")
        return h.parent

    def nvmlDeviceGetName(self, h: Any) -> str:
        if isinstance(h, FakeMig):
            assert h.parent is not None
            return f"{h.parent.name} MIG {h.profile}"
        return self._dev(h).name

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        d = h if isinstance(h, FakeMig) else self._dev(h)
        return types.SimpleNamespace(total=d.memory_total, used=d.memory_used,
                                     free=d.memory_total - d.memory_used)

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        return self._dev(h).compute_capability

    def nvmlDeviceGetAttributes(self, h: Any) -> Any:
        if isinstance(h, FakeMig):
            return types.SimpleNamespace(multiprocessorCount=h.sm_count,
                                         memorySizeMB=h.memory_total // 2**20)
        d = self._dev(h)
        if d.attributes == "none":
            return None
        if d.attributes != "answer" or d.sm_count is None:
            raise _unsupported()
        return types.SimpleNamespace(multiprocessorCount=d.sm_count)

    def nvmlDeviceGetMigMode(self, h: Any) -> tuple[int, int]:
        mig = self._dev(h).mig
        if mig is None:
            raise _unsupported()
        return mig

    def nvmlDeviceGetPersistenceMode(self, h: Any) -> int:
        return self._dev(h).persistence

    def nvmlDeviceGetPowerManagementLimit(self, h: Any) -> int:
        return self._dev(h).power_limit_mw

    def nvmlDeviceGetApplicationsClock(self, h: Any, kind: int) -> int:
        clocks = self._dev(h).app_clocks
        if clocks is None:
            raise _unsupported()
        return clocks[0] if kind == 1 else clocks[1]

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        return self._dev(h).sm_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        self.calls.append("reasons")
        return self._dev(h).throttle

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        if isinstance(h, FakeMig):
            pids = list(h.pids)
        else:  # a MIG parent lists every tenant's processes
            d = self._dev(h)
            pids = d.pids + [p for s in self._slices(d) for p in s.pids]
        return [types.SimpleNamespace(pid=p, usedGpuMemory=None) for p in pids]

    def nvmlDeviceGetProcessUtilization(self, h: Any, since_us: int) -> list[Any]:
        samples = self._dev(h).util
        if samples is None:
            raise _unsupported()
        got = [types.SimpleNamespace(pid=p, smUtil=sm, memUtil=0, encUtil=0, decUtil=0,
                                     timeStamp=t) for p, sm, t in samples if t > since_us]
        if not got:
            raise NVMLError_NotFound("Not Found")
        return got

    def nvmlDeviceGetMinorNumber(self, h: Any) -> int:
        return self._dev(h).minor

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return types.SimpleNamespace(busId=self._dev(h).bus_id.encode())

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return h.uuid if isinstance(h, FakeMig) else self._dev(h).uuid

    def nvmlDeviceGetSerial(self, h: Any) -> str:
        self.calls.append("serial")
        return self._dev(h).serial

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver
