"""The GPU noise guard on a fake NVML (no GPU needed): a guard that counts this process as
its own, an NVML whose device readings follow a script, one per window edge (the GPU
guard and GPU progress tests), the fake put where ``import pynvml`` finds it, and an H100
in MIG mode."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.gpu import nvml as nvml_mod
from pytest_perfgate.gpu.fakes import FakeDevice, FakeMig, FakeNvml
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


@contextmanager
def installed(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml | None) -> Iterator[None]:
    """``fake`` as this process's pynvml (None: not installed), NVML opened afresh."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml_mod.forget()
    try:
        yield
    finally:
        nvml_mod.forget()


def h100(*slices: FakeMig, pids: list[int] | None = None) -> FakeDevice:
    """An H100 in MIG mode holding ``slices`` (none: MIG off)."""
    return FakeDevice(name="NVIDIA H100 80GB HBM3", memory_total=81559 * 2**20,
                      compute_capability=(9, 0), sm_count=132, power_limit_mw=700000,
                      mig=(1, 1) if slices else (0, 0), slices=list(slices),
                      pids=list(pids or []))


SLICE_1G = "MIG-1d5a0000-0000-4000-8000-000000000001"
SLICE_7G = "MIG-7e770000-0000-4000-8000-000000000007"


def slice_1g(pids: list[int] | None = None, uuid: str = SLICE_1G) -> FakeMig:
    return FakeMig("1g.10gb", uuid, 9984 * 2**20, 13 * 2**20, 16, list(pids or []))


def slice_7g(pids: list[int] | None = None) -> FakeMig:
    return FakeMig("7g.80gb", SLICE_7G, 80896 * 2**20, 13 * 2**20, 132, list(pids or []))
