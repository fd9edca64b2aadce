"""The verdict-quality study's logic on scripted fake sources: no real timing, instant."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import CFG, FakeSide, Machine, study

from pytest_perfgate.cli import main
from pytest_perfgate.core.evidence import paired_evidence
from pytest_perfgate.core.gate import Outcome, Rule, decide
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.study import analysis as ana
from pytest_perfgate.study import findings, studyfile, tables
from pytest_perfgate.study import trials as cal


def test_study_counts_and_verifies_injected_slowdowns() -> None:
    trials, head = study(CFG)
    assert [t.index for t in trials] == list(range(24))
    assert sorted(t.slowdown for t in trials) == sorted(CFG.plan())
    assert [t.slowdown for t in trials] != sorted(t.slowdown for t in trials)  # shuffled
    assert head.injected[-1] == 0.0  # left clean
    rep = ana.analyse(trials, Rule(threshold=0.02, alpha=0.01))
    assert rep.false_alarms.k == 0 and rep.false_alarms.n == 12
    ten = rep.row(0.10)
    assert ten is not None and ten.called.k == 6
    m, lo, hi = ten.measured  # type: ignore[misc]
    assert 0.09 < m < 0.11 and lo < 0.10 < hi
    aa = rep.row(0.0)
    assert aa is not None and abs(aa.measured[0]) < 0.01  # type: ignore[index]
    # 12 turns x ~0.1 s plus the warm-up check, per side
    assert 1.2 < rep.seconds < 1.2 + 0.6


def test_drift_cancels_in_ab_but_makes_history_inconclusive() -> None:
    trials, _ = study(CFG)
    rule = Rule(threshold=0.02, alpha=0.01)
    hist = ana.analyse_history(trials, rule, CFG.baseline_runs)
    judged = sum(r.called.n for r in hist.rows)
    assert judged == len(trials) - CFG.baseline_runs  # the first runs only fill the history
    inconclusive = sum(r.inconclusive.k for r in hist.rows)
    assert inconclusive >= judged * 0.8  # 1.5x drift vs a 2% threshold: it must not guess
    assert ana.analyse(trials, rule).false_alarms.k == 0  # the paired turns cancel it


def _turns(diffs: list[float]) -> tuple[list[float], list[float]]:
    """Base and head per-turn times whose log ratios are ``diffs``."""
    base = [50.0 + i % 7 for i in range(len(diffs))]
    return base, [b * math.exp(d) for b, d in zip(base, diffs, strict=True)]


def _verdict(diffs: list[float], est: str, rule: Rule) -> Outcome:
    return decide(ana.estimator_evidence(*_turns(diffs), est), rule).outcome


def test_the_trimmed_estimator_is_the_gate_and_t_its_untrimmed_form() -> None:
    base, head = _turns([0.01 * ((i * 7) % 11 - 5) + 0.03 for i in range(40)])
    assert ana.estimator_evidence(base, head, "trimmed") == paired_evidence(base, head)
    assert ana.estimator_evidence(base, head, "t") == paired_evidence(base, head, trim=0.0)


@pytest.mark.parametrize("est", cal.ESTIMATORS)
def test_every_estimator_sees_a_clear_shift_and_no_shift(est: str) -> None:
    rng = random.Random(5)
    rule = Rule(threshold=0.02, alpha=0.01)
    slow = [0.08 + rng.gauss(0, 0.01) for _ in range(30)]
    same = [rng.gauss(0, 0.002) for _ in range(30)]
    assert _verdict(slow, est, rule) is Outcome.REGRESSION
    assert _verdict(same, est, rule) is Outcome.OK
    assert _verdict([-x for x in slow], est, rule) is Outcome.IMPROVEMENT
    noisy = [rng.gauss(0, 0.2) for _ in range(30)]  # resolves nothing near 2%
    assert _verdict(noisy, est, rule) is Outcome.INCONCLUSIVE


def test_robust_estimators_shrug_off_one_wild_turn() -> None:
    d = [0.001 * ((i % 5) - 2) for i in range(30)] + [0.9]
    rule = Rule(threshold=0.02, alpha=0.01)
    assert _verdict(d, "t", rule) is Outcome.INCONCLUSIVE
    for est in ("wilcoxon", "trimmed"):
        assert _verdict(d, est, rule) is Outcome.OK


def test_estimators_on_identical_turns_and_bad_input() -> None:
    rule = Rule(threshold=0.02, alpha=0.01)
    for est in cal.ESTIMATORS:
        assert _verdict([0.0] * 10, est, rule) is Outcome.OK
    with pytest.raises(cal.StudyError, match="1 base and 1 head turns: an estimator needs"):
        ana.estimator_evidence([1.0], [1.0], "wilcoxon")


def test_unknown_estimator_names_the_choices() -> None:
    with pytest.raises(cal.StudyError, match="estimator=.mean.: use one of trimmed, t, wilcoxon"):
        ana.estimator_evidence([1.0, 2.0], [1.0, 2.0], "mean")


def test_rate_uses_clopper_pearson() -> None:
    r = findings.Rate(0, 50)
    assert r.ci[0] == 0 and r.ci[1] == pytest.approx(0.0711, abs=5e-4)
    assert str(findings.Rate(19, 20)) == "95% [75%-100%] (19/20)"
    assert str(findings.Rate(0, 0)) == "-"


def test_fewer_turns_offline_and_bad_turn_count() -> None:
    trials, _ = study(CFG)
    rule = Rule(threshold=0.02, alpha=0.01)
    rep = ana.analyse(trials, rule, "wilcoxon", turns=6)
    assert rep.turns == 6 and rep.seconds < ana.analyse(trials, rule).seconds
    with pytest.raises(cal.StudyError, match=r"turns=40: the trials hold 12 turns; analyse 2-12"):
        ana.analyse(trials, rule, turns=40)
    lines = tables.lever_table(trials, rule, ("t", "trimmed"), (6,))
    assert "| A/B (6 turns, t, threshold 2.0%" in lines[2]
    assert len(lines) == 2 + 4
    assert "| A/B (6 turns, trimmed, threshold 2.0%, alpha 0.01) |" in lines[3]


def test_conclusion_sentences() -> None:
    rule = Rule(threshold=0.02, alpha=0.01)
    rows = (findings.Row(0.0, findings.Rate(0, 50), findings.Rate(1, 50), None),
            findings.Row(0.03, findings.Rate(17, 20), findings.Rate(0, 20), None),
            findings.Row(0.05, findings.Rate(20, 20), findings.Rate(0, 20), None))
    rep = findings.Report("A/B", "t", 40, rule, rows, 11.0)
    assert rep.smallest_detected() == 0.05
    assert tables.conclusion(rep) == (
        "This runner catches a 5% slowdown 100% of the time (95% CI 83%-100%) with 0% false "
        "alarms (95% CI up to 7.1%) (40 turns, t, threshold 2.0%, alpha 0.01, 11 s of "
        "measurement per side).")
    assert tables.meets_targets(rep) == {"false_alarms<=1%": True, "5% caught>=95%": True,
                                      "3% caught>=80%": True, "2% caught>=95%": None,
                                      "<=20 s per side": True}
    none = findings.Report("A/B", "t", 40, rule, rows[1:2], 11.0)  # no A/A, no 5%, no 2%
    assert tables.meets_targets(none) == {"false_alarms<=1%": None, "5% caught>=95%": None,
                                       "3% caught>=80%": True, "2% caught>=95%": None,
                                       "<=20 s per side": True}
    first = findings.Row(0.0, findings.Rate(3, 50), findings.Rate(0, 50), None)
    noisy = findings.Report("A/B", "t", 40, rule, (first, *rows[1:]), 11.0)
    assert tables.conclusion(noisy).startswith("This runner raised false alarms in 6% [1%-17%] "
                                            "(3/50) of A/A trials")
    weak = findings.Report("A/B", "t", 40, rule, (rows[0], findings.Row(0.05, findings.Rate(10, 20),
                                                              findings.Rate(0, 20), None)), 11.0)
    assert tables.conclusion(weak).startswith("None of the tested slowdowns was caught >= 95%")


def test_config_errors_name_the_value() -> None:
    with pytest.raises(cal.StudyError, match=r"turns=1: a paired verdict needs >= 2 turns"):
        cal.StudyConfig(turns=1)
    with pytest.raises(cal.StudyError, match=r"slowdown 1.5 must be a fraction in \(0, 1\)"):
        cal.StudyConfig(slowdowns=(1.5,))
    with pytest.raises(ValueError, match=r"threshold=2 must be a fraction"):
        cal.StudyConfig(threshold=2)
    with pytest.raises(cal.StudyError, match="no trials to run"):
        cal.StudyConfig(aa_trials=0, trials=0)


def test_save_load_roundtrip_and_bad_file(tmp_path: Path) -> None:
    trials, _ = study(CFG)
    p = tmp_path / "s.json"
    studyfile.save(p, CFG, trials, {"nodeid": "x"})
    cfg, back, meta = studyfile.load(p)
    assert cfg == CFG and back == trials and meta == {"nodeid": "x"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": 99}))
    with pytest.raises(cal.StudyError, match="format 99 is not 1; re-run the study"):
        studyfile.load(bad)


@pytest.mark.parametrize("args, message", [
    (["--slowdowns", "0.02,abc"], "'abc' is not a fraction: use e.g. 0.05 or 5%"),
    (["--turns", "0"], "'0' is too small: use a whole number >= 1, e.g. 5"),
    (["--threshold", "2"], "'2' is out of range: use a fraction between 0 and 1"),
    (["--trials", "-3"], "'-3' is negative: use a whole number >= 0, e.g. 50"),
    (["--turn-time", "0"], "'0' is too small: use a number of seconds > 0"),
    (["--pin", "99"], "argument --pin: '99': core spec '99' selects no usable CPU"),
    (["--levers", "6,x"], "'6,x' is not a list of whole numbers >= 1: use e.g. 1,2,4"),
    (["--estimator", "mean"], "argument --estimator: invalid choice: 'mean'"),
    (["--seed", "x"], "argument --seed: 'x' is not a whole number: use e.g. 50"),
])
def test_cli_argument_errors(args: list[str], message: str,
                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_missing_test_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "perf/nope.py::test_x", "--cwd", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: perfgate calibrate ")
    assert (f"perfgate calibrate: error: 'perf/nope.py::test_x' is not a test file under "
            f"{tmp_path.resolve()}: give a perf test's node id relative to --cwd, e.g. "
            "perf/test_perf_mujoco.py::test_humanoid_batch_256") in err


def test_cli_bad_study_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--analyse", str(tmp_path / "none.json")])
    assert exc.value.code == 2
    assert (f"perfgate calibrate: error: cannot read study file {tmp_path / 'none.json'}"
            in capsys.readouterr().err)


def test_calibrate_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: perfgate calibrate [-h]")
    assert "Run A/A trials and trials with injected slowdowns through the real gate" in out
    assert "--estimator {trimmed,t,wilcoxon,bootstrap}" in out


def test_cli_reanalyses_a_saved_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trials, _ = study(CFG)
    p = tmp_path / "s.json"
    studyfile.save(p, CFG, trials, {"nodeid": "perf/x.py::test_y", "bench": "y",
                              "command": "perfgate calibrate --quick"})
    assert main(["calibrate", "--analyse", str(p), "--levers", "6"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("$ perfgate calibrate --quick\n")
    assert "| A/B (12 turns, trimmed, threshold 2.0%, alpha 0.01) | 0% [0%-26%] (0/12) |" in out
    assert "| history (3 windows per run, threshold 2.0%, alpha 0.01) |" in out
    assert "injected +10%: measured +10." in out
    assert "Offline levers" in out and "| A/B (6 turns, bootstrap," in out
    assert "Sequential designs replayed on the same trials (at most N turns, K looks):" in out
    assert out.count("| A/B sequential (at most 6 turns, 1 look, trimmed, threshold 2.0%, "
                     "alpha 0.01) | 0% [0%-26%] (0/12) |") == 1  # 2 and 4 looks merge to 1
    assert "Targets: false_alarms<=1% met" in out
    assert "2% caught>=95% not measured" in out  # --quick injects 3% and 10% only
    # the headline is the sequential gate's: it catches the +3% the fixed-rule row misses
    assert "| A/B sequential (at most 12 turns, 1 look, trimmed, threshold 2.0%, alpha " \
        "0.01) | 0% [0%-26%] (0/12) | 100% [54%-100%] (6/6) |" in out
    assert "| A/B (12 turns, trimmed, threshold 2.0%, alpha 0.01) | 0% [0%-26%] (0/12) | " \
        "83% [36%-100%] (5/6) |" in out
    assert "Cost of a sequential verdict: " in out and " turn pairs measured on average of " \
        "at most 12 (plus re-measured ones)." in out
    assert out.rstrip().splitlines()[-1].startswith(
        "This runner catches a 3% slowdown 100% of the time (95% CI 54%-100%) with 0% false "
        "alarms (95% CI up to 26.5%) (at most 12 turns, 1 look, trimmed")


def test_noise_guard_drops_turn_pairs_with_outside_load() -> None:
    n = 20
    base = tuple(50.0 * (1 + 0.001 * (i % 3)) for i in range(n))
    head = tuple(b * (1.6 if i in (3, 4, 11) else 1.0) for i, b in enumerate(base))
    busy = [(2.0 if (i // 2) in (3, 4, 11) else 1.0) * ana.TICKS_PER_S for i in range(2 * n)]
    probes = tuple({"busy_ticks": b, "cores": 1.0} for b in busy)
    t = cal.TrialRecord(0, 0.0, base, head, 0.25, 1.0, True, 0.0, probes=probes)
    assert ana.outside_load(t) == [1.0 if i in (3, 4, 11) else 0.0 for i in range(n)]
    rule = Rule(threshold=0.02, alpha=0.01)
    assert ana.paired_outcome(t, rule, "t") is Outcome.INCONCLUSIVE
    assert ana.paired_outcome(t, rule, "t", guard=0.5) is Outcome.OK
    assert ana.paired_outcome(t, rule, "wilcoxon", guard=0.5) is Outcome.OK


def test_probed_study_records_per_turn_rates() -> None:
    clock = FakeClock()
    m = Machine(clock)
    ticks = iter(range(0, 10**9, 7))

    def probe() -> dict[str, float]:
        return {"busy_ticks": float(next(ticks))}

    cfg = cal.StudyConfig(aa_trials=2, trials=0, turns=4, turn_s=0.1, history=False,
                          warmup_window_s=0.05, warmup_max_s=0.5)
    trials = cal.run_study(FakeSide(m), FakeSide(m), cfg, clock=clock, probe=probe)
    assert all(len(t.probes) == 8 and "cores" in t.probes[0] for t in trials)
    assert set(ana.probe_correlations(trials)) <= {"busy_ticks", "cores"}


STEP = """
import time
def test_walk(perfgate):
    perfgate.measure(lambda: time.sleep(0.002), transitions=8)
