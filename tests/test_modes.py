"""The comparison modes as plain objects: history judging, A/B sides, the verdict path."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from multiprocessing import Pipe
from pathlib import Path

import pytest

from pytest_perfgate.core.gate import Outcome, Rule
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.results import BenchRecord
from pytest_perfgate.core.timing import FakeClock, PhaseRecorder
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.modes.ab.controller import PLUGIN_ROOT, ABSetupError, start_ab
from pytest_perfgate.modes.ab.remote import ENV_CALIBRATION, ENV_FD, Side, SideError, SideSpec
from pytest_perfgate.modes.ab.side import NOT_A_LOOP, NOT_CALIBRATING, ABSide
from pytest_perfgate.modes.mode import BenchCall
from pytest_perfgate.modes.place import Place
from pytest_perfgate.modes.recorded import HistoryMode
from pytest_perfgate.session.gating import GateSession
from pytest_perfgate.session.options import Options
from pytest_perfgate.session.perfgate import PerfGate


def session(tmp_path: Path, on_verdict: Callable[[Judged], None] | None = None
            ) -> GateSession:
    opts = Options(enabled=True, machine="box", results_dir=str(tmp_path / "results"),
                   windows=3, window_time=0.05)
    s = GateSession(opts, tmp_path, FakeClock(), on_verdict=on_verdict)
    s.load_probe = NullProbe()
    return s


def result(name: str = "walk", level: float = 10.0) -> BenchRecord:
    return BenchRecord(name, (level, level * 1.01, level * 0.99, level), 1e5)


def test_history_session_picks_history_mode_and_records_its_tag(tmp_path: Path) -> None:
    seen: list[Judged] = []
    s = session(tmp_path, seen.append)
    assert isinstance(s.mode, HistoryMode) and s.mode is s.history_mode
    j = s.judge(result(), "t::walk")
    assert seen == [j] == s.judged
    run = s.finish()
    assert run is not None and run.metadata["mode"] == "history"


def test_ab_runs_are_not_history_baselines(tmp_path: Path) -> None:
    s = session(tmp_path)
    s.history().record("ab-run", 1.0, {"walk": result()}, "ab")
    j = session(tmp_path).judge(result(), "t::walk")
    assert j.verdict is not None and j.verdict.outcome is Outcome.NO_BASELINE
    assert "(1 A/B run(s) of it are not used as history baselines)" in j.verdict.message
    s.history().record("hist-run", 2.0, {"walk": result()}, "history")
    j = session(tmp_path).judge(result(), "t::walk")
    assert j.baseline_commits and j.verdict is not None
    assert j.verdict.outcome is not Outcome.NO_BASELINE


def test_smoke_session_judges_nothing_and_records_nothing(tmp_path: Path) -> None:
    s = GateSession(Options(enabled=False), tmp_path, FakeClock())
    clock = s.clock
    assert isinstance(clock, FakeClock)
    gate = PerfGate(s, "t::walk", "walk")
    j = gate.measure(lambda: clock.advance(0.001), transitions=4)
    assert j.verdict is None and s.judged == [j] and gate.runs_step
    assert s.finish() is None and not (tmp_path / ".perfgate").exists()


class Steps:
    """A source whose step is counted, to see whether a side wrapped it."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.calls = 0

    def step(self) -> None:
        self.calls += 1
        self.clock.advance(0.001)

    def loop(self) -> LoopSource:
        return LoopSource(self.step, 2, PhaseRecorder(self.clock), self.clock)


def serve_with(side: ABSide, source: object, *msgs: tuple[object, ...]) -> list[tuple]:
    ctl, side.conn = Pipe(duplex=True)
    for m in (*msgs, ("window", 0.01), ("done",)):
        ctl.send(m)
    call = BenchCall("walk", "t::walk", 2, Rule())
    j = side.measure(source, call)  # type: ignore[arg-type]
    assert j.verdict is None and len(j.result.samples) == 1
    out = []
    while ctl.poll():
        out.append(ctl.recv())
    return out


def test_production_side_runs_its_step_unwrapped_and_refuses_slowdowns() -> None:
    steps = Steps()
    src = steps.loop()
    replies = serve_with(ABSide(None), src, ("slowdown", 0.05))
    assert src.step == steps.step  # no injector around a production side's step
    assert replies[0] == ("bench", "walk", 2, {"threshold": None, "unit": "env-steps/s",
                                                "extra": {}})
    assert replies[1] == ("error", NOT_CALIBRATING)
    assert NOT_CALIBRATING.startswith("this A/B side was not started for calibration")
    assert replies[2][0] == "raw"


