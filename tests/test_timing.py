"""Phase recording and the measurement loop, driven by a fake clock (exact, instant)."""

from __future__ import annotations

import os
import time

import pytest

from pytest_perfgate.core.load import LoadSample, NullProbe, ProcStatProbe
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.measure import MeasureConfig, MeasureError, Meter, is_steady
from pytest_perfgate.core.timing import FakeClock, PhaseRecorder, activate, phase
from pytest_perfgate.core.window import RawWindow


def test_phase_accumulates_wall_and_cpu() -> None:
    clock = FakeClock()
    rec = PhaseRecorder(clock)
    for _ in range(3):
        with rec.phase("physics"):
            clock.advance(0.002, cpu_s=0.004)  # two cores busy
        with rec.phase("observe"):
            clock.advance(0.001)
    got = rec.take()
    assert got["physics"].calls == 3
    assert got["physics"].ms_per_call == pytest.approx(2.0)
    assert got["physics"].cores == pytest.approx(2.0)
    assert got["observe"].cores == pytest.approx(1.0)
    assert rec.take() == {}


def test_module_phase_reports_to_active_recorder_only() -> None:
    clock = FakeClock()
    rec = PhaseRecorder(clock)
    with phase("x"):  # no recorder active: a no-op
        clock.advance(1)
    with activate(rec):
        with phase("x"):
            clock.advance(0.5)
    assert rec.take()["x"].wall_ns == 500_000_000


@pytest.mark.parametrize("name", ["", "a\x00b", "env/step", "..", " lead", "x" * 129, 7, None])
def test_a_phase_name_asv_cannot_take_is_refused_when_the_phase_is_entered(name: object) -> None:
    """Not after measuring, when the run is written: the name becomes an asv series."""
    rule = ("is not a usable phase name (it becomes the asv series "
            "<benchmark>.phase.<name>_ms): use 1-128 letters, digits, '.', '_', '+', '@' or "
            "'-', starting with a letter, digit or '_', without '..', e.g. phase(\"physics\") "
            "or phase(\"policy.forward\")")
    with pytest.raises(ValueError) as exc:
        PhaseRecorder().phase(name)  # type: ignore[arg-type]
    assert str(exc.value) == f"phase({name!r}) {rule}"
    with pytest.raises(ValueError) as exc:  # no recorder active: refused all the same
        phase(name)  # type: ignore[arg-type]
    assert str(exc.value) == f"phase({name!r}) {rule}"
    with pytest.raises(ValueError), activate(PhaseRecorder()):
        phase(name)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PhaseRecorder().phase([name])  # type: ignore[arg-type]  # unhashable: same error


def test_usable_phase_names_are_accepted_and_checked_once() -> None:
    from pytest_perfgate.core import timing

    rec = PhaseRecorder()
    for name in ("physics", "policy.forward", "env-step_2", "a+b@c"):
        assert rec.phase(name) is rec.phase(name)
        assert name in timing._CHECKED


def make_source(clock: FakeClock, step_s: list[float], transitions: int = 10) -> LoopSource:
    it = iter(step_s)
    last = [step_s[-1]]

    def step() -> None:
        dt = next(it, last[0])
        with phase("physics"):
            clock.advance(dt * 0.8)
        clock.advance(dt * 0.2)

    return LoopSource(step, transitions, clock=clock)


def test_loop_window_counts_calls_and_phases() -> None:
    clock = FakeClock()
    src = make_source(clock, [0.01])
    w = src.run_window(0.1)
    assert w.calls == 10 and w.transitions == 100
    assert w.wall_s == pytest.approx(0.1)
    assert w.phases["physics"].calls == 10
    assert w.phases["physics"].wall_ns == pytest.approx(0.08e9)


