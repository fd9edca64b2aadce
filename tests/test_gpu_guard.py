"""The GPU noise guard and GPU memory, through a fake NVML (no GPU here)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from gpu_fakes import CLEAN, ME, NEIGHBOUR, POWER, ScriptedNvml, Source, guard

from pytest_perfgate.core.gate import Outcome, Rule
from pytest_perfgate.core.judged import Judged, summarize
from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.memory import (
    decide_memory,
    gpu_figure,
    gpu_memory_line,
    memory_line,
)
from pytest_perfgate.core.results import BenchRecord, BenchResult, PhaseSummary
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.gpu.fakes import FakeDevice, FakeNvml
from pytest_perfgate.gpu.guard import GpuGuard, throttle_names
from pytest_perfgate.gpu.nvml import Nvml, Target
from pytest_perfgate.history.asv import asv_entries, gpu_mem_series
from pytest_perfgate.report.render import explain, gpu_lines, notes


def window_between(g: GpuGuard, change: Callable[[FakeDevice], None]) -> str | None:
    a = g.sample()
    change(g.nvml.lib.devices[0])
    return g.spoiled(a, g.sample())


def test_a_quiet_gpu_spoils_nothing() -> None:
    fake = FakeNvml([FakeDevice(pids=[ME], throttle=0x1)])  # idle is not a slowdown
    assert window_between(guard(fake), lambda d: None) is None


def test_another_process_with_a_compute_context_is_named() -> None:
    fake = FakeNvml([FakeDevice(pids=[ME])])
    g = guard(fake, own={ME, 4100})
    assert window_between(g, lambda d: d.pids.extend([4100, 4242])) == \
        "another process on GPU 0: pid 4242"
    fake.devices[0].pids = [ME]
    assert window_between(g, lambda d: d.pids.extend([51, 52])) == \
        "2 other processes on GPU 0: pids 51, 52"


def test_in_another_pid_namespace_the_contexts_are_counted() -> None:
    fake = FakeNvml([FakeDevice(pids=[90001])])  # the host's pid of this process
    g = guard(fake, own={ME})
    assert window_between(g, lambda d: None) is None  # one context: ours
    assert window_between(g, lambda d: d.pids.append(90002)) == (
        "1 other compute context(s) on GPU 0 (NVML lists 2 processes, none with a pid of "
        "this workload: another PID namespace)")


def test_throttling_is_named_with_the_sm_clock() -> None:
    assert throttle_names(0x1 | 0x2 | 0x4 | 0x40) == ["power cap",
                                                       "thermal (hardware slowdown)"]

    def hot(d: FakeDevice) -> None:
        d.throttle, d.sm_clock = 0x20 | 0x8, 1830

    fake = FakeNvml([FakeDevice(pids=[ME])])
    assert window_between(guard(fake), hot) == (
        "GPU 0 throttled: hardware slowdown, thermal (software slowdown), SM clock 1830 MHz "
        "(highest 2407)")


def test_a_power_cap_spoils_only_when_it_costs_clock() -> None:
    """A GPU-bound workload runs at its power limit all along: that is its own speed."""
    fake = FakeNvml([FakeDevice(pids=[ME], throttle=0x4, sm_clock=1980)])
    g = guard(fake)
    assert window_between(g, lambda d: None) is None
    assert window_between(g, lambda d: setattr(d, "sm_clock", 1800)) is None  # -9%

    def lower(d: FakeDevice) -> None:
        d.sm_clock = 1700  # 14% below the highest this measurement saw

    assert window_between(g, lower) == \
        "GPU 0 throttled: power cap, SM clock 1700 MHz (highest 1980)"
    g.start()  # a new measurement: its own highest clock
    assert window_between(g, lambda d: None) is None


def test_spoiled_windows_are_measured_again_and_the_reason_reaches_the_report() -> None:
    # the guard reads at the edges of measured windows: a power cap, a neighbour, clean, a
    # power cap again (kept: the re-measure budget is spent), clean
    fake = ScriptedNvml([CLEAN, POWER, CLEAN, NEIGHBOUR, CLEAN, CLEAN, CLEAN, POWER,
                         CLEAN, CLEAN])
    cfg = MeasureConfig(windows=3, window_s=1.0, warmup_window_s=0.1, warmup_span=1,
                        max_remeasure=2)
    meter = Meter(cfg, clock=FakeClock(), load_probe=NullProbe(), gpu_probe=guard(fake))
    m = meter.measure(Source())
    assert fake.script == []
    assert m.remeasured == 2 and m.polluted_kept == 1
    capped = "GPU 0 throttled: power cap, SM clock 1900 MHz (highest 2407)"
    assert [w.gpu_spoiled for w in m.windows] == [None, capped, None]
    assert m.windows[1].polluted
    r = summarize("learner", m, 1000)
    assert r.gpu["spoiled"] == {capped: 2, "another process on GPU 0: pid 31337": 1}
    assert r.gpu["sm_clock_mhz"] == [1900, 2407]
    assert r.memory["gpu_used"] == 1200 * 2**20 + 10 * 2**20  # the largest NVML reading
    assert BenchResult.from_json(r.to_json()) == r
    assert gpu_lines(r) == [
        "CUDA timed: window edges synchronise the device, phases carry GPU time from CUDA "
        "events",
        "SM clock 1900-2407 MHz at the windows' edges",
        f"2 window(s) spoiled on the GPU ({capped}): measured again like outside CPU load",
        "1 window(s) spoiled on the GPU (another process on GPU 0: pid 31337): measured again "
        "like outside CPU load"]


def test_the_guard_is_not_looked_for_where_the_load_guard_is_off() -> None:
    meter = Meter(MeasureConfig.smoke(), clock=FakeClock(), load_probe=NullProbe())
    assert meter._gpu_probe(Source()) is None and not meter._gpu_auto


class LearnerPair(Source):
    """A source whose child process uses CUDA device 1 (a ring pair's GPU learner)."""

    cuda_device = 1


class Quiet:
    def sample(self) -> None:
        return None


def test_a_source_whose_child_uses_a_gpu_is_watched_on_that_gpu(monkeypatch) -> None:
    from pytest_perfgate.gpu import nvml as nvml_mod

    fake = FakeNvml([FakeDevice(pids=[ME]), FakeDevice(pids=[ME, 4242])])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml_mod.forget()
    try:
        meter = Meter(MeasureConfig(windows=1, max_remeasure=0), clock=FakeClock(),
                      load_probe=Quiet())  # type: ignore[arg-type]
        w = meter.window(LearnerPair(), 0.1)
        assert w.gpu_spoiled == "another process on GPU 1: pid 4242" and w.polluted
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # CUDA's device 1 is not there
        assert GpuGuard.for_index(1) is None
        assert GpuGuard.for_index(0).devices == (Target(1),)  # type: ignore[union-attr]
    finally:
        nvml_mod.forget()


def gpu_result(**memory: int) -> BenchRecord:
    phases = {"update": PhaseSummary(0.1, 0.2, 1.0, gpu_ms=2.0),
              "env": PhaseSummary(0.5, 0.8, 1.0, gpu_ms=0.52)}
    return BenchRecord(name="learner", samples=(100.0,), rate=10000.0, phases=phases,
                       memory={"peak_rss": 800 * 2**20, "processes": 1, **memory},
                       gpu={"sync": "edges"})


def test_phases_whose_cpu_wall_and_gpu_time_disagree_show_both() -> None:
    j = Judged(gpu_result(), None, Rule(threshold=0.05), "t", baseline_phases={"update": 0.1})
    assert notes([j]) == [
        "learner: peak memory 800 MiB over 1 process; cores used 0.00",
        "learner: CUDA timed: window edges synchronise the device, phases carry GPU time "
        "from CUDA events",
        "learner: phase update: CPU wall 0.1 ms, GPU 2 ms per call (its kernels run after the "
        "CPU has moved on: the GPU time is what it costs)"]
    r = gpu_result()
    diag = BenchRecord(**{**r.__dict__, "gpu": {"sync": "phases"},
                          "phases": {"x": PhaseSummary(3.0, 1.0, 0.1, gpu_ms=1.0)}})
    assert gpu_lines(diag) == [
        "CUDA synchronised at every phase exit (PERFGATE_CUDA_SYNC=phases, for diagnosis): "
        "each phase's CPU wall holds its GPU work, but the overlap of CPU and GPU is gone, so "
        "the rate is lower than the workload's own",
        "phase x: CPU wall 3 ms, GPU 1 ms per call (the CPU works or waits longer than the "
        "GPU does)"]


def test_the_failure_text_has_a_gpu_column() -> None:
    from pytest_perfgate.core.gate import Verdict

    v = Verdict(Outcome.REGRESSION, "throughput fell", ratio=0.5)
    text = explain(Judged(gpu_result(), v, Rule(threshold=0.05), "t",
                          baseline_phases={"update": 0.1, "env": 0.5}))
    lines = text.splitlines()
    at = lines.index("  phases (ms per call now vs baseline, share, cores, GPU ms per call):")
    assert lines[at + 1:at + 3] == [
        "    env                    0.5 vs      0.5    80%  1.00       0.52",
        "    update                 0.1 vs      0.1    20%  1.00          2"]


def test_gpu_memory_is_recorded_worded_exported_and_can_be_gated() -> None:
    mem = {"gpu_peak_allocated": 3 * 2**30, "gpu_peak_reserved": 4 * 2**30,
           "gpu_used": 5 * 2**30}
    r = gpu_result(**mem)
    assert gpu_memory_line(r.memory) == \
        "GPU peak memory: allocated 3072 MiB, reserved 4096 MiB, device used 5120 MiB"
    assert memory_line(r.memory) == ("peak memory 800 MiB over 1 process; GPU peak memory: "
                                     "allocated 3072 MiB, reserved 4096 MiB, device used "
                                     "5120 MiB")
    assert memory_line({"gpu_used": 2**30}) == "GPU peak memory: device used 1024 MiB"
    g = gpu_figure(r)
    assert g is not None and g.suffix == ".gpu_mem" and g.peak == 4.0 * 2**30
    assert set(g.figures) <= {k for k in r.memory if k.startswith("gpu_")}  # what it shows
    assert gpu_figure(gpu_result()) is None
    v = decide_memory(g.peak, [3.0 * 2**30] * 3, Rule(threshold=0.10),
                      what="GPU peak memory")
    assert v.outcome is Outcome.REGRESSION and v.message == (
        "GPU peak memory rose 33.3% (4096 MiB now vs 3072 MiB, the median of 3 baseline "
        "run(s)' peaks), more than the 10% memory threshold")
    from pytest_perfgate.core.results import RunRecord

    run = RunRecord("r", 1.7e9, "a" * 40, 0, None, False, "m", "f", {}, {"learner": r})
    entries = asv_entries(run, {})
    assert gpu_mem_series("learner") == "learner.gpu_mem"
    assert entries["learner.gpu_mem"]["unit"] == "bytes"
    cpu = BenchRecord(name="walk", samples=(1.0,), rate=1.0, memory={"peak_rss": 1})
    assert not any(k.endswith(".gpu_mem") for k in asv_entries(
        RunRecord("r", 1.7e9, "a" * 40, 0, None, False, "m", "f", {}, {"walk": cpu}), {}))


@pytest.mark.parametrize("fail_init", [True, False])
def test_nvml_that_cannot_answer_gives_nothing_rather_than_failing(fail_init: bool) -> None:
    fake = FakeNvml([], fail_init=fail_init)
    nv = Nvml.open(fake)
    assert (nv is None) if fail_init else (nv is not None and nv.count() == 0)


def test_the_gpu_memory_verdict_names_gpu_memory_in_every_outcome() -> None:
    rule = Rule(threshold=0.10)
    gib = float(2**30)
    assert decide_memory(gib, [], rule, what="GPU peak memory").message == (
        "no baseline run recorded GPU peak memory (runs before this version did not); this "
        "run's is recorded and becomes the baseline of later commits")
    assert decide_memory(gib, [2 * gib], rule, what="GPU peak memory").message == (
        "GPU peak memory fell 50.0% (1024 MiB now vs 2048 MiB, the median of 1 baseline "
        "run(s)' peaks)")
    assert decide_memory(gib, [gib], rule, what="GPU peak memory").message == (
        "GPU peak memory within 10% (+0.0%: 1024 MiB now vs 1024 MiB, the median of 1 "
        "baseline run(s)' peaks)")


class SideProxy:
    """An A/B side seen from the controller: windows timed by CUDA in another process."""

    def run_window(self, duration_s: float) -> RawWindow:
        return RawWindow(1000, duration_s, duration_s, gpu={"sync": "edges", "device": 1})


def test_the_controller_watches_the_device_its_sides_report(monkeypatch) -> None:
    from pytest_perfgate.gpu import nvml as nvml_mod

    fake = FakeNvml([FakeDevice(pids=[ME]), FakeDevice(pids=[ME, 4242])])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    from pytest_perfgate.gpu.fakes import FakeCuda, fake_torch

    # the controller imported the test's module, torch with it, but never initialised CUDA
    monkeypatch.setitem(sys.modules, "torch", fake_torch(FakeCuda(FakeClock(), False)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml_mod.forget()
    try:
        meter = Meter(MeasureConfig(windows=1, max_remeasure=0), clock=FakeClock(),
                      load_probe=Quiet())  # type: ignore[arg-type]
        side = SideProxy()
        first = meter.window(side, 0.1)  # tells which device: watched from the next one
        assert first.gpu_spoiled is None and first.gpu == {"sync": "edges", "device": 1}
        assert meter.window(side, 0.1).gpu_spoiled == "another process on GPU 1: pid 4242"
    finally:
        nvml_mod.forget()