def test_calibration_side_takes_slowdowns() -> None:
    steps = Steps()
    src = steps.loop()
    replies = serve_with(ABSide(None, calibration=True), src, ("slowdown", 0.0))
    assert src.step != steps.step  # wrapped in the injector
    assert replies[1] == ("ok", 0.0) and replies[2][0] == "raw"


def test_calibration_side_says_which_workloads_take_no_slowdown() -> None:
    class Remote:
        def run_window(self, duration_s: float) -> RawWindow:
            return RawWindow(10, duration_s, duration_s, {}, 5)

    replies = serve_with(ABSide(None, calibration=True), Remote(), ("slowdown", 0.1))
    assert replies[1] == ("error", NOT_A_LOOP)
    assert NOT_A_LOOP == ("this workload cannot take an injected slowdown: only "
                          "perfgate.measure(step, ...) steps can")


class Recording(LoopSource):
    """A source with metadata of its own, as a ring pair has (``fail``: its metadata
    raises)."""

    fail = False

    def metadata(self) -> dict[str, object]:
        if self.fail:
            raise RuntimeError("the ring's stats are gone")
        return {"ring_pair": {"learner_updates_per_s": 29.0}}


def test_a_side_answers_what_its_process_records() -> None:
    steps = Steps()
    src = Recording(steps.step, 2, PhaseRecorder(steps.clock), steps.clock)
    replies = serve_with(ABSide(None), src, ("extra",))
    assert replies[1][0] == "extra"
    assert replies[1][1]["ring_pair"] == {"learner_updates_per_s": 29.0}
    src.fail = True
    ctl, conn = Pipe(duplex=True)
    ctl.send(("extra",))
    with pytest.raises(RuntimeError, match="the ring's stats are gone"):
        ABSide(conn).measure(src, BenchCall("walk", "t::walk", 2, Rule()))
    replies = [ctl.recv() for _ in range(2)]
    assert replies[1][0] == "error" and "RuntimeError: the ring's stats are gone" in replies[1][1]


def test_side_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    a, b = Pipe(duplex=True)
    monkeypatch.setenv(ENV_FD, str(os.dup(b.fileno())))  # each side connection owns its fd
    monkeypatch.delenv(ENV_CALIBRATION, raising=False)
    s = GateSession(Options(enabled=False), tmp_path)
    assert isinstance(s.mode, ABSide) and not s.mode.calibration and not s.smoke
    assert s.mode.tag is None
    s.mode.conn.close()
    monkeypatch.setenv(ENV_FD, str(os.dup(b.fileno())))
    monkeypatch.setenv(ENV_CALIBRATION, "1")
    side = ABSide.from_env()
    assert side.calibration
    side.conn.close()
    a.close()
    b.close()


def test_side_refuses_unknown_messages() -> None:
    ctl, conn = Pipe(duplex=True)
    ctl.send(("dance",))
    with pytest.raises(SideError, match="unexpected message 'dance' from the A/B controller"):
        ABSide(conn).measure(Steps().loop(), BenchCall("walk", "t::walk", 2, Rule()))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def test_ab_setup_errors_render(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack, pytest.raises(ABSetupError) as e:
        start_ab(Place.of(tmp_path, tmp_path, tmp_path), "main", None, stack)
    assert str(e.value) == (f"--perfgate-ab main: {tmp_path} is not a git checkout; the A/B "
                            "mode checks the base revision out with git worktree")
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q",
        "--allow-empty", "-m", "base")
    with contextlib.ExitStack() as stack, pytest.raises(ABSetupError) as e:
        start_ab(Place.of(tmp_path, tmp_path, tmp_path), "HEAD", "echo building; exit 3",
                 stack)
    assert str(e.value).startswith("--perfgate-ab-setup 'echo building; exit 3' failed in the "
                                   "base worktree (exit 3):\nbuilding")
    assert len(git(tmp_path, "worktree", "list").splitlines()) == 1  # removed again


