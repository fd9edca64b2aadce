"""A verdict ordinary use cannot fool: pure gate and API tests (no clock, no pytester).

End-to-end runs of the same classes, in scratch git repositories: test_verdict_e2e.py.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from pytest_perfgate.core.evidence import median_slack
from pytest_perfgate.core.gate import Outcome, Rule, evaluate
from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.history.baseline import select_baseline
from pytest_perfgate.history.decisions import (
    AcceptError,
    Decisions,
    accept,
    decisions_path,
    forget,
    load_decisions,
)
from pytest_perfgate.history.files import HistoryWarning
from pytest_perfgate.session.gating import GateSession, PerfgateUsageError, stable_root
from pytest_perfgate.session.naming import derive_name, stable_nodeid
from pytest_perfgate.session.options import Options
from pytest_perfgate.session.perfgate import PerfGate

C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40


def _run(run_id: str, commit: str, started: float, *, dirty: bool = False,
         verdict: str | None = None) -> RunRecord:
    b = BenchRecord("walk", (10.0, 10.1, 9.9, 10.0), 1e5, verdict=verdict)
    return RunRecord(run_id, started, commit, 0, "main", dirty, "box", "fp", {}, {"walk": b})


def _ancestors(commits: set[str]) -> set[str]:
    return commits & {C1, C2}  # main: C1 <- C2 <- C3 (HEAD)


# ---- 1. a run never judges its own commit; failed runs wait for a person ----------------

def test_runs_of_the_commit_under_test_never_judge_it() -> None:
    runs = [_run("a", C1, 1), _run("head1", C3, 2), _run("head-dirty", C3, 3, dirty=True)]
    got = select_baseline(runs, "walk", fingerprint="fp", head_commit=C3,
                          is_ancestor=_ancestors)
    assert [r.run_id for r, _ in got] == ["a"]
    # A dirty tree at C3 is judged by C3's clean runs (its strict ancestor), never by
    # C3's dirty runs (the same edits, or others).
    got = select_baseline(runs, "walk", fingerprint="fp", head_commit=C3, head_dirty=True,
                          is_ancestor=_ancestors)
    assert [r.run_id for r, _ in got] == ["head1", "a"]


def test_failed_runs_stay_out_until_accepted_and_forgotten_runs_stay_out() -> None:
    runs = [_run("ok", C1, 1), _run("slow", C2, 2, verdict="REGRESSION"),
            _run("wobbly", C2, 3, verdict="UNSTABLE"), _run("open", C2, 4, verdict="INCONCLUSIVE")]
    pick = lambda d: [r.run_id for r, _ in select_baseline(  # noqa: E731
        runs, "walk", fingerprint="fp", head_commit=C3, is_ancestor=_ancestors, decisions=d)]
    assert pick(None) == ["open", "ok"]
    assert pick(Decisions(accepted=frozenset({"slow"}))) == ["open", "slow", "ok"]
    assert pick(Decisions(forgotten=frozenset({"ok"}))) == ["open"]


def test_accept_and_forget_write_a_sidecar_and_say_what_they_did(tmp_path: Path) -> None:
    from pytest_perfgate.history.store import History

    h = History(tmp_path, "box")
    h.record(_run("20240101T000000-aaaaaa", C2, 1, verdict="REGRESSION"))
    msg = accept(tmp_path, None, "20240101T000000-aaaaaa")
    assert msg == ("accepted run 20240101T000000-aaaaaa on machine box: walk (REGRESSION) "
                   "now serve(s) as the baseline for later commits (undo: perfgate forget "
                   "20240101T000000-aaaaaa)")
    assert load_decisions(tmp_path, "box").accepted == {"20240101T000000-aaaaaa"}
    assert not decisions_path(tmp_path, "box").name.endswith(".json")  # asv reads *.json
    msg = forget(tmp_path, "box", "20240101T000000-aaaaaa")
    assert msg.startswith("forgot run 20240101T000000-aaaaaa on machine box: it no longer "
                          "serves as a baseline or in the run-to-run spread")
    d = load_decisions(tmp_path, "box")
    assert d.accepted == set() and d.forgotten == {"20240101T000000-aaaaaa"}
    with pytest.raises(AcceptError, match=r"^no run 'nope' in .* for any machine \(box\): the "
                       r"id is the one printed as 'recorded run RUN_ID'"):
        accept(tmp_path, None, "nope")
    with pytest.raises(AcceptError, match=r"^'\.\./x' is not a usable run id"):
        forget(tmp_path, None, "../x")
    decisions_path(tmp_path, "box").write_text("[1]")
    with pytest.warns(HistoryWarning, match=r"skipping .*decisions.pgaccept: not a perfgate "
                      r"decisions file"):
        assert load_decisions(tmp_path, "box") == Decisions()


def test_session_records_each_benchmarks_verdict(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.judge(BenchRecord("walk", (10.0, 10.0, 10.0, 10.0), 1e5), "t::walk")
    run = s.finish()
    assert run is not None and run.benchmarks["walk"].verdict == "NO BASELINE"
    assert s.record_path is not None
    stored = json.loads(s.record_path.read_text())
    assert stored["benchmarks"]["walk"]["verdict"] == "NO BASELINE"
    assert RunRecord.from_json(stored).benchmarks["walk"].verdict == "NO BASELINE"


# ---- 2. one series per name --------------------------------------------------------------

def test_default_names_are_unique_and_keep_todays_safe_names() -> None:
    assert derive_name("perf/test_x.py::test_walk[256]") == "perf.test_x.test_walk_256_"
    assert derive_name("perf/test_x.py::TestA::test_b[cpu-4]") == "perf.test_x.TestA.test_b_cpu-4_"
    assert derive_name("test_x.py::test_walk") == "test_x.test_walk"
    a, b = derive_name("t.py::f[x y]"), derive_name("t.py::f[x_y]")
    assert b == "t.f_x_y_" and a.startswith("t.f_x_y_-") and a != b
    assert derive_name("t.py::f[x y]") == a  # stable
    dotted = derive_name("t.py::f[0.5]")  # asv would split "0.5" into a tree level
    assert "." not in dotted.removeprefix("t.") and dotted != derive_name("t.py::f[0_5]")
    from pytest_perfgate.core.names import is_safe_name

    for nodeid in ["t.py::f[" + "a" * 300 + "]", "t.py::f[a..b]", "t.py::f[\x00]",
                   "t.py::f[\u00e9t\u00e9]", "-x.py::f"]:
        assert is_safe_name(derive_name(nodeid)), nodeid


def test_names_start_from_a_root_the_command_line_cannot_move(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub" / "perf").mkdir(parents=True)
    f = repo / "sub" / "perf" / "test_x.py"
    f.write_text("")
    sub = repo / "sub"
    # An ini file in a subproject keeps today's names (relative to it)...
    assert stable_root(f, sub, has_ini=True) == sub
    assert stable_nodeid("perf/test_x.py::t", f, sub) == "perf/test_x.py::t"
    # ...without one, or with the rootdir moved out of the checkout, the git top level.
    for rootdir, ini in ((sub, False), (Path("/"), False), (tmp_path, True)):
        assert stable_root(f, rootdir, has_ini=ini) == repo
    moved = "/".join(f.parts[1:]) + "::t"  # the nodeid pytest gives when rootdir is /
    assert stable_nodeid(moved, f, repo) == "sub/perf/test_x.py::t"
    outside = tmp_path / "loose" / "test_y.py"
    assert stable_root(outside, tmp_path, has_ini=False) == tmp_path  # outside git


def test_the_same_name_from_two_tests_is_an_error_naming_both(tmp_path: Path) -> None:
    s = _session(tmp_path)
    clock = s.clock
    assert isinstance(clock, FakeClock)
    step = lambda: clock.advance(0.001)  # noqa: E731
    PerfGate(s, "t.py::a", "t.a").measure(step, 1, name="walk")
    with pytest.raises(PerfgateUsageError) as e:
        PerfGate(s, "t.py::b", "t.b").measure(step, 1, name="walk")
    assert str(e.value) == ("benchmark name 'walk' is measured by two tests, t.py::a and "
                            "t.py::b: both would record into one series and judge each "
                            "other's numbers. Give one of them its own name "
                            "(measure(..., name='...')).")
    with pytest.raises(PerfgateUsageError, match="measured by two tests, t.py::a and t.py::c"):
        s.judge(BenchRecord("walk", (1.0, 1.0), 1e6), "t.py::c")  # pytest-benchmark's path


# ---- 4. thin evidence and polluted windows -------------------------------------------------

def _drifting_runs(n: int, windows: int, seed: int) -> list[list[float]]:
    """Unchanged code on a drifting machine: each run's level wanders (AR(1), ~5% sd, the
    drift of docs/design.md §1), its adjacent windows share it and differ by ~0.5%."""
    rng = random.Random(seed)
    level, out = 0.0, []
    for _ in range(n):
        level = 0.6 * level + rng.gauss(0, 0.04)
        out.append([100 * math.exp(level + rng.gauss(0, 0.005)) for _ in range(windows)])
    return out


def test_twenty_unchanged_runs_of_three_windows_give_no_regression() -> None:
    # Before: with < 4 windows the window spread stood in for run noise, and unchanged code
    # failed in 183 of 200 such sequences (10.6% of verdicts; 48 of these 50, 13.8%). Now:
    # the false-alarm rate is the alpha it promises (11 of these 950 verdicts, 1.2%; 45 of
    # 3800 over 200 sequences), and these seeded sequences pass.
    judged = regressions = 0
    for seed in range(50):
        history: list[list[float]] = []
        for current in _drifting_runs(20, 3, seed):
            if history:
                v = evaluate(current, history[-5:][::-1], Rule(), spread=history[-20:][::-1])
                judged += 1
                regressions += v.outcome is Outcome.REGRESSION
                assert seed >= 4 or v.outcome is not Outcome.REGRESSION, (seed, v.message)
                if len(history) == 1:
                    assert v.outcome is Outcome.INCONCLUSIVE and "only 1 earlier run" in v.message
            history.append(current)
    assert regressions / judged < 0.02, regressions


def test_polluted_windows_widen_the_interval() -> None:
    base = [[100 * (1 + 0.001 * i) * (1 + 0.002 * r) for i in range(8)] for r in range(5)]
    current = [101, 102, 112, 113, 101.5, 102.5, 112.5, 113.5]  # halves agree: 7% slower
    clean = evaluate(current, base, Rule())
    spoiled = evaluate(current, base, Rule(), polluted=2)  # two of those could be load
    assert clean.outcome is Outcome.REGRESSION
    assert spoiled.outcome is Outcome.INCONCLUSIVE
    assert spoiled.ratio == clean.ratio
    assert spoiled.ci is not None and clean.ci is not None
    assert spoiled.ci[0] < clean.ci[0] and spoiled.ci[1] > clean.ci[1]
    assert "for 2 window(s) spoiled by outside load and kept" in spoiled.message
    current = [100, 101, 102, 103, 112, 113, 114, 115]
    assert median_slack(current, 0) == 0.0
    assert median_slack(current, 2) == pytest.approx(math.log(114 / 101) / 2)


def test_a_run_mostly_spoiled_by_outside_load_is_inconclusive_not_a_regression() -> None:
    """Another job took one of two cores for 6 of 8 windows (re-measuring ran out): every
    spoiled window runs at half speed alike, so their spread cannot show the load. Seen on
    this project's runner: 'throughput fell 49.9% ... widened by +-43.6% for 6 window(s)
    spoiled by outside load and kept' was a REGRESSION of unchanged code."""
    base = [[100 * (1 + 0.002 * i) * (1 + 0.003 * r) for i in range(8)] for r in range(5)]
    current = [200 * (1 + 0.002 * i) for i in range(6)] + [100.5, 101]
    v = evaluate(current, base, Rule(), polluted=6)
    assert v.outcome is Outcome.INCONCLUSIVE, v.message
    assert "outside load spoiled 6 of this run's 8 windows" in v.message
    assert "not the code" in v.message
    assert evaluate(current, base, Rule(), polluted=3).outcome is Outcome.REGRESSION
    # a mostly spoiled baseline run is left out of the level; all of them: no level at all
    slow = [[200 * (1 + 0.002 * i) for i in range(8)]]
    ok = evaluate(base[0], [*slow, *base[1:]], Rule(), baseline_polluted=[8, 0, 0, 0, 0])
    assert ok.outcome is Outcome.OK and ok.evidence is not None and ok.evidence.n_base == 4
    none = evaluate(base[0], slow * 3, Rule(), baseline_polluted=[5, 4, 8])
    assert none.outcome is Outcome.INCONCLUSIVE
    assert "outside load spoiled most windows of every baseline run" in none.message


