"""The GPU side of the noise guard: another process on the device, or the device clocking
down, spoils a window the way outside CPU load does (core/load.py, docs/gpu.md).

NVML is read at both edges of a window (two readings of ~4 queries each): the processes
holding a compute context on the device, the clock event reasons and the SM clock. A
window is spoiled when a process outside the workload's tree held a context, when a
thermal, hardware-slowdown or power-brake reason was on at either edge, or when the power
cap was on and the SM clock was more than :data:`CAP_DROP` below the highest this
measurement saw. A power cap alone is not outside noise: a GPU-bound workload runs into its
power limit all the time, in the base as in the head, and spoiling every such window would
leave nothing to judge. The reasons are instantaneous: a throttle that came and went
between the edges is not seen.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_perfgate.gpu.nvml import DeviceState, Nvml

# NVML clock event reasons that slow the device; GPU idle, application clock setting,
# sync boost and display clock setting are not the workload's slowdown by someone else.
POWER_CAP = 0x4
CAP_DROP = 0.10  # a power cap spoils a window when it cost this much SM clock
THROTTLE_REASONS: dict[int, str] = {
    POWER_CAP: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal (software slowdown)",
    0x40: "thermal (hardware slowdown)",
    0x80: "power brake",
}


def throttle_names(mask: int) -> list[str]:
    """The slowing reasons set in ``mask``, in NVML's bit order."""
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


@dataclass(frozen=True)
class GpuSample:
    """Each watched device's state at one window edge, by NVML index."""

    states: Mapping[int, DeviceState]


class GpuProbe(Protocol):
    """What the Meter asks at a window's edges (core/measure.py)."""

    def sample(self) -> GpuSample | None: ...

    def spoiled(self, before: GpuSample, after: GpuSample) -> str | None: ...

    def start(self) -> None: ...


def tree_pids() -> set[int]:
    """This process and its descendants (a worker or learner may hold the context)."""
    import psutil

    me = psutil.Process()
    pids = {me.pid}
    try:
        pids.update(c.pid for c in me.children(recursive=True))
    except psutil.Error:
        pass
    return pids


class GpuGuard:
    """Watches ``devices`` (NVML indices) through ``nvml``. ``own_pids`` lists the
    workload's processes; it is only called when NVML shows a pid other than this one.
    ``contexts``: how many compute contexts the workload itself holds on a device, used
    when no listed pid is ours (a container's PID namespace hides the real pids)."""

    def __init__(self, nvml: Nvml, devices: Sequence[int],
                 own_pids: Callable[[], set[int]] = tree_pids, contexts: int = 1) -> None:
        self.nvml = nvml
        self.devices = tuple(devices)
        self._own_pids = own_pids
        self._contexts = contexts
        self._top_mhz: dict[int, int] = {}  # the highest SM clock seen, per device

    def start(self) -> None:
        """A new measurement: the power cap rule compares clocks within one only."""
        self._top_mhz.clear()

    @classmethod
    def for_cuda(cls, cuda: Any, nvml: Nvml | None = None) -> GpuGuard | None:
        """A guard on the device ``cuda`` (torch.cuda) calls current, None without NVML."""
        from pytest_perfgate.gpu import nvml as nvml_mod

        nv = nvml if nvml is not None else nvml_mod.shared()
        if nv is None:
            return None
        index = None
        try:
            uuid = str(cuda.get_device_properties(cuda.current_device()).uuid)
            index = nv.index_of_uuid(uuid)
        except Exception:
            pass
        if index is None:
            try:
                index = int(cuda.current_device())
            except Exception:
                return None
        return cls(nv, [index])

    @classmethod
    def for_index(cls, cuda_index: int, nvml: Nvml | None = None,
                  env: Mapping[str, str] | None = None) -> GpuGuard | None:
        """A guard on the device CUDA numbers ``cuda_index`` in a child process (a ring
        pair's learner): the ``cuda_index``-th visible device. None without NVML."""
        from pytest_perfgate.gpu import nvml as nvml_mod
        from pytest_perfgate.gpu.fingerprint import visible_indices

        nv = nvml if nvml is not None else nvml_mod.shared()
        if nv is None:
            return None
        visible = visible_indices(nv, os.environ if env is None else env)
        return cls(nv, [visible[cuda_index]]) if 0 <= cuda_index < len(visible) else None

    def sample(self) -> GpuSample:
        return GpuSample({i: self.nvml.state(i) for i in self.devices})

    def spoiled(self, before: GpuSample, after: GpuSample) -> str | None:
        """Why the window between the two samples is spoiled, or None."""
        reasons: list[str] = []
        me = os.getpid()
        for i in self.devices:
            a, b = before.states.get(i), after.states.get(i)
            if a is None or b is None:
                continue
            others = self._others(i, {*(a.pids or ()), *(b.pids or ())}, me)
            if others:
                reasons.append(others)
            clocks = [c for c in (a.sm_clock_mhz, b.sm_clock_mhz) if c is not None]
            top = max([self._top_mhz.get(i, 0), *clocks])
            self._top_mhz[i] = top
            mask = (a.throttle or 0) | (b.throttle or 0)
            if mask & POWER_CAP and not (clocks and min(clocks) < (1 - CAP_DROP) * top):
                mask &= ~POWER_CAP  # capped at the clock it always runs at: its own limit
            names = throttle_names(mask)
            if names:
                clock = f", SM clock {min(clocks)} MHz (highest {top})" if clocks else ""
                reasons.append(f"GPU {i} throttled: {', '.join(names)}{clock}")
        return "; ".join(reasons) or None


    def _others(self, device: int, pids: set[int], me: int) -> str | None:
        if not pids or pids == {me}:
            return None
        own = self._own_pids()
        if pids & own:
            foreign = sorted(pids - own)
            if not foreign:
                return None
            shown = ", ".join(str(p) for p in foreign[:5]) + (", ..." if len(foreign) > 5
                                                               else "")
            return (f"another process on GPU {device}: pid {shown}" if len(foreign) == 1
                    else f"{len(foreign)} other processes on GPU {device}: pids {shown}")
        extra = len(pids) - self._contexts  # no pid of ours listed: count the contexts
        if extra <= 0:
            return None
        return (f"{extra} other compute context(s) on GPU {device} (NVML lists {len(pids)} "
                f"processes, none with a pid of this workload: another PID namespace)")
