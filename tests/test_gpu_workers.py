"""A worker of a group that initialised CUDA: its windows count the steps the device
finished (not the launches its host made), its phases carry GPU time from CUDA events, and
the window says how it was timed; with the fake torch.cuda (no GPU here)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import pytest

from pytest_perfgate.core.timing import FakeClock, PhaseRecorder, phase
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.gpu.cuda import CudaTimer
from pytest_perfgate.gpu.fakes import FakeCuda, fake_torch
from pytest_perfgate.placement import child


class QuietPipe:
    """The parent's end of the pipe as a window sees it: nothing sent mid-window."""

    def poll(self, timeout: float = 0.0) -> bool:
        return False


def gpu_step(cuda: FakeCuda, gpu_s: float, launch_s: float) -> Callable[[], None]:
    def step() -> None:
        with phase("update"):
            cuda.launch(gpu_s, launch_s=launch_s)
    return step


def test_the_fake_launch_queue_blocks_the_host_when_full() -> None:
    clock = FakeClock()
    cuda = FakeCuda(clock, max_queued=2)
    for _ in range(2):
        cuda.launch(0.001, launch_s=0.0)
    assert clock.wall_ns() == 0  # two launches queued, the host never waited
    cuda.launch(0.001, launch_s=0.0)  # full: waits for the first to finish
    assert clock.wall_ns() == 1_000_000
    cuda.synchronize()
    assert clock.wall_ns() == 3_000_000


def test_a_cuda_window_counts_what_the_device_finished() -> None:
    clock = FakeClock()
    cuda = FakeCuda(clock)  # an unbounded queue: the host runs 20x ahead of the device
    timer = CudaTimer(cuda)
    rec = PhaseRecorder(clock)
    rec.use_device(timer)
    step = gpu_step(cuda, 0.004, 0.0002)
    w = RawWindow.from_wire(child._window(step, rec, 0.01, 0.2, QuietPipe(), 8,
                                          cuda=timer, now=clock.wall_ns)["window"])
    # 4 ms of GPU work per step: 50 finished in 0.2 s (the host launched ~1000)
    assert w.calls == 50 and w.transitions == 400 and w.wall_s == 0.2
    upd = w.phases["update"]
    assert upd.gpu_ms_per_call == pytest.approx(4.0) and upd.ms_per_call == pytest.approx(0.2)
    assert dict(w.gpu) == {"sync": "edges", "device": 0}
    assert {"gpu_peak_allocated", "gpu_peak_reserved"} <= set(w.memory)
    # the next window starts from a drained device and counts alike
    w2 = RawWindow.from_wire(child._window(step, rec, clock.wall_ns() / 1e9 + 0.01, 0.2,
                                           QuietPipe(), 8, cuda=timer,
                                           now=clock.wall_ns)["window"])
    assert w2.calls == 50


def test_a_host_only_window_is_unchanged() -> None:
    clock = FakeClock()
    rec = PhaseRecorder(clock)

    def step() -> None:
        with phase("physics"):
            clock.advance(0.001)

    w = RawWindow.from_wire(child._window(step, rec, 0.01, 0.1, QuietPipe(), 4,
                                          now=clock.wall_ns)["window"])
    assert w.calls == 100 and w.phases["physics"].calls == 100 and not w.gpu
    assert "gpu_ms" not in str(w.to_wire()) and w.phases["physics"].gpu_ns is None


def test_cuda_is_found_only_once_initialised_and_never_imported() -> None:
    rec = PhaseRecorder()
    saved = sys.modules.get("torch")
    try:
        sys.modules.pop("torch", None)
        assert child._cuda_timer(rec, None) is None and rec.device is None
        cuda = FakeCuda(FakeClock(), initialized=False)
        sys.modules["torch"] = fake_torch(cuda)
        assert child._cuda_timer(rec, None) is None
        cuda.initialized = True
        timer = child._cuda_timer(rec, None)
        assert timer is not None and rec.device is timer and cuda.synchronizations == 1
        assert child._cuda_timer(rec, timer) is timer
    finally:
        if saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = saved


class WallClock:
    """The fake stream on this process's monotonic clock: a worker's windows are real."""

    def wall_ns(self) -> int:
        return time.monotonic_ns()

    def advance(self, wall_s: float, cpu_s: float | None = None) -> None:
        time.sleep(wall_s)


def fake_gpu_learner(gpu_ms: float = 2.0) -> Callable[[], None]:
    """Runs in the spawn worker: a fake torch.cuda in its sys.modules, as a learner's
    ``import torch; torch.cuda.init()`` would leave it."""
    cuda = FakeCuda(WallClock(), max_queued=8)
    sys.modules["torch"] = fake_torch(cuda)
    return gpu_step(cuda, gpu_ms / 1e3, 5e-5)


@pytest.mark.slow  # spawns a worker process
def test_a_worker_that_initialised_cuda_times_its_windows_on_the_device() -> None:
    from pytest_perfgate.placement.spec import WorkerSpec
    from pytest_perfgate.placement.workers import Timeouts, WorkerGroup

    fast = Timeouts(start=60.0, step=5.0, stop=2.0, term=1.0)
    with WorkerGroup([WorkerSpec(fake_gpu_learner, transitions=4)], fast) as g:
        g.run_window(0.1)  # the first window finds CUDA initialised
        w = g.run_window(0.3)
        latencies = g.latency(5)[0]  # its phases' event pairs are read once completed
    # 2 ms of GPU work a step: at most 150 finished in 0.3 s (host launches: thousands)
    assert 10 < w.calls <= 152, w.calls
    assert w.gpu["sync"] == "edges" and w.gpu["device"] == 0
    upd = w.phases["update"]
    assert upd.gpu_ms_per_call == pytest.approx(2.0, rel=0.2)
    assert len(latencies) == 5 and min(latencies) >= 0.0018  # GPU work, not the launch


def test_a_cuda_workers_latency_is_its_gpu_work_on_every_stream() -> None:
    """A step that queues 1 ms on the current stream and 3 ms on a second one: its
    latency is the 3 ms the device needs, not the 0.1 ms the host spends launching, and
    the phases' event pairs are read only once they completed."""
    clock = FakeClock()
    cuda = FakeCuda(clock)
    side = cuda.Stream()
    rec = PhaseRecorder(clock)
    rec.use_device(CudaTimer(cuda))

    def step() -> None:
        with phase("update"):
            cuda.launch(0.001, launch_s=0.00005)
            cuda.launch(0.003, launch_s=0.00005, stream=side)

    got = child._latency(step, rec, 3, now=clock.wall_ns)["latencies"]
    assert got == [pytest.approx(0.003, rel=0.05)] * 3