def test_warmup_waits_for_steady_state() -> None:
    clock = FakeClock()
    # slow at first (JIT, caches), speeding up 10% a call, then steady at 10 ms/step
    costs = [max(0.01, 0.05 * 0.9 ** i) for i in range(40)]
    src = make_source(clock, costs)
    cfg = MeasureConfig(windows=6, window_s=0.2, warmup_window_s=0.1, warmup_span=2,
                        warmup_max_s=5.0, stability_tol=0.1)
    m = Meter(cfg, clock=clock, load_probe=NullProbe()).measure(src)
    assert m.steady
    assert m.warmup_windows > 4
    assert m.warmup_s >= 0.5
    assert len(m.windows) == 6
    assert m.steps_per_s == pytest.approx(1000)
    assert m.samples == pytest.approx([1000.0] * 6)  # s per million steps


def test_never_steady_is_reported() -> None:
    clock = FakeClock()
    src = make_source(clock, [0.001 * (1.3 ** i) for i in range(60)])
    cfg = MeasureConfig(windows=2, window_s=0.1, warmup_window_s=0.05, warmup_max_s=1.0)
    m = Meter(cfg, clock=clock, load_probe=NullProbe()).measure(src)
    assert not m.steady and m.warmup_s >= 1.0


@pytest.mark.parametrize(("other", "cause"), [
    (1.5, "while other work on this machine kept 1.5 core(s) busy (outside load, seen by the "
          "load guard): the cause is that load, not the code; run again when the machine is "
          "quiet, or compare with --perfgate-ab BASE_REV"),
    (0.2, "with no outside load seen: the workload's own speed kept changing; raise "
          "--perfgate-warmup-max, and if the step is yours, make it reach a steady state"),
])
def test_an_unsteady_warm_up_names_outside_load_when_the_guard_saw_it(other: float,
                                                                      cause: str) -> None:
    """UNSTABLE's advice fits its cause: a user of a shipped suite cannot change its step,
    and raising the warm-up does not help while a neighbour comes and goes."""
    from pytest_perfgate.core.gate import Rule, evaluate
    from pytest_perfgate.core.judged import summarize

    clock = FakeClock()
    src = make_source(clock, [0.001 * (1.3 ** i) for i in range(60)])
    cfg = MeasureConfig(windows=2, window_s=0.1, warmup_window_s=0.05, warmup_max_s=1.0,
                        load_limit=0.5)
    m = Meter(cfg, clock=clock, load_probe=ScriptedProbe([other])).measure(src)
    assert not m.steady
    assert m.warmup_load == (pytest.approx(other) if other > 0.5 else None)
    r = summarize("walk", m, 1)
    assert r.warmup_load == m.warmup_load
    v = evaluate(r.samples, [r.samples], Rule(), steady=r.steady, warmup_load=r.warmup_load)
    assert v.outcome.value == "UNSTABLE" and cause in v.message


def test_unstable_names_load_the_guard_saw_after_the_warm_up() -> None:
    """A neighbour quiet during warm-up that then spoils the measured windows: UNSTABLE says
    so (the user met "no outside load seen" above "8 polluted window(s) kept")."""
    from pytest_perfgate.core.gate import Rule, evaluate
    from pytest_perfgate.core.judged import summarize

    clock = FakeClock()
    src = make_source(clock, [0.001 * (1.3 ** i) for i in range(80)])
    cfg = MeasureConfig(windows=3, window_s=0.1, warmup_window_s=0.05, warmup_max_s=1.0,
                        load_limit=0.5, max_remeasure=2)
    # the warm-up is probed once (quiet: 0.0); every measured window then sees 1.5 cores
    m = Meter(cfg, clock=clock, load_probe=ScriptedProbe([0.0] + [1.5] * 10)).measure(src)
    assert not m.steady and m.warmup_load is None and m.polluted_kept + m.remeasured == 5
    r = summarize("walk", m, 1)
    v = evaluate(r.samples, [r.samples], Rule(), steady=r.steady, warmup_load=r.warmup_load,
                 load_windows=r.polluted_kept + r.remeasured)
    assert v.outcome.value == "UNSTABLE"
    assert "the load guard then saw outside load spoil 5 of the windows measured after it" \
        in v.message and "run again when the machine is quiet" in v.message
    assert "no outside load seen" not in v.message