"""


@pytest.mark.timing  # real sides and the real load guard: load re-measures pairs
@pytest.mark.slow
def test_cli_runs_a_study_on_real_side_processes(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The production A/B sides, started for calibration, through the whole command."""
    import psutil

    (tmp_path / "test_perf.py").write_text(STEP)
    save = tmp_path / "study.json"
    rc = main(["calibrate", "test_perf.py::test_walk", "--cwd", str(tmp_path),
               "--aa-trials", "2", "--trials", "1", "--slowdowns", "50%", "--turns", "4",
               "--turn-time", "0.05", "--threshold", "10%", "--no-history", "--save", str(save)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "perfgate calibrate: test_perf.py::test_walk (test_perf.test_walk)" in out
    # the fixed-length row judges the turns every trial has: 4, fewer where a trial ran out
    # of re-measures for pairs a changing outside load spoiled
    assert re.search(r"\| A/B \([234] turns, trimmed, threshold 10\.0%, alpha 0\.01\) \|",
                     out), out
    # measured, or (a neighbour switching on and off in every pair) said not to be
    assert "injected +50%: measured" in out or f"injected +50%: {tables.NONE_KEPT}" in out, out
    _cfg, trials, meta = studyfile.load(save)
    assert sorted(t.slowdown for t in trials) == [0.0, 0.0, 0.5] and "partial" not in meta
    assert not [c for c in psutil.Process().children(recursive=True)
                if "pytest_perfgate.plugin.hooks" in " ".join(c.cmdline())]


def test_a_control_head_takes_every_aa_trial_and_is_never_slowed() -> None:
    class Recording(FakeSide):
        def __init__(self, machine: Machine) -> None:
            super().__init__(machine)
            self.served: list[float] = []  # the slowdown in force at each window

        def run_window(self, duration_s: float) -> RawWindow:
            self.served.append(self.fraction)
            return super().run_window(duration_s)

    clock = FakeClock()
    m = Machine(clock)
    base, head, control = FakeSide(m), Recording(m), Recording(m)
    cfg = cal.StudyConfig(aa_trials=3, trials=2, slowdowns=(0.05,), turns=8, turn_s=0.1,
                          threshold=0.02, history=False, warmup_window_s=0.05,
                          warmup_max_s=0.5)
    trials = cal.run_study(base, head, cfg, clock=clock, control=control)
    assert sorted(t.slowdown for t in trials) == [0.0, 0.0, 0.0, 0.05, 0.05]
    assert set(head.served) == {0.05}  # the injected head never ran an A/A window
    assert set(control.served) == {0.0} and set(control.injected) == {0.0}
    assert len(control.served) >= sum(len(t.head) for t in trials if t.slowdown == 0)
    assert len(head.served) >= sum(len(t.head) for t in trials if t.slowdown > 0)


@pytest.mark.parametrize("save", [None, Path("study.json")])
def test_an_interrupted_study_says_what_it_kept(save: Path | None) -> None:
    from pytest_perfgate.cli.calibrate import interrupted

    text = interrupted(save)
    if save is None:
        assert text == ("perfgate calibrate: interrupted; no trial was kept (give --save FILE "
                        "to keep every trial as it ends)")
    else:
        assert text == ("perfgate calibrate: interrupted; the trials that ended are in "
                        "study.json: `perfgate calibrate --analyse study.json` reports them")


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update(base=["fast", *t["base"][1:]]), "trial 0 (base = ('fast', "),
    (lambda t: t.update(head=[-1.0, *t["head"][1:]]), "trial 0 (head = (-1.0, "),
    (lambda t: t.update(base=[0.0] * len(t["base"])), "trial 0 (base = (0.0, 0.0, "),
    (lambda t: t.update(head=t["head"][:-1]), "trial 0 (base/head = (12, 11)) needs the same"),
    (lambda t: t.update(base=[], head=[]), "trial 0 (base/head = (0, 0)) needs the same "),
    (lambda t: t.update(loads=[[0.1]]), "trial 0 (loads = ((0.1,),)) is not one (base, head)"),
    (lambda t: t.update(turn_wall="slow"), "trial 0 (turn_wall = 'slow') is not a number of "),
    (lambda t: t.update(slowdown=7), "trial 0 (slowdown = 7) is not a fraction in [0, 1)"),
])
def test_an_edited_study_file_is_refused_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, message: str) -> None:
    """`perfgate calibrate --analyse` of a study with one field edited: a usage error
    naming the trial, the field and the value, never a traceback."""
    trials, _ = study(CFG)
    p = tmp_path / "s.json"
    studyfile.save(p, CFG, trials, {})
    data = json.loads(p.read_text())
    edit(data["trials"][0])
    p.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--analyse", str(p)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"perfgate calibrate: error: {p}: {message}" in err, err
    assert err.rstrip().endswith("the file was edited or damaged: re-run the study with --save")
