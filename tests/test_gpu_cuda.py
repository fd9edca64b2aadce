"""CUDA-correct windows and phases through a fake torch.cuda on a fake clock (no GPU here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pytest_perfgate.core.judged import summarize
from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.results import BenchResult
from pytest_perfgate.core.timing import FakeClock, PhaseStats, phase
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.gpu.cuda import SYNC_ENV, CudaTimer, active_cuda, sync_mode, timer_if_active
from pytest_perfgate.gpu.fakes import FakeCuda, fake_torch

LAUNCH_S = 0.0001  # host time to launch the update's kernels
UPDATE_GPU_S = 0.002  # the kernels' time on the device
ENV_S = 0.0005  # host-only work per step


def learner(cuda: FakeCuda, clock: FakeClock):
    """A learner-like step: host work, then an update whose kernels run asynchronously."""

    def step() -> None:
        with phase("env"):
            clock.advance(ENV_S)
        with phase("update"):
            cuda.launch(UPDATE_GPU_S, launch_s=LAUNCH_S)

    return step


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeCuda, FakeClock]:
    clock = FakeClock()
    fake = FakeCuda(clock)
    monkeypatch.setitem(sys.modules, "torch", fake_torch(fake))
    monkeypatch.delenv(SYNC_ENV, raising=False)
    return fake, clock


def test_active_cuda_looks_only_at_an_imported_initialised_torch() -> None:
    clock = FakeClock()
    assert active_cuda({}) is None
    assert active_cuda({"torch": fake_torch(FakeCuda(clock, initialized=False))}) is None
    fake = FakeCuda(clock)
    assert active_cuda({"torch": fake_torch(fake)}) is fake

    class Broken:
        def is_initialized(self) -> bool:
            raise RuntimeError("Torch not compiled with CUDA enabled")

    assert active_cuda({"torch": fake_torch(Broken())}) is None  # type: ignore[arg-type]


def test_window_edges_hold_the_queued_work_and_phases_get_gpu_time(cuda) -> None:
    fake, clock = cuda
    src = LoopSource(learner(fake, clock), 256, clock=clock, tree=None)
    w = src.run_window(0.1)
    host_per_step = ENV_S + LAUNCH_S
    # the loop stops on host time; the closing synchronise waits for every queued kernel
    assert w.wall_s == pytest.approx(w.calls * UPDATE_GPU_S + ENV_S + LAUNCH_S, rel=1e-6)
    assert w.calls == pytest.approx(0.1 / host_per_step, abs=1)
    assert w.gpu == {"sync": "edges", "device": 0}
    up, env = w.phases["update"], w.phases["env"]
    assert up.ms_per_call == pytest.approx(LAUNCH_S * 1e3)  # the CPU wall: the launch
    # the kernels (the first call's pair also holds its launch: the stream was idle)
    assert up.gpu_ms_per_call == pytest.approx(UPDATE_GPU_S * 1e3, rel=1e-3)
    # host-only work: its events see the GPU busy with earlier updates, except on the first
    # call, when the stream was idle and the pair measured the host time between them
    assert env.gpu_ns == pytest.approx(ENV_S * 1e9)
    # the next window starts with an empty queue: it pays nothing of this one
    w2 = src.run_window(0.1)
    assert w2.wall_s == pytest.approx(w2.calls * UPDATE_GPU_S + ENV_S + LAUNCH_S, rel=1e-6)


def test_without_cuda_edges_the_rate_counts_launches_only(monkeypatch) -> None:
    """What the figure would be without the edges: the same step, CUDA not initialised."""
    clock = FakeClock()
    fake = FakeCuda(clock, initialized=False)
    monkeypatch.setitem(sys.modules, "torch", fake_torch(fake))
    w = LoopSource(learner(fake, clock), 256, clock=clock, tree=None).run_window(0.1)
    assert w.gpu == {} and w.phases["update"].gpu_ns is None
    assert w.wall_s == pytest.approx(0.1, rel=0.01)  # 3.3x too fast: the GPU is behind
    assert fake.synchronizations == 0


def test_host_timers_only_when_asked(cuda) -> None:
    fake, clock = cuda
    w = LoopSource(learner(fake, clock), 256, clock=clock, tree=None, cuda=False).run_window(0.1)
    assert w.gpu == {} and fake.synchronizations == 0
    assert w.wall_s == pytest.approx(0.1, rel=0.01)


def test_torchs_cpu_build_imported_changes_nothing() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    clock = FakeClock()

    def step() -> None:
        with phase("physics"):
            clock.advance(0.001)

    src = LoopSource(step, 1, clock=clock, tree=None)
    w = src.run_window(0.01)
    assert src.cuda is None and w.gpu == {} and w.phases["physics"].gpu_ns is None
    assert not torch.cuda.is_initialized()


def test_cuda_initialised_by_the_first_step_is_found_at_the_next_window(monkeypatch) -> None:
    clock = FakeClock()
    fake = FakeCuda(clock, initialized=False)
    monkeypatch.setitem(sys.modules, "torch", fake_torch(fake))
    inner = learner(fake, clock)

    def step() -> None:
        fake.initialized = True
        inner()

    src = LoopSource(step, 1, clock=clock, tree=None)
    assert src.run_window(0.01).gpu == {}
    assert src.run_window(0.01).gpu == {"sync": "edges", "device": 0}


def test_the_synchronising_mode_puts_gpu_time_in_each_phase_wall(cuda, monkeypatch) -> None:
    fake, clock = cuda
    monkeypatch.setenv(SYNC_ENV, "phases")
    w = LoopSource(learner(fake, clock), 256, clock=clock, tree=None).run_window(0.1)
    assert w.gpu == {"sync": "phases", "device": 0}
    up = w.phases["update"]
    assert up.ms_per_call == pytest.approx((LAUNCH_S + UPDATE_GPU_S) * 1e3)
    # each phase starts on an idle stream, so its event pair holds the launch too
    assert up.gpu_ms_per_call == pytest.approx((LAUNCH_S + UPDATE_GPU_S) * 1e3)
    assert fake.synchronizations >= 2 * w.calls


def test_a_bad_sync_mode_fails_before_anything_is_measured(monkeypatch) -> None:
    monkeypatch.setenv(SYNC_ENV, "sometimes")
    with pytest.raises(ValueError, match=r"^PERFGATE_CUDA_SYNC='sometimes': use 'edges'"):
        LoopSource(lambda: None, 1, tree=None)
    LoopSource(lambda: None, 1, tree=None, cuda=False)  # host timers only: not read


def test_a_bad_sync_mode_says_what_to_use() -> None:
    assert sync_mode({}) == "edges" and sync_mode({SYNC_ENV: " Phases "}) == "phases"
    with pytest.raises(ValueError) as e:
        sync_mode({SYNC_ENV: "always"})
    assert str(e.value) == (
        "PERFGATE_CUDA_SYNC='always': use 'edges' (default: the device is synchronised at "
        "window edges only) or 'phases' (also at every phase exit, for diagnosis; it removes "
        "the CPU/GPU overlap)")


def test_events_are_reused_across_windows(cuda) -> None:
    fake, clock = cuda
    src = LoopSource(learner(fake, clock), 1, clock=clock, tree=None)
    src.run_window(0.05)
    made = fake.events_made
    for _ in range(5):
        src.run_window(0.05)
    assert made > 0 and fake.events_made <= made + 4  # a window's worth, not 5 more


def test_gpu_memory_peaks_come_from_torch_and_span_the_measurement(cuda) -> None:
    fake, clock = cuda
    fake.alloc(3 * 2**30)  # before the measurement: the peak is reset at its start
    fake.free(3 * 2**30)
    inner = learner(fake, clock)
    sizes = iter([2**30] + [0] * 10**6)

    def step() -> None:
        n = next(sizes)
        fake.alloc(n)
        fake.free(n)
        inner()

    cfg = MeasureConfig(windows=2, window_s=0.02, warmup_window_s=0.01, warmup_span=1,
                        warmup_max_s=0.0)
    m = Meter(cfg, clock=clock, load_probe=NullProbe()).measure(
        LoopSource(step, 1, clock=clock, tree=None))
    assert m.memory["gpu_peak_allocated"] == 2**30
    assert m.memory["gpu_peak_reserved"] == 2**30
    r = summarize("learner", m, 1)
    assert r.gpu == {"sync": "edges", "device": 0}
    assert r.phases["update"].gpu_ms == pytest.approx(UPDATE_GPU_S * 1e3, rel=0.01)


def test_a_phases_share_of_the_step_is_its_gpu_time_where_that_is_longer(cuda) -> None:
    """The update launches in 0.1 ms and keeps the device busy 2 ms a step: it is nearly
    all of the step, not the 5% its launches take; the host-only env phase keeps its CPU
    wall, overlapping the GPU's work."""
    fake, clock = cuda
    cfg = MeasureConfig(windows=2, window_s=0.05, warmup_window_s=0.01, warmup_span=1,
                        warmup_max_s=0.0)
    m = Meter(cfg, clock=clock, load_probe=NullProbe()).measure(
        LoopSource(learner(fake, clock), 1, clock=clock, tree=None))
    share = m.phase_share()
    step_s = UPDATE_GPU_S  # the device is the bottleneck
    assert share["update"] == pytest.approx(UPDATE_GPU_S / step_s, rel=0.02)
    assert share["env"] == pytest.approx(ENV_S / step_s, rel=0.02)
    assert summarize("learner", m, 1).phases["update"].share == share["update"]