def test_is_steady_rule() -> None:
    assert not is_steady([1, 1, 1], span=2, tol=0.1)
    assert is_steady([5, 1, 1.05, 1.0, 1.04], span=2, tol=0.1)
    assert not is_steady([1, 1, 2, 2], span=2, tol=0.1)


class ScriptedProbe:
    """Outside load scripted per window: busy cores beyond our own."""

    def __init__(self, other: list[float], ncpu: int = 2) -> None:
        self.other = other
        self.ticks = 0
        self.busy = 0
        self.i = 0
        self.ncpu = ncpu
        self.half = False

    def sample(self) -> LoadSample:
        if self.half:  # end of a window: 1 s of 100 ticks/cpu elapsed, ours is 1 core
            self.ticks += 100 * self.ncpu
            load = 1.0 + (self.other[self.i] if self.i < len(self.other) else 0.0)
            self.busy += int(100 * load)
            self.i += 1
        self.half = not self.half
        return LoadSample(self.busy, self.ticks, self.ncpu)


class ConstSource:
    def run_window(self, duration_s: float) -> RawWindow:
        return RawWindow(1000, duration_s, duration_s)


def test_polluted_windows_are_remeasured_then_kept() -> None:
    cfg = MeasureConfig(windows=3, window_s=1.0, warmup_window_s=0.1, warmup_span=1,
                        load_limit=0.5, max_remeasure=2)
    # the warm-up is probed once, across all its windows (0.0: quiet); measured windows:
    # 1.0 (polluted) x3, then clean
    m = Meter(cfg, clock=FakeClock(),
              load_probe=ScriptedProbe([0.0, 1.0, 1.0, 1.0, 0.0, 0.0]))
    # FakeClock does not move for ConstSource, so warm-up ends on its first check
    res = m.measure(ConstSource())
    assert res.remeasured == 2
    assert res.polluted_kept == 1
    assert [w.polluted for w in res.windows] == [True, False, False]
    assert res.windows[1].other_load == pytest.approx(0.0)


class SidesProbe:
    """1 s windows of 100 ticks per CPU, two busy cores in each, all of them our own
    processes' (``ours``: the CPU seconds our tree used per window; None: unknown)."""

    def __init__(self, ours: float | None) -> None:
        self.ours, self.n = ours, 0

    def sample(self) -> LoadSample:
        self.n += 1
        done = self.n // 2  # windows completed at this sample
        return LoadSample(200 * done, 200 * done, 2,
                          None if self.ours is None else self.ours * done)


class SnapshotSource:
    """Two side processes that count only 0.4 CPU seconds between their snapshots: the rest
    of their work falls outside the window's edges (answering the snapshot after a step)."""

    def run_window(self, duration_s: float) -> RawWindow:
        return RawWindow(1000, duration_s, 0.4 * duration_s, streams=2)


@pytest.mark.parametrize(("ours", "polluted", "other"), [(2.0, False, 0.0), (None, True, 1.6)])
def test_our_own_processes_outside_the_window_are_not_outside_load(
        ours: float | None, polluted: bool, other: float) -> None:
    cfg = MeasureConfig(windows=1, window_s=1.0, warmup_window_s=0.1, warmup_span=1,
                        load_limit=0.5)
    w = Meter(cfg, clock=FakeClock(), load_probe=SidesProbe(ours)).window(SnapshotSource(), 1.0)
    assert w.polluted is polluted and w.other_load == pytest.approx(other)


def test_our_cores_need_both_samples_and_elapsed_ticks() -> None:
    a, b = LoadSample(0, 0, 2, 1.0), LoadSample(100, 2 * os.sysconf("SC_CLK_TCK"), 2, 2.5)
    assert LoadSample.our_cores(a, b) == pytest.approx(1.5)  # 1.5 CPU s in 1 s
    assert LoadSample.our_cores(a, LoadSample(100, 200, 2)) is None
    assert LoadSample.our_cores(b, b) is None


