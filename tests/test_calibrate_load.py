"""The study's sequential trials, their offline replay, and the toggling CPU hog."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import CFG, study

from pytest_perfgate.cli import main
from pytest_perfgate.core.gate import Outcome, Rule
from pytest_perfgate.study import analysis as ana
from pytest_perfgate.study import studyfile, tables
from pytest_perfgate.study import trials as cal
from pytest_perfgate.study.hog import ToggleHog, hog_for

RULE = Rule(threshold=0.02, alpha=0.01)


def test_replay_reproduces_every_live_verdict() -> None:
    trials, _ = study(CFG)
    assert all(t.verdict for t in trials)
    for t in trials:
        out, used, enough = ana.replay(t, RULE, CFG.design())
        assert enough and used == len(t.base) and out.value == t.verdict


def test_replay_leaves_load_changed_pairs_out() -> None:
    n = 25
    base = tuple(50.0 * (1 + 0.002 * (i % 3)) for i in range(n))
    changed = {2, 5, 9, 14, 17}  # a hog ran during these head turns only: more than the
    # trimmed mean trims from 20 turns
    head = tuple(b * (1.5 if i in changed else 1.0) for i, b in enumerate(base))
    loads = tuple((0.0, 1.0) if i in changed else (0.0, 0.0) for i in range(n))
    t = cal.TrialRecord(0, 0.0, base, head, 0.1, 1.0, True, 0.0, loads=loads)
    design = cal.StudyConfig(turns=20, looks=1).design()
    assert ana.replay(t, RULE, design) == (Outcome.OK, 25, True)
    blind = cal.TrialRecord(0, 0.0, base, head, 0.1, 1.0, True, 0.0)  # no load seen
    assert ana.replay(blind, RULE, design)[0] is not Outcome.OK
    # a design that needs more pairs than the trial recorded is not judged by it
    assert ana.replay(t, RULE, cal.StudyConfig(turns=40, looks=1).design())[2] is False
    rep = ana.analyse_sequential([t], RULE, 40, 1)
    assert rep.left_out == 1 and rep.rows == ()


def test_sequential_report_counts_cost_and_stops_early() -> None:
    cfg = cal.StudyConfig(aa_trials=6, trials=6, slowdowns=(0.5,), turns=48, looks=4,
                          turn_s=0.1, history=False, warmup_window_s=0.05, warmup_max_s=0.5)
    trials, _ = study(cfg)
    rep = ana.analyse_sequential(trials, RULE, 48, 4)
    gross = [t for t in trials if t.slowdown == 0.5]
    assert all(len(t.base) == 12 for t in gross)  # +50% stops at the first look
    row = rep.row(0.5)
    assert row is not None and row.called.k == 6
    assert 12 <= rep.pairs < 48 and rep.wall > 0
    assert rep.seconds < ana.analyse_sequential(trials, RULE, 48, 1).seconds or \
        ana.analyse_sequential(trials, RULE, 48, 1).left_out > 0


@pytest.mark.parametrize(("kw", "message"), [
    ({"looks": 0}, "looks=0 must be a whole number from 1 to 10, e.g. --looks 4"),
    ({"load": "heavy"}, "load='heavy': use one of quiet, one, both"),
])
def test_config_errors_name_the_value(kw: dict[str, object], message: str) -> None:
    with pytest.raises(cal.StudyError) as e:
        cal.StudyConfig(**kw)  # type: ignore[arg-type]
    assert str(e.value) == message


@pytest.mark.parametrize(("args", "message"), [
    (["--looks", "11"], "argument --looks: '11' is too many looks: use 1 to 10"),
    (["--load", "heavy"], "argument --load: invalid choice: 'heavy'"),
])
def test_cli_flag_errors(args: list[str], message: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["calibrate", *args])
    assert message in capsys.readouterr().err


def test_old_study_files_still_load(tmp_path: Path) -> None:
    trials, _ = study(CFG)
    p = tmp_path / "s.json"
    studyfile.save(p, CFG, trials, {})
    import json

    data = json.loads(p.read_text())
    for t in data["trials"]:
        for k in ("loads", "verdict", "wall_s"):
            del t[k]
    for k in ("looks", "load"):
        del data["config"][k]
    p.write_text(json.dumps(data))
    cfg, back, _ = studyfile.load(p)
    assert cfg.looks == 4 and cfg.load == "quiet" and back[0].loads == ()


# ---- the hog: real processes ---------------------------------------------------------------


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p)
            and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_hog_runs_on_the_cores_asked_and_is_ended_on_exit() -> None:
    assert hog_for("quiet") is None
    with ToggleHog(2, seed=3, period=(0.2, 0.3)) as hog:
        pids = hog.pids
        assert len(pids) == 2 and len(_alive(pids)) == 2
        busy = sum(psutil.Process(p).cpu_times().user for p in pids)
        time.sleep(1.5)  # on for 0.2-0.3 s at a time: each hog spins some of it
        assert sum(psutil.Process(p).cpu_times().user for p in pids) > busy
    assert _alive(pids) == []
    with pytest.raises(ValueError, match=r"cores=3: a hog runs on one core or both"):
        ToggleHog(3)
    with pytest.raises(ValueError, match=r"period=\(5, 2\): give \(shortest, longest\) "
                                         r"seconds, 0 < a <= b"):
        ToggleHog(1, period=(5, 2))


def test_hog_dies_with_a_killed_study() -> None:
    root = str(Path(__file__).parents[1])
    code = (f"import sys, time; sys.path.insert(0, {root!r})\n"
            "from pytest_perfgate.study.hog import ToggleHog\n"
            "h = ToggleHog(1, period=(0.2, 0.3)).start()\n"
            "print(h.pids[0], flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    assert _alive([pid]) == [pid]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    deadline = time.monotonic() + 10
    while _alive([pid]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive([pid]) == []


def test_hog_schedule_is_two_to_five_seconds_by_default() -> None:
    from pytest_perfgate.study.hog import ON_OFF_S

    assert ON_OFF_S == (2.0, 5.0)
    assert math.isclose(ToggleHog(1).period[1], 5.0)


def test_sittings_merge_into_one_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    trials, _ = study(CFG)
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    studyfile.save(a, CFG, trials[:10], {"command": "perfgate calibrate --seed 1", "started": "s1",
                                   "finished": "f1", "loadavg_before": [1.0, 1.0, 1.0]})
    studyfile.save(b, CFG, trials[10:], {"command": "perfgate calibrate --seed 2", "started": "s2",
                                   "finished": "f2", "loadavg_after": [2.0, 2.0, 2.0]})
    assert main(["calibrate", "--analyse", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("$ perfgate calibrate --seed 1 + perfgate calibrate --seed 2\n")
    assert "  sitting 1: perfgate calibrate --seed 1 ran s1 .. f1, 10 trials, load average " \
        "before 1.00/1.00/1.00, after ?" in out
    assert "  sitting 2: perfgate calibrate --seed 2 ran s2 .. f2, 14 trials" in out
    assert "(0/12) |" in out  # every A/A trial of both sittings
    from dataclasses import replace

    studyfile.save(c, replace(CFG, load="both"), trials[10:], {})
    with pytest.raises(SystemExit):
        main(["calibrate", "--analyse", str(a), str(c)])
    assert f"{c}: load='both', but {a} has 'quiet': merge only sittings of the same study " \
        "settings" in capsys.readouterr().err


def test_report_says_when_a_design_leaves_trials_out() -> None:
    from pytest_perfgate.cli.calibrate import report

    trials, _ = study(CFG)
    from dataclasses import replace

    lines = report(replace(CFG, turns=40), trials, {})
    assert "Cost of a sequential verdict: 0.0 s wall (both sides, warm-up included), 0 turn " \
        "pairs measured on average of at most 40 (plus re-measured ones); 24 trial(s) " \
        "stopped sooner than this design and are left out." in lines


def test_a_trial_whose_every_pair_saw_the_load_change_is_said_not_measured() -> None:
    """Under a neighbour switching on and off, every pair of a trial may be left out: the
    report says so for its slowdown instead of failing on an empty mean."""
    base, head = (50.0,) * 4, (75.0,) * 4
    loads = ((0.0, 1.5),) * 4
    t = cal.TrialRecord(0, 0.5, base, head, 0.1, 1.0, True, 0.0, loads=loads)
    assert t.diffs == [] and ana.measured_slowdown([t]) is None
    rep = ana.analyse([t], RULE)
    assert [line.strip() for line in tables.render_measured(rep)] == [
        f"injected +50%: {tables.NONE_KEPT} (1 trial(s))"]
