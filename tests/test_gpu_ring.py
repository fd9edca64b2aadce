"""A CUDA learner on the ring: its phases' GPU time from CUDA events is a GPU field of the
phase (not a phase of its own), travels through the side's snapshots, and the report shows
it as it shows an in-process phase's; with the fake torch.cuda (no GPU here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gpu_fakes import installed
from ring_fakes import SPEC

from pytest_perfgate.core.judged import summarize
from pytest_perfgate.core.measure import Measurement
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow, Window
from pytest_perfgate.gpu.cuda import CudaTimer, PendingPhases
from pytest_perfgate.gpu.fakes import FakeCuda, FakeDevice, FakeNvml
from pytest_perfgate.report.render import gpu_lines
from pytest_perfgate.ring.pair import RingPair
from pytest_perfgate.ring.sides import SideRecorder, _snapshot


def learner(clock: FakeClock, cuda: FakeCuda, rec: SideRecorder, gpu: PendingPhases,
            updates: int) -> None:
    """A free-running CUDA learner's iterations: a 0.2 ms launch of 4 ms of GPU work."""
    for _ in range(updates):
        with rec.phase("update"):
            ev = gpu.start()
            cuda.launch(0.004, launch_s=0.0002)
            gpu.end("update", ev)
        gpu.flush()
        clock.advance(0.0048)  # host work outside the phase: the device keeps up


def test_gpu_time_joins_its_phase_through_the_snapshots() -> None:
    clock = FakeClock()
    cuda = FakeCuda(clock)
    rec = SideRecorder(clock)
    gpu = PendingPhases(CudaTimer(cuda), rec)
    totals: dict = {}
    learner(clock, cuda, rec, gpu, 10)
    a = _snapshot(rec, totals, 0, 10)
    learner(clock, cuda, rec, gpu, 100)
    b = _snapshot(rec, totals, 0, 110)
    assert sorted(b["phases"]) == ["update"]  # no update@gpu phase
    w = RingPair._diff(a, b)
    upd = w.phases["update"]
    assert upd.calls == 100 and upd.ms_per_call == pytest.approx(0.2)
    # the device was idle at each entry: the launch (0.2 ms) and the 4 ms of work; the last
    # entry before the first snapshot was finished after it and counts here
    assert upd.gpu_ms_per_call == pytest.approx(4.2)
    assert RawWindow.from_wire(w.to_wire()) == w  # as a window travels


def test_gpu_time_reported_after_its_phase_waits_for_the_phase() -> None:
    rec = SideRecorder(FakeClock())
    rec.add_gpu("update", 4_000_000)  # the device finished it after the last snapshot
    assert rec.take() == {}
    with rec.phase("update"):
        pass
    assert rec.take()["update"].gpu_ns == 4_000_000
    with rec.phase("drain"):
        pass
    assert rec.take()["drain"].gpu_ns is None  # a host-only phase stays host-only


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with installed(monkeypatch, FakeNvml([FakeDevice(), FakeDevice()])):
        yield


def test_a_cuda_learners_windows_say_how_they_were_timed(two_gpus) -> None:
    assert RingPair(SPEC, learner_device="cuda:1").gpu_timing() == {"sync": "events",
                                                                     "device": 1}
    assert RingPair(SPEC).gpu_timing() == {}


def test_the_report_shows_a_ring_learners_gpu_time_as_any_phases(two_gpus) -> None:
    clock = FakeClock()
    cuda = FakeCuda(clock)
    rec = SideRecorder(clock)
    gpu = PendingPhases(CudaTimer(cuda), rec)
    totals: dict = {}
    snaps = [_snapshot(rec, totals, 0, 0)]
    windows = []
    for k in range(3):
        learner(clock, cuda, rec, gpu, 200)
        snaps.append(_snapshot(rec, totals, 256 * 200 * (k + 1), 0))
        raw = RingPair._diff(snaps[-2], snaps[-1])
        windows.append(Window.of(RawWindow(raw.transitions, 1.0, raw.cpu_s, raw.phases,
                                           raw.calls,
                                           gpu=RingPair(SPEC, learner_device="cuda")
                                           .gpu_timing())))
    r = summarize("ring_pair_gpu", Measurement(tuple(windows), True, 1.0, 2), 256)
    # one entry's GPU time (the last) was still pending at the last snapshot
    assert r.phases["update"].gpu_ms == pytest.approx(4.2 * 599 / 600)
    assert gpu_lines(r) == [
        "CUDA timed by events only: the learner runs free between the windows' snapshots, "
        "nothing synchronises it, and a phase's GPU time counts in the window in which the "
        "device finished it",
        "phase update: CPU wall 0.2 ms, GPU 4.19 ms per call (its kernels run after the CPU has "
        "moved on: the GPU time is what it costs)"]


def test_a_learner_on_another_device_times_and_measures_that_device() -> None:
    """A learner given cuda:1 in a process whose current device is 0: its events are on
    device 1's stream, and its windows carry its own peak memory there since the previous
    snapshot, not what device 0 or NVML's device-wide figure hold."""
    clock = FakeClock()
    cuda = FakeCuda(clock, devices=2)
    timer = CudaTimer(cuda, device=1)
    rec = SideRecorder(clock)
    rec.peaks = timer.take_peak
    gpu = PendingPhases(timer, rec)
    cuda.alloc(2**30, device=1)  # building and warming up: before the measured span
    cuda.free(2**30, device=1)
    cuda.alloc(3 * 2**30, device=0)  # another user of device 0
    totals: dict = {}
    a = _snapshot(rec, totals, 0, 0)
    for _ in range(10):
        with rec.phase("update"):
            ev = gpu.start()
            cuda.alloc(256 * 2**20, device=1)
            cuda.launch(0.004, launch_s=0.0002, stream=cuda.current_stream(1))
            cuda.free(256 * 2**20, device=1)
            gpu.end("update", ev)
        cuda.synchronize(1)
        gpu.flush()
    w = RingPair._diff(a, _snapshot(rec, totals, 2560, 10))
    assert w.phases["update"].gpu_ms_per_call == pytest.approx(4.2)
    assert w.memory == {"gpu_peak_allocated": 256 * 2**20, "gpu_peak_reserved": 256 * 2**20}
    assert RawWindow.from_wire(w.to_wire()) == w
