"""NVML through nvidia-ml-py (import name ``pynvml``), read lazily and never fatal.

Every reading degrades to None: a driver that does not support a query (MIG mode on a
consumer card, the SM count of a whole GPU, clocks of a MIG slice) must never fail a run.
A device is a :class:`Target`: a whole GPU, or a MIG slice of one, whose identity, memory
and processes are the slice's own while its clocks and settings are the parent GPU's.
Tests inject a fake module with the same functions (gpu/fakes.py) in
``sys.modules["pynvml"]`` or as ``lib=``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NVML_CLOCK_SM = 1  # pynvml's NVML_CLOCK_SM / NVML_CLOCK_MEM
NVML_CLOCK_MEM = 2


@dataclass(frozen=True)
class Target:
    """A device CUDA may run on: GPU ``index`` (NVML's numbering) or, with ``mig``, the
    MIG slice in that slot of it."""

    index: int
    mig: int | None = None

    @property
    def label(self) -> str:
        return f"GPU {self.index}" if self.mig is None else f"GPU {self.index} MIG {self.mig}"


def as_target(device: int | Target) -> Target:
    return device if isinstance(device, Target) else Target(int(device))


@dataclass(frozen=True)
class DeviceState:
    """What one device was doing at one instant (the guard reads one per window edge)."""

    throttle: int | None  # clock event reasons bitmask (gpu/guard.py names the bits)
    sm_clock_mhz: int | None
    pids: tuple[int, ...] | None  # processes with a compute context (a slice's own)
    memory_used: int | None  # bytes, the whole device (or slice)


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

    def handles(self, device: int | Target) -> tuple[Any, Any]:
        """(the device's own handle, its GPU's): the same for a whole GPU."""
        t = as_target(device)
        parent = self.handle(t.index)
        if t.mig is None or parent is None:
            return parent, parent
        return self._call("nvmlDeviceGetMigDeviceHandleByIndex", parent, t.mig), parent

    def slices(self, index: int) -> list[int]:
        """The MIG slots of GPU ``index`` that hold a slice this process can see (none
        where MIG is off or unsupported)."""
        h = self.handle(index)
        mode = self._call("nvmlDeviceGetMigMode", h)
        if not mode or not mode[0]:
            return []
        slots = int(self._call("nvmlDeviceGetMaxMigDeviceCount", h) or 0)
        return [j for j in range(slots)
                if self._call("nvmlDeviceGetMigDeviceHandleByIndex", h, j) is not None]

    def uuid(self, device: int | Target) -> str | None:
        """The device's UUID, "GPU-..." or "MIG-..." (to find a device; never recorded)."""
        got = self._call("nvmlDeviceGetUUID", self.handles(device)[0])
        return _text(got) if got is not None else None

    def minor(self, device: int | Target) -> int | None:
        """N of the GPU's /dev/nvidiaN, which every process using it holds open."""
        got = self._call("nvmlDeviceGetMinorNumber", self.handles(device)[1])
        return int(got) if got is not None else None

    def bus_id(self, index: int) -> str | None:
        """The PCI address as sysfs names it, "0000:01:00.0" (NVML pads the domain to 8)."""
        info = self._call("nvmlDeviceGetPciInfo", self.handle(index))
        raw = getattr(info, "busId", None) if info is not None else None
        if raw is None:
            return None
        text = _text(raw).strip().lower()
        return text[-12:] if len(text) >= 12 else None

    def info(self, device: int | Target) -> dict[str, Any]:
        """The device's identity and settings, no serial number and no UUID: a slice's
        name (its profile in it), memory and SMs, its GPU's compute capability and
        settings. ``nvmlDeviceGetAttributes`` is documented for MIG devices only: a whole
        GPU's SM count is None where the driver refuses it."""
        own, h = self.handles(device)
        mem = self._call("nvmlDeviceGetMemoryInfo", own)
        cc = self._call("nvmlDeviceGetCudaComputeCapability", h)
        attrs = self._call("nvmlDeviceGetAttributes", own)
        mig = self._call("nvmlDeviceGetMigMode", h)
        persistence = self._call("nvmlDeviceGetPersistenceMode", h)
        power = self._call("nvmlDeviceGetPowerManagementLimit", h)
        app_sm = self._call("nvmlDeviceGetApplicationsClock", h, NVML_CLOCK_SM)
        app_mem = self._call("nvmlDeviceGetApplicationsClock", h, NVML_CLOCK_MEM)
        name = self._call("nvmlDeviceGetName", own)
        sms = getattr(attrs, "multiprocessorCount", None)
        return {
            "name": _text(name) if name is not None else None,
            "memory_total": int(mem.total) if mem is not None else None,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "sm_count": int(sms) if sms else None,
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

    def state(self, device: int | Target) -> DeviceState:
        """Clocks and throttling of the GPU; processes and memory of the device itself (on
        a MIG parent NVML lists every tenant's processes, a slice only its own)."""
        own, h = self.handles(device)
        reasons = self._call("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:  # its name before driver 535
            reasons = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        procs = self._call("nvmlDeviceGetComputeRunningProcesses", own)
        mem = self._call("nvmlDeviceGetMemoryInfo", own)
        clock = self._call("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM)
        return DeviceState(
            throttle=int(reasons) if reasons is not None else None,
            sm_clock_mhz=int(clock) if clock is not None else None,
            pids=tuple(int(p.pid) for p in procs) if procs is not None else None,
            memory_used=int(mem.used) if mem is not None else None)

    def busy_pids(self, device: int | Target, since_us: int) -> dict[int, int] | None:
        """Each process that used the device's SMs since ``since_us`` (NVML's timestamps:
        microseconds of the wall clock) with its highest SM %; None where NVML refuses
        the query (MIG slices, older GPUs)."""
        fn = getattr(self.lib, "nvmlDeviceGetProcessUtilization", None)
        own = self.handles(device)[0]
        if fn is None or own is None:
            return None
        try:
            samples = fn(own, int(since_us))
        except Exception as exc:  # NotFound: no sample since then, so nobody used it
            return {} if type(exc).__name__ == "NVMLError_NotFound" else None
        out: dict[int, int] = {}
        for smp in samples or ():
            if int(smp.smUtil) > 0:
                out[int(smp.pid)] = max(out.get(int(smp.pid), 0), int(smp.smUtil))
        return out


_SHARED: list[Nvml | None] = []


def shared() -> Nvml | None:
    """This process's NVML, opened on first use (None where there is none)."""
    if not _SHARED:
        _SHARED.append(Nvml.open())
    return _SHARED[0]


def forget() -> None:
    """Open NVML afresh on the next :func:`shared` (tests swap the module)."""
    _SHARED.clear()