# ---- 6. measure() arguments are checked before anything runs ---------------------------------

def _session(tmp_path: Path) -> GateSession:
    opts = Options(enabled=True, machine="box", results_dir=str(tmp_path / "results"),
                   windows=3, window_time=0.05)
    s = GateSession(opts, tmp_path, FakeClock())
    s.load_probe = NullProbe()
    return s


@pytest.mark.parametrize("kwargs, message", [
    ({"extra": {"workers": 4}}, "extra key 'workers' is recorded by perfgate itself (reserved: "
     "ab_base, ab_base_commit, ab_base_samples, ab_pairs, late_windows, placement_warnings, "
     "rounds, unpinned_threads, workers): rename it, e.g. extra={'my_workers': ...}"),
    ({"extra": {1: 2}}, "extra key 1 is not a str: use str keys, e.g. extra={'num_envs': 256}"),
    ({"extra": ["a"]}, "extra=['a'] must be a dict of str keys to JSON values, e.g. "
     "extra={'num_envs': 256}"),
    ({"extra": {"f": float("nan")}}, "extra['f']=nan cannot be recorded as JSON (Out of range "
     "float values are not JSON compliant): use str, numbers, bools, None, lists and dicts"),
    ({"window_time": float("nan")}, "window_time=nan must be a finite number of seconds > 0, "
     "e.g. window_time=1.0"),
    ({"window_time": float("inf")}, "window_time=inf must be a finite number of seconds > 0, "
     "e.g. window_time=1.0"),
    ({"window_time": 0}, "window_time=0 must be a finite number of seconds > 0, e.g. "
     "window_time=1.0"),
    ({"windows": 0}, "windows=0 must be a whole number >= 1, e.g. windows=8 (4 or more let the "
     "gate see a run's own noise)"),
    ({"threshold": "10"}, "threshold='10': '10' is out of range: use a fraction between 0 and "
     "1 (exclusive), e.g. 0.05 or 5%"),
    ({"threshold": True}, "threshold=True is not a fraction: use e.g. threshold=0.05 or "
     "threshold='5%'"),
])
def test_measure_arguments_are_checked_before_measuring(tmp_path: Path, kwargs: dict,
                                                         message: str) -> None:
    calls = []
    gate = PerfGate(_session(tmp_path), "t.py::a", "t.a")
    with pytest.raises(PerfgateUsageError) as e:
        gate.measure(lambda: calls.append(1), 1, **kwargs)
    assert str(e.value) == message
    assert calls == []


def test_threshold_as_percent_string_works_like_the_flag(tmp_path: Path) -> None:
    s = _session(tmp_path)
    clock = s.clock
    assert isinstance(clock, FakeClock)
    j = PerfGate(s, "t.py::a", "t.a").measure(lambda: clock.advance(0.001), 1, threshold="5%",
                                               extra={"workers_used": 4})
    mine = {k: v for k, v in j.result.extra.items()
            if k != "unpinned_threads"}  # this machine's thread pools, if too large for it
    assert j.rule.threshold == 0.05 and mine == {"workers_used": 4}
