"""The GPU noise guard on a fake NVML (no GPU needed): a guard that counts this process as
its own, and an NVML whose device readings follow a script, one per window edge (the GPU
guard and GPU progress tests)."""

from __future__ import annotations

import os

from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.gpu.fakes import FakeDevice, FakeNvml
from pytest_perfgate.gpu.guard import GpuGuard
from pytest_perfgate.gpu.nvml import Nvml

ME = os.getpid()


def guard(fake: FakeNvml, own: set[int] | None = None) -> GpuGuard:
    return GpuGuard(Nvml(fake), [0], own_pids=lambda: own if own is not None else {ME})


class ScriptedNvml(FakeNvml):
    """Each reading of the device (one per window edge) takes the next (throttle, pids)."""

    def __init__(self, script: list[tuple[int, list[int], int]]) -> None:
        super().__init__([FakeDevice()])
        self.script = script

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: object) -> int:
        d = self.devices[0]
        d.throttle, d.pids, d.sm_clock = self.script.pop(0)
        d.memory_used += 2**20
        return d.throttle


class Source:
    def run_window(self, duration_s: float) -> RawWindow:
        return RawWindow(1000, duration_s, duration_s, gpu={"sync": "edges"})


CLEAN = (0, [ME], 2407)
POWER = (0x4, [ME], 1900)  # a power cap that cost 21% of the clock
NEIGHBOUR = (0, [ME, 31337], 2407)