def test_windows_travel_with_their_gpu_time_and_mode() -> None:
    w = RawWindow(10, 1.0, 1.0, {"update": PhaseStats(4, 400, 300, 8000),
                                 "env": PhaseStats(4, 100, 100)}, 4, gpu={"sync": "edges"})
    wire = w.to_wire()
    assert wire["phases"] == {"update": [4, 400, 300, 8000], "env": [4, 100, 100]}
    assert RawWindow.from_wire(json.loads(json.dumps(wire))) == w
    assert "gpu" not in RawWindow(10, 1.0, 1.0).to_wire()
    with pytest.raises(ValueError, match="has 2 fields, expected 3 or 4"):
        RawWindow.from_wire({**wire, "phases": {"x": [1, 2]}})
    both = RawWindow.parallel([w, w], 1.0)
    assert both.phases["update"].gpu_ns == 16000 and both.phases["env"].gpu_ns is None


def test_a_cpu_only_result_records_no_gpu_field() -> None:
    clock = FakeClock()

    def step() -> None:
        with phase("physics"):
            clock.advance(0.001)

    cfg = MeasureConfig(windows=2, window_s=0.01, warmup_window_s=0.01, warmup_span=1,
                        warmup_max_s=0.0)
    m = Meter(cfg, clock=clock, load_probe=NullProbe()).measure(
        LoopSource(step, 1, clock=clock, tree=None))
    d = summarize("walk", m, 1).to_json()
    assert "gpu" not in d and "gpu_ms" not in d["phases"]["physics"]
    assert not any("gpu" in k for k in json.dumps(d).split('"'))
    assert BenchResult.from_json(d).phases["physics"].gpu_ms is None


