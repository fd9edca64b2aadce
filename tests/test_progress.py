"""Progress of long measurements: the observer's events (fake clock, scripted sources) and
their rendering on a fake status line and on a stream, terminal or log."""

from __future__ import annotations

import io
import itertools

import pytest
from helpers import FakeStatus, Recorder

from pytest_perfgate.core.load import LoadSample, NullProbe
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.metric import figure
from pytest_perfgate.core.progress import (
    LiveProgress,
    Progress,
    StreamStatus,
    stream_progress,
    verdict_summary,
)
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow


class Scripted:
    """A WindowSource whose windows take exactly what they are asked on a fake clock and
    complete ``per_s`` transitions per second (one rate per window, then the last)."""

    def __init__(self, clock: FakeClock, rates: list[float]) -> None:
        self.clock, self.rates = clock, list(rates)

    def run_window(self, duration_s: float) -> RawWindow:
        r = self.rates.pop(0) if len(self.rates) > 1 else self.rates[0]
        self.clock.advance(duration_s)
        return RawWindow(int(r * duration_s), duration_s, duration_s)


def test_meter_reports_warmup_then_each_window():
    clock, rec = FakeClock(), Recorder()
    cfg = MeasureConfig(windows=3, window_s=0.5, warmup_window_s=0.25, warmup_span=1,
                        stability_tol=0.05)
    src = Scripted(clock, [1000, 2000, 2000, 4000, 4000, 4000])
    m = Meter(cfg, clock=clock, load_probe=NullProbe(), progress=rec).measure(src)
    assert rec.events == [
        ("warmup_started", ""),
        ("warmup_ended", True, 0.75, ""),  # 1000 -> 2000 unsteady, 2000 -> 2000 steady
        ("window", 1, 3, 4000.0, ""), ("window", 2, 3, 4000.0, ""), ("window", 3, 3, 4000.0, ""),
    ]
    assert m.steady and m.warmup_windows == 3  # the observer changed nothing


def test_meter_reports_an_unsteady_warmup():
    clock, rec = FakeClock(), Recorder()
    cfg = MeasureConfig(windows=1, window_s=0.1, warmup_window_s=0.5, warmup_span=1,
                        warmup_max_s=1.0, stability_tol=0.01)
    Meter(cfg, clock=clock, load_probe=NullProbe(), progress=rec).measure(
        Scripted(clock, [100, 200, 400, 800]))
    assert rec.events[:2] == [("warmup_started", ""), ("warmup_ended", False, 1.0, "")]


class Neighbour:
    """A load probe on a 2-CPU machine whose other work runs as each window scripts it: the
    scripted source adds the ticks of its own core plus the neighbour's to the counters."""

    def __init__(self) -> None:
        self.busy = self.total = 0

    def sample(self) -> LoadSample:
        return LoadSample(self.busy, self.total, 2)

    def ran(self, own_cores: float, other_cores: float) -> None:
        self.total += 200
        self.busy += round(100 * (own_cores + other_cores))


class Loaded(Scripted):
    """Scripted windows with a neighbour busy for ``others[i]`` cores during window i."""

    def __init__(self, clock: FakeClock, rates: list[float], probe: Neighbour,
                 others: list[float]) -> None:
        super().__init__(clock, rates)
        self.probe, self.others = probe, list(others)

    def run_window(self, duration_s: float) -> RawWindow:
        raw = super().run_window(duration_s)
        self.probe.ran(1.0, self.others.pop(0) if self.others else 0.0)
        return raw


def test_meter_reports_a_window_measured_again():
    clock, rec, probe = FakeClock(), Recorder(), Neighbour()
    cfg = MeasureConfig(windows=2, window_s=0.5, warmup_window_s=0.25, warmup_span=1,
                        stability_tol=1.0, load_limit=0.5)
    # two warm-up windows, then measured window 1 quiet, window 2 beside 1.2 busy cores,
    # its re-measurement quiet
    m = Meter(cfg, clock=clock, load_probe=probe, progress=rec).measure(
        Loaded(clock, [100], probe, [0, 0, 0, 1.2, 0]))
    assert [e for e in rec.events if e[0] in ("window", "redone")] == [
        ("window", 1, 2, 100.0, ""), ("redone", 2, 2, 1.2), ("window", 2, 2, 100.0, "")]
    assert m.remeasured == 1


def test_meter_without_observer_is_the_null_one():
    assert type(Meter(load_probe=NullProbe()).progress) is Progress


def test_ab_interleave_reports_each_turn_for_both_sides():
    from pytest_perfgate.modes.ab import interleave

    clock, rec = FakeClock(), Recorder()
    interleave(Scripted(clock, [100]), Scripted(clock, [50]), 2, 0.1, rec)
    assert rec.events == [("window", 1, 2, 100.0, "base"), ("window", 1, 2, 50.0, "head"),
                          ("window", 2, 2, 100.0, "base"), ("window", 2, 2, 50.0, "head")]


def _drive(p: Progress, clock: FakeClock) -> None:
    """A history-mode benchmark, then an A/B one, 1 s of fake time per event."""
    p.started("perf.walk")
    p.warmup_started()
    clock.advance(1.0)
    p.warmup_ended(True, 1.0)
    for k in (1, 2):
        clock.advance(1.0)
        p.window_done(k, 2, 653_210.0)
    p.finished("perf.walk", "653k steps/s, OK")
    p.started("perf.ab")
    clock.advance(2.0)
    p.warmup_ended(False, 2.0, "head")
    p.window_done(1, 96, 1500.0, "base")
    p.window_done(1, 96, 1_499_000.0, "head")
    p.finished("perf.ab", "1.50M steps/s, REGRESSION")


