"""NVML through nvidia-ml-py (import name ``pynvml``), read lazily and never fatal.

Every reading degrades to None: a driver that does not support a query (MIG mode on a
consumer card, clocks on a virtual GPU) must never fail a run. Tests inject a fake module
with the same functions (gpu/fakes.py) in ``sys.modules["pynvml"]`` or as ``lib=``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NVML_CLOCK_SM = 1  # pynvml's NVML_CLOCK_SM / NVML_CLOCK_MEM
NVML_CLOCK_MEM = 2


@dataclass(frozen=True)
class DeviceState:
    """What one device was doing at one instant (the guard reads one per window edge)."""

    throttle: int | None  # clock event reasons bitmask (gpu/guard.py names the bits)
    sm_clock_mhz: int | None
    pids: tuple[int, ...] | None  # processes with a compute context
    memory_used: int | None  # bytes, the whole device


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class Nvml:
    """One initialised NVML over ``lib`` (the pynvml module, or a fake)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        lib.nvmlInit()

    @classmethod
    def open(cls, lib: Any = None) -> Nvml | None:
        """NVML when nvidia-ml-py is installed and a driver answers, else None."""
        if lib is None:
            try:
                lib = importlib.import_module("pynvml")
            except ImportError:
                return None
        try:
            return cls(lib)
        except Exception:  # no driver, no device, a container without the library
            return None

    def _call(self, name: str, *args: Any) -> Any:
        fn: Callable[..., Any] | None = getattr(self.lib, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:
            return None

    def count(self) -> int:
        return int(self._call("nvmlDeviceGetCount") or 0)

    def handle(self, index: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def index_of_uuid(self, uuid: str) -> int | None:
        """NVML's index of the device with ``uuid`` (used to find the device CUDA calls
        current; the UUID itself is never recorded)."""
        for i in range(self.count()):
            got = self._call("nvmlDeviceGetUUID", self.handle(i))
            if got is not None and _text(got).removeprefix("GPU-") == uuid.removeprefix("GPU-"):
                return i
        return None

    def bus_id(self, index: int) -> str | None:
        """The PCI address as sysfs names it, "0000:01:00.0" (NVML pads the domain to 8)."""
        info = self._call("nvmlDeviceGetPciInfo", self.handle(index))
        raw = getattr(info, "busId", None) if info is not None else None
        if raw is None:
            return None
        text = _text(raw).strip().lower()
        return text[-12:] if len(text) >= 12 else None

    def info(self, index: int) -> dict[str, Any]:
        """The device's identity and settings, no serial number and no UUID."""
        h = self.handle(index)
        mem = self._call("nvmlDeviceGetMemoryInfo", h)
        cc = self._call("nvmlDeviceGetCudaComputeCapability", h)
        attrs = self._call("nvmlDeviceGetAttributes", h)
        mig = self._call("nvmlDeviceGetMigMode", h)
        persistence = self._call("nvmlDeviceGetPersistenceMode", h)
        power = self._call("nvmlDeviceGetPowerManagementLimit", h)
        app_sm = self._call("nvmlDeviceGetApplicationsClock", h, NVML_CLOCK_SM)
        app_mem = self._call("nvmlDeviceGetApplicationsClock", h, NVML_CLOCK_MEM)
        name = self._call("nvmlDeviceGetName", h)
        return {
            "name": _text(name) if name is not None else None,
            "memory_total": int(mem.total) if mem is not None else None,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "sm_count": getattr(attrs, "multiprocessorCount", None),
            "mig": ("enabled" if mig[0] else "disabled") if mig else None,
            "persistence": ("enabled" if persistence else "disabled")
            if persistence is not None else None,
            "power_limit_w": round(power / 1000, 1) if power is not None else None,
            "app_clock_sm_mhz": app_sm,
            "app_clock_mem_mhz": app_mem,
        }

    def driver(self) -> str | None:
        v = self._call("nvmlSystemGetDriverVersion")
        return _text(v) if v is not None else None

    def cuda_driver(self) -> str | None:
        """The CUDA version the driver supports, "12.8" (NVML gives 12080)."""
        v = self._call("nvmlSystemGetCudaDriverVersion")
        return f"{int(v) // 1000}.{int(v) % 1000 // 10}" if v else None

    def state(self, index: int) -> DeviceState:
        h = self.handle(index)
        reasons = self._call("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:  # its name before driver 535
            reasons = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        procs = self._call("nvmlDeviceGetComputeRunningProcesses", h)
        mem = self._call("nvmlDeviceGetMemoryInfo", h)
        clock = self._call("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM)
        return DeviceState(
            throttle=int(reasons) if reasons is not None else None,
            sm_clock_mhz=int(clock) if clock is not None else None,
            pids=tuple(int(p.pid) for p in procs) if procs is not None else None,
            memory_used=int(mem.used) if mem is not None else None)


_SHARED: list[Nvml | None] = []


def shared() -> Nvml | None:
    """This process's NVML, opened on first use (None where there is none)."""
    if not _SHARED:
        _SHARED.append(Nvml.open())
    return _SHARED[0]


def forget() -> None:
    """Open NVML afresh on the next :func:`shared` (tests swap the module)."""
    _SHARED.clear()
