"""The status line names why a GPU-spoiled window is measured again (fake clock, fake
status line, the scripted fake NVML of tests/gpu_fakes.py)."""

from __future__ import annotations

from gpu_fakes import CLEAN, POWER, ScriptedNvml, Source, guard
from helpers import FakeStatus

from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.progress import NULL_PROGRESS, LiveProgress
from pytest_perfgate.core.timing import FakeClock

CAPPED = "GPU 0 throttled: power cap, SM clock 1900 MHz (highest 2407)"


def test_the_status_line_names_the_gpu_reason() -> None:
    clock, out = FakeClock(), FakeStatus(live=True)
    p = LiveProgress(out, clock)
    p.started("perf.learner")
    clock.advance(2.0)
    p.window_spoiled(2, 8, CAPPED)
    assert out.shown[-1] == ("perfgate: perf.learner: window 2/8 again: GPU 0 throttled: "
                             "power cap, SM clock 1900 MHz (highest 2407) (2.0 s)")
    NULL_PROGRESS.window_spoiled(2, 8, CAPPED)  # the null observer ignores it


def test_a_log_gets_no_status_for_it() -> None:
    out = FakeStatus(live=False)
    LiveProgress(out, FakeClock()).window_spoiled(1, 8, CAPPED)
    assert out.shown == [] and out.done_lines == []


def test_the_meter_reports_a_gpu_spoiled_window_on_the_status_line() -> None:
    clock, out = FakeClock(), FakeStatus(live=True)
    fake = ScriptedNvml([CLEAN, POWER, CLEAN, CLEAN, CLEAN, CLEAN])
    cfg = MeasureConfig(windows=2, window_s=1.0, warmup_window_s=0.1, warmup_span=1)
    meter = Meter(cfg, clock=clock, load_probe=NullProbe(), gpu_probe=guard(fake),
                  progress=LiveProgress(out, clock))
    meter.measure(Source())
    assert any(f": window 1/2 again: {CAPPED} (" in line for line in out.shown), out.shown