@pytest.mark.timing  # a real child process burns CPU
def test_the_probe_counts_the_cpu_of_our_child_processes() -> None:
    import subprocess
    import sys

    probe = ProcStatProbe()
    before = probe.sample()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.5: pass\n"
                              "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        after = probe.sample()
        while (after is not None and before is not None and after.ours_s is not None
               and before.ours_s is not None and after.ours_s - before.ours_s < 0.5
               and time.monotonic() < deadline):
            time.sleep(0.05)
            after = probe.sample()
    finally:
        child.communicate(b"", timeout=60)
    assert before is not None and after is not None
    assert before.ours_s is not None and after.ours_s is not None
    assert after.ours_s - before.ours_s >= 0.5  # the live child's CPU, read before it ended


def test_without_children_files_psutil_counts_our_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from pytest_perfgate.core import load

    def no_files(pid: int) -> list[int]:
        raise FileNotFoundError(f"/proc/{pid}/task/{pid}/children")

    monkeypatch.setattr(load, "_children", no_files)
    t = os.times()
    got = load._our_cpu_s()
    assert got is not None and got >= t.user + t.system - 0.05
    monkeypatch.setitem(sys.modules, "psutil", None)  # not installed either
    assert load._our_cpu_s() is None


def test_proc_stat_probe(tmp_path) -> None:
    f = tmp_path / "stat"
    f.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")
    s = ProcStatProbe(str(f)).sample()
    assert s is not None and s.busy == 150 and s.total == 1000
    f.write_text("garbage\n")
    assert ProcStatProbe(str(f)).sample() is None
    assert ProcStatProbe(str(tmp_path / "missing")).sample() is None


def test_loop_source_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"transitions=0: pass the number of env-steps"):
        LoopSource(lambda: None, 0)
    with pytest.raises(TypeError, match="is not callable"):
        LoopSource(42, 1)  # type: ignore[arg-type]


def test_step_slower_than_warmup_budget_still_gets_a_stability_check() -> None:
    clock = FakeClock()
    src = make_source(clock, [2.0])  # 2 s per call, warm-up budget 1 s
    cfg = MeasureConfig(windows=2, window_s=0.1, warmup_window_s=0.1, warmup_span=2,
                        warmup_max_s=1.0)
    m = Meter(cfg, clock=clock, load_probe=NullProbe()).measure(src)
    assert m.steady and m.warmup_windows == 4


