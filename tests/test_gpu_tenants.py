"""Who else used the GPU in a window: processes seen by per-process utilisation between the
edges, and the workload's own contexts in a container whose PID namespace NVML does not
share; through the fake NVML (no GPU here)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpu_fakes import ME, guard

from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.gpu.fakes import FakeDevice, FakeNvml
from pytest_perfgate.gpu.nvml import Target
from pytest_perfgate.gpu.tenants import holding


def now_us() -> int:
    return time.time_ns() // 1000


class Neighbour:
    """A window in which pid 777 ran kernels on the GPU, then left before its end."""

    def __init__(self, device: FakeDevice) -> None:
        self.device = device

    def run_window(self, duration_s: float) -> RawWindow:
        assert self.device.util is not None
        self.device.util += [(ME, 90, now_us() + 1), (777, 35, now_us() + 1)]
        return RawWindow(1000, duration_s, duration_s, gpu={"sync": "edges"})


def test_a_process_that_used_the_gpu_between_the_edges_spoils_the_window() -> None:
    dev = FakeDevice(pids=[ME])
    g = guard(FakeNvml([dev]))
    meter = Meter(MeasureConfig(windows=1), clock=FakeClock(), load_probe=NullProbe(),
                  gpu_probe=g)
    w = meter.window(Neighbour(dev), 0.1)
    assert w.polluted and w.gpu_spoiled == (
        "another process used GPU 0 between the window's edges: pid 777 (SM 35%)")
    assert meter.window(Neighbour(dev), 0.1).gpu_spoiled is not None  # its new samples
    dev.util = [(ME, 90, now_us())]  # only ours since
    a = g.sample()
    dev.util.append((ME, 80, now_us() + 1))
    assert g.spoiled(a, g.sample()) is None
    dev.util = None  # the query refused (MIG slices, older GPUs): the edges still count
    a = g.sample()
    dev.pids.append(4242)
    assert g.spoiled(a, g.sample()) == "another process on GPU 0: pid 4242"


def open_device(proc: Path, pid: int, minor: int) -> None:
    """A process of the fake /proc holding /dev/nvidia<minor> open, as a CUDA context does."""
    fd = proc / str(pid) / "fd"
    fd.mkdir(parents=True)
    os.symlink("/dev/null", fd / "0")
    os.symlink(f"/dev/nvidia{minor}", fd / "7")


def test_in_a_container_the_workloads_own_contexts_are_not_outside_load(tmp_path: Path
                                                                        ) -> None:
    """NVML lists host pids, none of ours: the workload's two processes with a context
    (the test and its learner) are counted from /proc, not taken for a neighbour."""
    proc = tmp_path / "proc"
    open_device(proc, ME, 3)
    open_device(proc, 4100, 3)
    open_device(proc, 4101, 1)  # ours, on another GPU
    assert holding([ME, 4100, 4101, 4102], 3, proc) == 2
    dev = FakeDevice(pids=[90001, 90002], minor=3)
    g = guard(FakeNvml([dev]), own={ME, 4100, 4101})
    g.tenants[Target(0)].proc = proc
    assert g.spoiled(g.sample(), g.sample()) is None
    a = g.sample()
    dev.pids.append(90003)
    assert g.spoiled(a, g.sample()) == (
        "1 other compute context(s) on GPU 0 (NVML lists 3 processes, none with a pid of "
        "this workload: another PID namespace)")
    dev.pids = []  # a container where NVML shows no process at all: nothing to judge by
    assert g.spoiled(g.sample(), g.sample()) is None
