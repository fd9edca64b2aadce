"""`perfgate history BENCH`: one benchmark's series, run by run, change points named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import STEP, record

from pytest_perfgate.cli import history as cli_history
from pytest_perfgate.cli import main

REAL_ANCESTRY = cli_history.git_ancestry


@pytest.fixture(autouse=True)
def linear_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded fake commits ('1' * 40 ... '9' * 40) on one line of history, in that
    order, as git would say (the tests of real repositories put git_ancestry back)."""
    monkeypatch.setattr(cli_history, "git_ancestry", lambda cwd: lambda a, b: a < b)


def history(*argv: str) -> int:
    return main(["history", *argv])


def usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        history(*argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_a_step_is_marked_above_the_run_where_it_began(tmp_path: Path, capsys) -> None:
    record(tmp_path, STEP)
    assert history("walk", "--results-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"perfgate history: walk, gated series, 16 run(s) of machine 'box' in "
                      f"{tmp_path}")
    assert out[1].split() == ["commit", "date", "(UTC)", "run", "id", "env-steps/s",
                              "us/env-step", "spread", "verdict"]
    first = out[2].split()
    assert first[:4] == ["1111111111", "2024-01-01", "00:00", "20240101T000000-aa0000"]
    assert first[-1] == "OK"
    mark = out.index(next(line for line in out if line.startswith(">> change point")))
    assert out[mark] == (">> change point: -16.7% env-steps/s (4.000k -> 3.333k), began at "
                         "commit 9999999999 (run 20240101T000008-aa0008)")
    assert out[mark + 1].startswith("   9999999999  2024-01-01 08:00  20240101T000008-aa0008")
    assert out[-3].startswith("spread: ") and out[-3].endswith("1 change point(s)")
    assert "(the gate's, as it judges the newest run: its baseline's runs, spoiled ones left " \
        "out)" in out[-3]
    assert out[-2] == "  " + out[mark][3:]
    assert out[-1] == "    find the commit: perfgate bisect 888888888888 999999999999 -k walk"


def test_a_change_point_says_when_the_machine_or_nothing_changed(tmp_path: Path,
                                                                 capsys) -> None:
    record(tmp_path / "fp", STEP, fingerprints=["aaa"] * 8 + ["bbb"] * 8)
    assert history("walk", "--results-dir", str(tmp_path / "fp")) == 0
    assert capsys.readouterr().out.splitlines()[-2].endswith(
        "(run 20240101T000008-aa0008); the machine's fingerprint changed here (aaa -> bbb): "
        "new hardware, not only new code")
    runs = record(tmp_path / "same", STEP)
    for run in runs:  # one commit throughout: the machine moved
        path = tmp_path / "same" / "box" / "perfgate" / f"{run.run_id}.pgrun"
        path.write_text(path.read_text().replace(run.commit, "1" * 40))
    assert history("walk", "--results-dir", str(tmp_path / "same")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (  # no bisect line: no commit range
        "  change point: -16.7% env-steps/s (4.000k -> 3.333k), began at commit 1111111111 (run "
        "20240101T000008-aa0008); the run before it measured the same commit: the machine's "
        "speed moved, not the code")


def _bisect_lines(results: Path, capsys, bench: str = "walk") -> list[str]:
    assert history(bench, "--results-dir", str(results)) == 0
    return [line for line in capsys.readouterr().out.splitlines() if "find the commit" in line]


def test_a_change_point_prints_the_bisect_command_for_its_range(tmp_path: Path,
                                                               capsys) -> None:
    record(tmp_path / "file", STEP, names=("perf.test_perf_walk.test_walk",),
           test_file="perf/test_perf_walk.py")
    assert _bisect_lines(tmp_path / "file", capsys, "test_walk") == [
        "    find the commit: perfgate bisect 888888888888 999999999999 "
        "perf/test_perf_walk.py -k test_walk"]
    # a parametrized name ('_256_') is not the test's: -k would select nothing, so it is left
    # out and the file's tests all run
    record(tmp_path / "param", STEP, names=("perf.test_x.test_walk_256_",),
           test_file="perf/test x.py")
    assert _bisect_lines(tmp_path / "param", capsys, "test_walk_256_") == [
        "    find the commit: perfgate bisect 888888888888 999999999999 'perf/test x.py'"]
    # a name given to measure(name=...) is not the test's: the file alone selects it
    record(tmp_path / "named", STEP, names=("humanoid_batch",), test_file="perf/test_h.py")
    assert _bisect_lines(tmp_path / "named", capsys, "humanoid_batch") == [
        "    find the commit: perfgate bisect 888888888888 999999999999 perf/test_h.py"]
    # the file relative to the checkout's top, the name to an ini's folder inside it
    record(tmp_path / "sub", STEP, names=("perf.test_w.test_walk",),
           test_file="sub/perf/test_w.py")
    assert _bisect_lines(tmp_path / "sub", capsys, "test_walk") == [
        "    find the commit: perfgate bisect 888888888888 999999999999 sub/perf/test_w.py "
        "-k test_walk"]
    with_json = main(["history", "test_walk", "--results-dir", str(tmp_path / "file"),
                      "--json"])
    assert with_json == 0
    doc = json.loads(capsys.readouterr().out)
    assert [cp["bisect"] for cp in doc["change_points"]] == [
        "perfgate bisect 888888888888 999999999999 perf/test_perf_walk.py -k test_walk"]


def test_no_bisect_command_without_a_commit_range(tmp_path: Path, capsys) -> None:
    """The same commit on both sides (the machine moved: the existing test above), a
    dirty checkout or a commit outside git leave the line out."""
    record(tmp_path / "dirty", STEP, dirty=True)
    assert _bisect_lines(tmp_path / "dirty", capsys) == []
    runs = record(tmp_path / "nogit", STEP)
    path = tmp_path / "nogit" / "box" / "perfgate" / f"{runs[8].run_id}.pgrun"
    path.write_text(path.read_text().replace(runs[8].commit, "0" * 40))
    assert history("walk", "--results-dir", str(tmp_path / "nogit"), "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [cp["bisect"] for cp in doc["change_points"]] == [None]
    assert _bisect_lines(tmp_path / "nogit", capsys) == []


def test_a_flat_series_has_none_and_a_substring_names_the_benchmark(tmp_path: Path,
                                                                      capsys) -> None:
    record(tmp_path, [250.0] * 12, names=("perf.test_walk", "perf.test_run"))
    assert history("walk", "--results", str(tmp_path)) == 0  # the one name holding it
    out = capsys.readouterr().out
    assert "perfgate history: perf.test_walk, gated" in out
    assert ">>" not in out and out.splitlines()[-1].endswith("; 0 change point(s)")


def test_one_run_is_shown_and_says_why_there_are_no_change_points(tmp_path: Path,
                                                                   capsys) -> None:
    record(tmp_path, [250.0])
    assert history("walk", "--results-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[2].split()[-4:] == ["4.000k", "250.0", "0%", "OK"]
    assert out[3] == "1 run(s): change points need at least 4 (two on each side of a step)"
    record(tmp_path / "dirty", [250.0], dirty=True)
    assert history("walk", "--results-dir", str(tmp_path / "dirty")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("   1111111111+  2024-01-01 00:00")
    assert out[3] == "(+: measured on a checkout with uncommitted changes)"


def test_counts_and_phase_series(tmp_path: Path, capsys) -> None:
    counts = [5.8e6] * 6 + [5.858e6] * 6  # +1% instructions at run 7
    record(tmp_path, [250.0] * 12, counts=counts)
    assert history("walk", "--results-dir", str(tmp_path), "--series", "counts") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[-3:] == ["instructions/env-step", "spread", "verdict"]
    assert (">> change point: +1.0% instructions/env-step (5.800M -> 5.858M), began at "
            "commit 7777777777 (run 20240101T000006-aa0006)") in out
    assert history("walk", "--results-dir", str(tmp_path), "--series", "phase.physics") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("perfgate history: walk, phase.physics series, 12 run(s)")
    assert out[2].split()[-3:] == ["64.00", "-", "OK"]  # ms per call, no spread of one value
    assert history("walk", "--results-dir", str(tmp_path), "--series",
                   "counts.phase.physics") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("perfgate history: walk, counts.phase.physics series, 12 run(s)")
    assert out[1].split()[-3:] == ["instructions/env-step", "spread", "verdict"]
    assert out[2].split()[-3] == "5.510M"
    assert any(line.startswith(">> change point: +1.0% instructions/env-step (5.510M -> "
                               "5.565M), began at commit 7777777777") for line in out), out
    assert history("walk", "--results-dir", str(tmp_path), "--series", "counts.est_cycles") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[-3:] == ["cycles/env-step", "spread", "verdict"]
    assert out[2].split()[-3] == "7.250M"
    with pytest.raises(SystemExit):
        history("walk", "--results-dir", str(tmp_path), "--series", "counts.phase.nope")
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "perfgate history: error: benchmark 'walk' has no 'counts.phase.nope' series in this "
        "history (name a recorded phase); its series: gated, counts, phase.physics, "
        "counts.est_cycles, counts.phase.physics, counts.phase.reset")


def test_unknown_and_ambiguous_names_and_series_are_usage_errors(tmp_path: Path,
                                                                   capsys) -> None:
    record(tmp_path, [250.0] * 3, names=("test_walk_fast", "test_walk_slow", "test_run"))
    where = f"(machine 'box' in {tmp_path})"
    r = ["--results-dir", str(tmp_path)]
    assert usage_error(capsys, "test_wlak_fast", *r) == (
        "perfgate history: error: no benchmark 'test_wlak_fast' in this history; near names: "
        f"test_walk_fast, test_walk_slow, test_run {where}")
    assert usage_error(capsys, "zzz", *r) == (
        "perfgate history: error: no benchmark 'zzz' in this history; recorded benchmarks: "
        f"test_run, test_walk_fast, test_walk_slow {where}")
    assert usage_error(capsys, " ", *r) == (
        "perfgate history: error: the benchmark name is empty: give a benchmark name or part "
        f"of it, e.g. humanoid {where}")
    assert usage_error(capsys, "walk", *r) == (
        "perfgate history: error: benchmark 'walk' matches 2 benchmarks: test_walk_fast, "
        f"test_walk_slow: give more of the name {where}")
    assert usage_error(capsys, "test_run", *r, "--series", "counts") == (
        "perfgate history: error: benchmark 'test_run' has no 'counts' series in this history "
        "(record counts with --perfgate-counts); its series: gated, phase.physics " + where)
    assert usage_error(capsys, "test_run", *r, "--series", "phase.nope").startswith(
        "perfgate history: error: benchmark 'test_run' has no 'phase.nope' series in this "
        "history (name a recorded phase); its series: gated, phase.physics")
    assert usage_error(capsys, "test_run", *r, "--series", "wall") == (
        "perfgate history: error: --series: series 'wall' is not one of gated, counts, "
        "phase.NAME, counts.est_cycles, counts.phase.NAME: use e.g. --series gated or "
        "--series phase.physics")


def test_machines_unknown_or_ambiguous(tmp_path: Path, capsys) -> None:
    record(tmp_path, [250.0] * 3, machine="m1")
    record(tmp_path, [250.0] * 3, machine="m2")
    assert usage_error(capsys, "walk", "--results-dir", str(tmp_path)) == (
        f"perfgate history: error: {tmp_path} holds runs of several machines (m1, m2): name "
        "one with --machine")
    assert history("walk", "--results-dir", str(tmp_path), "--machine", "m3") == 3
    assert capsys.readouterr().err == (
        f"perfgate history: infrastructure error: no history of machine 'm3' in {tmp_path} "
        "(machines with runs: m1, m2): record runs under that name first, or pass one of "
        "them to --machine\n")


def test_missing_empty_and_garbage_histories(tmp_path: Path, capsys) -> None:
    assert history("walk", "--results-dir", str(tmp_path / "none")) == 3
    assert capsys.readouterr().err == (
        f"perfgate history: infrastructure error: no history at {tmp_path / 'none'}: record "
        "runs with `pytest --perfgate` first, or pass --results-dir\n")
    (tmp_path / "file").write_text("x")
    assert history("walk", "--results-dir", str(tmp_path / "file")) == 3
    assert capsys.readouterr().err == (
        f"perfgate history: infrastructure error: the history folder {tmp_path / 'file'} is a "
        "file: pass the results folder (with one folder per machine) to --results-dir\n")
    (tmp_path / "empty").mkdir()
    assert history("walk", "--results-dir", str(tmp_path / "empty")) == 3
    assert capsys.readouterr().err == (
        f"perfgate history: infrastructure error: no machine in {tmp_path / 'empty'} has "
        "recorded runs: record runs with `pytest --perfgate` first\n")
    garbage = tmp_path / "g" / "box" / "perfgate"
    garbage.mkdir(parents=True)
    (garbage / "bad.pgrun").write_text("{not json")
    assert history("walk", "--results-dir", str(tmp_path / "g")) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"perfgate history: warning: skipping history file "
                             f"{garbage / 'bad.pgrun'}: ")
    assert err[1] == (f"perfgate history: infrastructure error: machine 'box' in "
                      f"{tmp_path / 'g'} has no readable history-mode run: record runs with "
                      "`pytest --perfgate` first")
    record(tmp_path / "g", [250.0] * 2)  # the good runs still show, the bad file is named
    assert history("walk", "--results-dir", str(tmp_path / "g")) == 0
    captured = capsys.readouterr()
    assert "skipping history file" in captured.err and "2 run(s)" in captured.out
    record(tmp_path / "ab", [250.0] * 2, mode="ab")
    assert history("walk", "--results-dir", str(tmp_path / "ab")) == 3
    assert capsys.readouterr().err.endswith(
        "has no readable history-mode run (2 A/B run(s) are not a history): record runs "
        "with `pytest --perfgate` first\n")


def test_a_missing_library_is_an_infrastructure_error(tmp_path: Path, capsys,
                                                      monkeypatch) -> None:
    import sys

    record(tmp_path, [250.0] * 5)
    monkeypatch.setitem(sys.modules, "ruptures", None)
    assert history("walk", "--results-dir", str(tmp_path)) == 3
    assert capsys.readouterr().err == (
        "perfgate history: infrastructure error: change points need the ruptures library, "
        "which is not installed: pip install 'pytest-perfgate[report]'  (or: pip install "
        "ruptures)\n")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_the_bisect_command_starts_from_an_ancestor_of_the_step(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of two branches lie side by side in time: the run just before the step may be
    another branch's, which `perfgate bisect` refuses as GOOD; the command starts from the
    newest run of the old level on the step's own line of history, and is printed relative
    to the folder the command runs in."""
    monkeypatch.setattr(cli_history, "git_ancestry", REAL_ANCESTRY)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    main_line, side = [], []
    for i in range(6):
        (repo / "n.txt").write_text(f"main {i}")
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", f"m{i}")
        main_line.append(_git(repo, "rev-parse", "HEAD"))
    _git(repo, "checkout", "-q", "-b", "side", main_line[1])
    (repo / "n.txt").write_text("side")
    _git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qam", "s")
    side.append(_git(repo, "rev-parse", "HEAD"))
    # in time order: main 0-2 fast, a run of the side branch (fast), main 3-5 slow
    commits = [*main_line[:3], side[0], *main_line[3:]]
    (repo / "perf").mkdir()
    record(tmp_path / "results", [250.0] * 4 + [500.0] * 3, commits=commits,
           test_file="perf/test_walk.py", names=("perf.test_walk.test_walk",))
    monkeypatch.chdir(repo / "perf")
    assert history("test_walk", "--results-dir", str(tmp_path / "results")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (f"    find the commit: perfgate bisect {main_line[2][:12]} "
                         f"{main_line[3][:12]} test_walk.py -k test_walk")
    done = subprocess.run([sys.executable, "-m", "pytest_perfgate.cli", "bisect", "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 0
    from pytest_perfgate.cli.bisect.probe import commit_range

    commit_range(repo, main_line[2][:12], main_line[3][:12])  # accepted: no RangeError


def test_no_bisect_command_where_git_does_not_know_the_commits(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_history, "git_ancestry", REAL_ANCESTRY)
    record(tmp_path, STEP)
    monkeypatch.chdir(tmp_path)
    assert history("walk", "--results-dir", str(tmp_path)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "    (no bisect command: git here does not know commit 8888888888 or 9999999999: run "
        "perfgate history inside the repository the runs measured for the bisect command)")


def test_without_bench_the_names_recorded_are_listed(tmp_path: Path, capsys) -> None:
    record(tmp_path, [250.0] * 3, names=("perf.test_walk", "perf.test_run"))
    assert usage_error(capsys, "--results-dir", str(tmp_path)) == (
        "perfgate history: error: name the benchmark to show (BENCH, or a part of its name): "
        f"machine 'box' in {tmp_path} has perf.test_run, perf.test_walk")


def test_the_spread_shown_is_the_one_the_gate_judges_by(tmp_path: Path, capsys) -> None:
    """One run spoiled by outside load (most windows polluted) is left out of the gate's
    spread; the history view shows that figure, not the plain spread of every median."""
    import math
    import random
    import statistics

    from pytest_perfgate.core.results import BenchRecord, RunRecord
    from pytest_perfgate.history.store import History

    rng = random.Random(3)
    levels = [250.0 * (1 + rng.gauss(0, 0.004)) for _ in range(10)]
    levels[4] = 340.0  # a neighbour slowed this run; the guard saw it in every window
    for i, level in enumerate(levels):
        samples = tuple(level * (1 + rng.gauss(0, 0.002)) for _ in range(6))
        b = BenchRecord("walk", samples, 1e6 / level, verdict="OK",
                        polluted_kept=6 if i == 4 else 0)
        History(tmp_path, "box").record(RunRecord(
            f"20240101T{i:06d}-aa{i:04d}", 1704067200.0 + 3600 * i, "123456789a"[i] * 40, 0,
            "main", False, "box", "fp", {"mode": "history"}, {"walk": b}))
    plain = statistics.stdev(math.log(v) for v in levels)
    assert history("walk", "--results-dir", str(tmp_path), "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert plain > 0.05 and doc["noise"] < 0.01, (plain, doc["noise"])
    assert history("walk", "--results-dir", str(tmp_path)) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("spread: "))
    assert line.startswith(f"spread: {doc['noise']:.2%} run to run (the gate's")