class SlowStepSource:
    """Completes a step only in windows of at least ``step_s``, like a worker group whose
    step is slower than the window (or that the scheduler did not run meanwhile)."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.asked: list[float] = []

    def run_window(self, duration_s: float) -> RawWindow:
        self.asked.append(duration_s)
        n = int(duration_s // self.step_s)
        return RawWindow(n * 4, duration_s, duration_s, calls=n)


def test_window_without_a_completed_step_is_measured_again_longer() -> None:
    cfg = MeasureConfig(windows=2, window_s=0.01, warmup_window_s=0.01, warmup_span=1,
                        warmup_max_s=0.0, stability_tol=float("inf"))
    src = SlowStepSource(0.035)
    m = Meter(cfg, clock=FakeClock(), load_probe=NullProbe()).measure(src)
    assert src.asked[:3] == [0.01, 0.02, 0.04]  # doubled until a step completed
    assert all(w.transitions > 0 for w in m.windows)
    assert m.steps_per_s == pytest.approx(4 / 0.04)


def test_a_source_that_never_completes_a_step_is_an_error_naming_the_fix() -> None:
    cfg = MeasureConfig(windows=1, window_s=0.5, warmup_window_s=0.5, warmup_span=1)
    with pytest.raises(MeasureError) as e:
        Meter(cfg, clock=FakeClock(), load_probe=NullProbe()).measure(SlowStepSource(1e9))
    assert str(e.value) == (
        "the workload completed no env-step in windows of up to 32 s: its step is slower "
        "than that, or it never ran; pass a larger window_time= (or --perfgate-window-time) "
        "or check that the step returns")


def test_library_code_imports_phase_from_the_documented_path() -> None:
    import pytest_perfgate

    assert pytest_perfgate.phase is phase
    from pytest_perfgate import PhaseRecorder  # every lazy name resolves

    assert PhaseRecorder.__module__ == "pytest_perfgate.core.timing"
    for name in pytest_perfgate.__all__:
        assert getattr(pytest_perfgate, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pytest_perfgate.nope  # noqa: B018


class CountingSource:
    """Counts the steps (``step_s`` apart) completed inside each window on the fake clock, as
    a worker group or a ring pair does: a window's count moves by one step with where its
    edges fall. ``coarse`` says so to the Meter through ``quantization``."""

    def __init__(self, clock: FakeClock, step_s: float, coarse: bool = True) -> None:
        import random

        rng = random.Random(7)  # steps take 0.5-1.5x step_s, like a real loop's
        self.clock, self.asked, self.ends = clock, [], [0.0]
        self.next_gap = lambda: step_s * rng.uniform(0.5, 1.5)
        if coarse:
            self.quantization = lambda raw: 1 / raw.calls if raw.calls else 1.0

    def run_window(self, duration_s: float) -> RawWindow:
        self.asked.append(duration_s)
        t0 = self.clock.wall_ns() / 1e9
        self.clock.advance(duration_s)
        while self.ends[-1] < t0 + duration_s:
            self.ends.append(self.ends[-1] + self.next_gap())
        n = sum(t0 <= t < t0 + duration_s for t in self.ends[1:])
        return RawWindow(n * 10, duration_s, duration_s, calls=n)


def test_coarse_source_windows_widen_until_one_step_is_small() -> None:
    """0.1 s steps in 0.25 s windows: 2 or 3 steps per window, +-20% by the count alone, so
    the 10% stability rule can never hold. Widened to >= 20 steps per window it does."""
    cfg = MeasureConfig(windows=3, window_s=1.0, warmup_window_s=0.25, warmup_span=2,
                        warmup_max_s=5.0)
    clock = FakeClock()
    src = CountingSource(clock, 0.1)
    m = Meter(cfg, clock=clock, load_probe=NullProbe()).measure(src)
    assert m.steady
    assert src.asked[0] == 0.25 and min(src.asked[1:]) >= 2.0 - 1e-9  # 20 steps of 0.1 s
    assert all(w.calls >= 19 for w in m.windows)
    assert m.steps_per_s == pytest.approx(100, rel=0.06)


def test_a_source_without_quantization_keeps_its_window_lengths() -> None:
    cfg = MeasureConfig(windows=3, window_s=1.0, warmup_window_s=0.25, warmup_span=2,
                        warmup_max_s=5.0)
    clock = FakeClock()
    src = CountingSource(clock, 0.1, coarse=False)
    m = Meter(cfg, clock=clock, load_probe=NullProbe()).measure(src)
    assert set(src.asked) == {0.25, 1.0}
    assert all(w.calls <= 15 for w in m.windows)


def test_widening_is_capped_and_off_in_smoke_mode() -> None:
    clock = FakeClock()
    src = CountingSource(clock, 10.0)  # a step far longer than any window
    cfg = MeasureConfig(windows=1, window_s=1.0, warmup_window_s=0.25, warmup_span=1,
                        warmup_max_s=0.0, stability_tol=float("inf"))
    Meter(cfg, clock=clock, load_probe=NullProbe()).measure(src)
    assert max(src.asked) <= 64 * 16  # completed_window's doubling x the stretch cap
    smoke_clock = FakeClock()
    smoke = CountingSource(smoke_clock, 0.001)
    Meter(MeasureConfig.smoke(), clock=smoke_clock, load_probe=NullProbe()).measure(smoke)
    assert set(smoke.asked) <= {0.005, 0.01}