@pytest.mark.slow
def test_ab_setup_checks_the_base_out_and_removes_it(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q",
        "--allow-empty", "-m", "base")
    with contextlib.ExitStack() as stack:
        ab = start_ab(Place.of(tmp_path, tmp_path, tmp_path), "HEAD", "touch built", stack)
        assert (ab.base.cwd / "built").exists() and ab.head.cwd == tmp_path
        assert not ab.base.calibration and not ab.head.calibration  # production sides
        assert ab.base_commit == git(tmp_path, "rev-parse", "HEAD").strip()
    assert not ab.base.cwd.exists()
    assert len(git(tmp_path, "worktree", "list").splitlines()) == 1


@pytest.mark.slow
def test_only_calibration_sides_are_started_for_calibration(tmp_path: Path) -> None:
    (tmp_path / "test_env.py").write_text(
        "import os, pathlib\n"
        "def test_env():\n"
        f"    pathlib.Path('env.txt').write_text(os.environ.get({ENV_CALIBRATION!r}, '-'))\n")
    for calibration, seen in ((True, "1"), (False, "-")):
        side = Side(SideSpec("head", tmp_path, calibration=calibration), "test_env.py::test_env",
                    PLUGIN_ROOT)
        assert side.close() == 0, side.output_tail()
        side.log.close()
        assert (tmp_path / "env.txt").read_text() == seen


@pytest.mark.parametrize("value", ["abc", "1", "99999999999999999999", "²"])
def test_a_side_variable_naming_no_connection_is_no_side(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path, value: str) -> None:
    """PERFGATE_SIDE_FD inherited by a nested pytest, or set by hand (stdout's fd 1 among
    them): not a side (an INTERNALERROR, or pickles written to stdout), a warning instead;
    and a real side's children do not inherit the variable."""
    from pytest_perfgate.modes.ab.side import is_side_process, stray_side_variable

    monkeypatch.setenv(ENV_FD, value)
    assert not is_side_process() and stray_side_variable() == value
    assert ENV_FD not in os.environ
    s = GateSession(Options(enabled=False), tmp_path)
    assert not isinstance(s.mode, ABSide) and s.smoke


def test_a_stray_side_variable_is_a_warning_in_a_pytest_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
                          cwd=pytester.path, env={**os.environ, ENV_FD: "abc"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("PERFGATE_SIDE_FD='abc' names no A/B connection of this process (perfgate sets "
            "it only for the sides it starts): ignored; unset it") in proc.stdout


def test_the_baseline_shown_is_the_one_the_ratio_divides_by(tmp_path: Path) -> None:
    """A baseline run whose windows outside load mostly spoiled is left out of the level:
    the baseline figure, its commits and its run count are of the runs that set it, so
    steps/s / baseline is the ratio shown (the JSON, the text and the PNG's band use them)."""
    import dataclasses

    levels = [(10.0, 0), (10.2, 0), (13.0, 3), (9.9, 0)]  # one run spoiled: 3 of 4 windows
    for i, (level, spoiled) in enumerate(levels):
        s = session(tmp_path)
        r = dataclasses.replace(result(level=level), polluted_kept=spoiled)
        s.history().record(f"20240101T00000{i}-aa000{i}", float(i), {"walk": r}, "history")
    j = session(tmp_path).judge(result(level=20.0), "t::walk")
    v = j.verdict
    assert v is not None and v.evidence is not None and v.ratio is not None
    assert v.evidence.n_base == 3 == len(j.baseline_commits)
    assert j.baseline_rate is not None
    now = 1e6 / j.result.value  # steps/s as a measurement gives it: of the median window
    assert now / j.baseline_rate == pytest.approx(v.ratio)
    assert "against 3 baseline run(s)" in v.message


@pytest.mark.parametrize("value", ["/tmp", "/no/such/folder", "x"])
def test_a_counts_variable_outside_a_counting_worker_is_no_worker(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str) -> None:
    """PERFGATE_COUNTS_OUT inherited by a nested pytest, or set by hand: a process that
    valgrind does not run is no counting worker (it measured nothing and exited early)."""
    from pytest_perfgate.modes.counts.worker import (
        ENV_OUT,
        is_counts_side,
        stray_counts_variable,
    )

    monkeypatch.setenv(ENV_OUT, value)
    assert not is_counts_side() and stray_counts_variable() == value
    assert stray_counts_variable() is None  # said once
    s = GateSession(Options(enabled=False), tmp_path)
    assert not s.counts_side and s.smoke