def test_a_gpu_result_reads_back() -> None:
    clock = FakeClock()
    fake = FakeCuda(clock)
    cfg = MeasureConfig(windows=2, window_s=0.01, warmup_window_s=0.01, warmup_span=1,
                        warmup_max_s=0.0)
    src = LoopSource(learner(fake, clock), 1, clock=clock, tree=None)
    src.cuda = CudaTimer(fake)  # injected: the edge a real torch.cuda would fill
    src.recorder.use_device(src.cuda)
    r = summarize("learner", Meter(cfg, clock=clock, load_probe=NullProbe()).measure(src), 1)
    back = BenchResult.from_json(json.loads(json.dumps(r.to_json())))
    assert back == r and back.phases["update"].gpu_ms == pytest.approx(2.0, rel=0.01)
    bad = r.to_json()
    bad["phases"]["update"]["gpu_ms"] = "fast"
    with pytest.raises(ValueError, match="phase 'update': field 'gpu_ms' is a string"):
        BenchResult.from_json(bad)


def test_timer_if_active_builds_nothing_without_cuda() -> None:
    assert timer_if_active({}, {}) is None
    t = timer_if_active({"torch": fake_torch(FakeCuda(FakeClock()))}, {SYNC_ENV: "phases"})
    assert t is not None and t.mode == "phases"


PROBE = """
import json, sys
from pytest_perfgate.core.measure import Meter, MeasureConfig
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.load import NullProbe
from pytest_perfgate import phase
def step():
    with phase("physics"):
        sum(range(100))
cfg = MeasureConfig(windows=2, window_s=0.01, warmup_window_s=0.005, warmup_span=1,
                    warmup_max_s=0.02)
Meter(cfg).measure(LoopSource(step, 1))
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m == "pynvml"
                        or m.startswith("pytest_perfgate.gpu"))))
"""


@pytest.mark.slow  # a fresh interpreter
def test_a_process_that_never_touched_cuda_imports_nothing_of_it() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == []
