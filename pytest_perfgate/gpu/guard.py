"""The GPU side of the noise guard: another process on the device, or the device clocking
down, spoils a window the way outside CPU load does (core/load.py, docs/gpu.md).

NVML is read at both edges of a window (two readings of ~4 queries each): the processes
holding a compute context on the device, the clock event reasons and the SM clock; at the
closing edge also the processes whose kernels ran since the opening one (gpu/tenants.py).
A window is spoiled when a process outside the workload's tree held a context or used the
device, when a
thermal, hardware-slowdown or power-brake reason was on at either edge, or when the power
cap was on and the SM clock was more than :data:`CAP_DROP` below the highest this
measurement saw. A power cap alone is not outside noise: a GPU-bound workload runs into its
power limit all the time, in the base as in the head, and spoiling every such window would
leave nothing to judge. The reasons are instantaneous: a throttle that came and went
between the edges is not seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_perfgate.gpu.nvml import DeviceState, Nvml, Target, as_target
from pytest_perfgate.gpu.tenants import Tenants, tree_pids

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
    """Each watched device's state at one window edge, and when (wall clock, us)."""

    states: Mapping[Target, DeviceState]
    at_us: int = 0


class GpuProbe(Protocol):
    """What the Meter asks at a window's edges (core/measure.py)."""

    def sample(self) -> GpuSample | None: ...

    def spoiled(self, before: GpuSample, after: GpuSample) -> str | None: ...

    def start(self) -> None: ...


class GpuGuard:
    """Watches ``devices`` (NVML indices or targets, gpu/nvml.py) through ``nvml``.
    ``own_pids`` lists the workload's processes; it is only called when NVML shows a pid
    other than this one. ``contexts``: how many compute contexts the workload itself holds
    on a device where /proc cannot tell (gpu/tenants.py)."""

    def __init__(self, nvml: Nvml, devices: Sequence[int | Target],
                 own_pids: Callable[[], set[int]] = tree_pids, contexts: int = 1) -> None:
        self.nvml = nvml
        self.devices = tuple(as_target(d) for d in devices)
        self.tenants = {t: Tenants(t.label, own_pids, contexts, nvml.minor(t))
                        for t in self.devices}
        self._top_mhz: dict[Target, int] = {}  # the highest SM clock seen, per device

    def start(self) -> None:
        """A new measurement: the power cap rule compares clocks within one only."""
        self._top_mhz.clear()

    @classmethod
    def for_cuda(cls, cuda: Any, nvml: Nvml | None = None,
                 env: Mapping[str, str] | None = None) -> GpuGuard | None:
        """A guard on the device ``cuda`` (torch.cuda) calls current: found by its UUID
        (a GPU or a MIG slice), else as CUDA numbers it under CUDA_VISIBLE_DEVICES. None
        without NVML or where the device is not found."""
        from pytest_perfgate.gpu import nvml as nvml_mod
        from pytest_perfgate.gpu.visible import cuda_target, target_of_uuid

        nv = nvml if nvml is not None else nvml_mod.shared()
        if nv is None:
            return None
        try:
            current = int(cuda.current_device())
        except Exception:
            return None
        target = None
        try:
            target = target_of_uuid(nv, str(cuda.get_device_properties(current).uuid))
        except Exception:
            pass
        if target is None:
            target = cuda_target(nv, current, env)
        return cls(nv, [target]) if target is not None else None

    @classmethod
    def for_index(cls, cuda_index: int, nvml: Nvml | None = None,
                  env: Mapping[str, str] | None = None) -> GpuGuard | None:
        """A guard on the device CUDA numbers ``cuda_index`` in a child process (a ring
        pair's learner): the ``cuda_index``-th visible device. None without NVML."""
        from pytest_perfgate.gpu import nvml as nvml_mod
        from pytest_perfgate.gpu.visible import cuda_target

        nv = nvml if nvml is not None else nvml_mod.shared()
        if nv is None:
            return None
        target = cuda_target(nv, cuda_index, env)
        return cls(nv, [target]) if target is not None else None

    def sample(self) -> GpuSample:
        return GpuSample({t: self.nvml.state(t) for t in self.devices},
                         time.time_ns() // 1000)

    def spoiled(self, before: GpuSample, after: GpuSample) -> str | None:
        """Why the window between the two samples is spoiled, or None."""
        reasons: list[str] = []
        for t in self.devices:
            a, b = before.states.get(t), after.states.get(t)
            if a is None or b is None:
                continue
            busy = self.nvml.busy_pids(t, before.at_us) if before.at_us else None
            others = self.tenants[t].others({*(a.pids or ()), *(b.pids or ())}, busy)
            if others:
                reasons.append(others)
            clocks = [c for c in (a.sm_clock_mhz, b.sm_clock_mhz) if c is not None]
            top = max([self._top_mhz.get(t, 0), *clocks])
            self._top_mhz[t] = top
            mask = (a.throttle or 0) | (b.throttle or 0)
            if mask & POWER_CAP and not (clocks and min(clocks) < (1 - CAP_DROP) * top):
                mask &= ~POWER_CAP  # capped at the clock it always runs at: its own limit
            names = throttle_names(mask)
            if names:
                clock = f", SM clock {min(clocks)} MHz (highest {top})" if clocks else ""
                reasons.append(f"{t.label} throttled: {', '.join(names)}{clock}")
        return "; ".join(reasons) or None