def test_live_progress_on_a_terminal_rewrites_one_status_per_event():
    clock, out = FakeClock(), FakeStatus(live=True)
    _drive(LiveProgress(out, clock), clock)
    assert out.shown == [
        "perfgate: perf.walk: starting (0.0 s)",
        "perfgate: perf.walk: warm-up (0.0 s)",
        "perfgate: perf.walk: warm-up done in 1.0 s, steady (1.0 s)",
        "perfgate: perf.walk: window 1/2 653k steps/s (2.0 s)",
        "perfgate: perf.walk: window 2/2 653k steps/s (3.0 s)",
        "perfgate: perf.ab: starting (0.0 s)",
        "perfgate: perf.ab: head warm-up done in 2.0 s, NOT steady (2.0 s)",
        "perfgate: perf.ab: turn 1/96 base 1.50k steps/s (2.0 s)",
        "perfgate: perf.ab: turn 1/96 base 1.50k head 1.50M steps/s (2.0 s)",
    ]
    assert out.done_lines == ["perfgate: perf.walk: 653k steps/s, OK (3.0 s)",
                              "perfgate: perf.ab: 1.50M steps/s, REGRESSION (2.0 s)"]


def test_live_progress_says_when_a_window_is_measured_again():
    clock, out = FakeClock(), FakeStatus(live=True)
    p = LiveProgress(out, clock)
    p.started("perf.walk")
    clock.advance(2.0)
    p.window_redone(3, 8, 1.25)
    assert out.shown[-1] == "perfgate: perf.walk: window 3/8 again: 1.2 cores of other load (2.0 s)"


def test_live_progress_of_a_sweep_shows_the_latest_configuration():
    clock, out = FakeClock(), FakeStatus(live=True)
    p = LiveProgress(out, clock, "perfgate sweep")
    p.started("batch sweep")
    p.window_done(1, 4, 2000.0, "256 pool")
    p.window_done(1, 4, 3000.0, "512 pool")
    assert out.shown[-2:] == [
        "perfgate sweep: batch sweep: turn 1/4 256 pool 2.00k steps/s (0.0 s)",
        "perfgate sweep: batch sweep: turn 1/4 512 pool 3.00k steps/s (0.0 s)"]


def test_live_progress_in_a_log_writes_only_the_final_lines():
    clock, out = FakeClock(), FakeStatus(live=False)
    _drive(LiveProgress(out, clock), clock)
    assert out.shown == []
    assert out.done_lines == ["perfgate: perf.walk: 653k steps/s, OK (3.0 s)",
                              "perfgate: perf.ab: 1.50M steps/s, REGRESSION (2.0 s)"]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stream_progress_on_a_terminal_rewrites_in_place():
    clock, err = FakeClock(), Tty()
    _drive(stream_progress(err, "perfgate sweep", clock), clock)
    text = err.getvalue()
    lines = text.split("\n")
    assert lines[-1] == ""  # the last final line is ended: the next print starts clean
    assert len(lines) == 3  # two final lines, each after its rewritten statuses
    first = lines[0].split("\r")
    assert first[1] == "perfgate sweep: perf.walk: starting (0.0 s)"
    assert first[-1].rstrip() == "perfgate sweep: perf.walk: 653k steps/s, OK (3.0 s)"
    # a shorter status blanks what the longer one before it left on screen
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(first))


def test_stream_progress_in_a_log_is_one_line_per_benchmark():
    clock, err = FakeClock(), io.StringIO()  # not a terminal: CI logs, pipes
    _drive(stream_progress(err, "perfgate calibrate", clock), clock)
    assert err.getvalue() == ("perfgate calibrate: perf.walk: 653k steps/s, OK (3.0 s)\n"
                              "perfgate calibrate: perf.ab: 1.50M steps/s, REGRESSION (2.0 s)\n")


def test_stream_status_blanks_a_longer_previous_status():
    out = io.StringIO()
    s = StreamStatus(out, tty=True)
    s.show("abcdef")
    s.show("xy")
    s.done("z")
    assert out.getvalue() == "\rabcdef\rxy    \rz     \n"


@pytest.mark.parametrize("value, text", [
    (0.0123, "0.0123"), (0.0, "0"), (42.0, "42.0"), (999.4, "999"), (999.96, "1.00k"),
    (1500.0, "1.50k"), (16_000.0, "16.0k"), (653_210.0, "653k"), (999_960.0, "1.00M"),
    (2_345_678.0, "2.35M"), (-1500.0, "-1.50k"), (3.2e9, "3.20G"), (None, "-"),
    (float("nan"), "-"), (float("inf"), "-")])
def test_figure(value, text):
    assert figure(value) == text


def test_figure_with_more_digits():
    assert figure(4_704_321.0, 1) == "4.704M" and figure(12_346.0, 1) == "12.35k"


def test_verdict_summary():
    from pytest_perfgate.core.gate import Outcome, Verdict

    assert verdict_summary(1500.0, None) == "1.50k steps/s"
    assert verdict_summary(1500.0, Verdict(Outcome.NO_BASELINE, "x")) == \
        "1.50k steps/s, NO BASELINE"
    assert verdict_summary(1500.0, Verdict(Outcome.REGRESSION, "x", ratio=0.5312)) == \
        "1.50k steps/s, REGRESSION, ratio 0.531"
