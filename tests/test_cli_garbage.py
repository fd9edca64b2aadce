"""A results dir holding garbage: every command names the file, goes on, and never passes a
regression it could not read (README: "3 infrastructure error (no or unreadable history,
never a pass in disguise)")."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import BASE, C1, C2, C3, ENV, asv_row, asv_writes, record
from helpers import record_runs as _record

from pytest_perfgate.cli import main
from pytest_perfgate.history.store import History

NEWEST = "20240101T000005-aaaa05"  # _record's run ids: the head (index 5) is 2x slower


def sidecar(results: Path, run_id: str, machine: str = "box") -> Path:
    return results / machine / "perfgate" / f"{run_id}.pgrun"


def edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))  # NaN and Infinity as Python writes them


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The exit status and everything printed (a traceback fails the test)."""
    status = main(list(argv))
    got = capsys.readouterr()
    return status, got.out + got.err


def test_an_unreadable_newest_run_is_never_passed_over(regressed: Path, tmp_path: Path,
                                                        capsys) -> None:
    """The regressed run's file is truncated: judging the newest *readable* run instead
    passed (exit 0) in its place; now check, compare and report stop with exit 3."""
    bad = sidecar(regressed, NEWEST)
    bad.write_text(bad.read_text()[:100])
    r = ["--results-dir", str(regressed), "--repo", str(tmp_path)]
    for argv in (["check", *r], ["compare", "111", *r],
                 ["report", "--out", str(tmp_path / "rep"), *r[:2]]):
        status, out = run(capsys, *argv)
        assert status == 3, (argv, out)
        assert f"warning: skipping history file {bad}: " in out
        assert (f"infrastructure error: {bad} cannot be read (see the warning) and may hold a "
                "run newer than 20240101T000004-aaaa04, the newest readable one") in out
        assert f"perfgate {argv[0]}: infrastructure error" in out
    # a run named explicitly is judged: the unreadable one cannot be it
    assert run(capsys, "check", "20240101T000004-aaaa04", *r)[0] == 0


def test_an_unreadable_older_run_is_named_and_the_verdict_stands(regressed: Path, tmp_path: Path,
                                                                  capsys) -> None:
    bad = sidecar(regressed, "20240101T000002-aaaa02")
    bad.write_text("[]")
    notes = regressed / "box" / "perfgate" / "notes.pgrun"  # not named like a run: not a run id
    notes.write_text("{")
    status, out = run(capsys, "check", "--results-dir", str(regressed), "--repo", str(tmp_path))
    assert status == 1 and "REGRESSION" in out and "against 4 baseline run(s)" in out
    assert out.count(f"perfgate check: warning: skipping history file {bad}: expected a "
                     "JSON object, found a list") == 1
    assert f"skipping history file {notes}" in out


def _samples(v: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["benchmarks"]["walk"].update(samples=[v] * 8)


def _started(v: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.update(started_at=v)


SAMPLES = "benchmark 'walk': samples must be a non-empty list of numbers between 1e-09 and 1e+15"


@pytest.mark.parametrize("change, problem", [
    (_samples(1e308), SAMPLES), (_samples(5e-324), SAMPLES), (_samples(-1.0), SAMPLES),
    (_started(1e300), "field 'started_at' is 1e+300, expected a time in epoch seconds"),
    (_started(-1e18), "field 'started_at' is -1e+18, expected a time in epoch seconds"),
    (_started(math.nan), "field 'started_at' is nan, expected a time in epoch seconds"),
], ids=["huge-samples", "tiny-samples", "negative-samples", "far-future", "far-past", "nan"])
def test_numbers_out_of_any_range_are_a_skipped_file_not_a_traceback(
        regressed: Path, tmp_path: Path, capsys, change: Callable[[dict[str, Any]], None],
        problem: str) -> None:
    """Finite but absurd numbers in a baseline run overflowed the gate's arithmetic
    (OverflowError, AttributeError from statistics.stdev) or time.gmtime in the table."""
    bad = sidecar(regressed, "20240101T000002-aaaa02")
    edit(bad, change)
    r = ["--results-dir", str(regressed)]
    status, out = run(capsys, "check", *r, "--repo", str(tmp_path))
    assert status == 1 and "REGRESSION" in out, out
    assert f"skipping history file {bad}: {problem}" in out
    status, out = run(capsys, "history", "walk", *r)
    assert status == 0 and f"skipping history file {bad}: {problem}" in out
    assert "5 run(s) of machine 'box'" in out
    status, out = run(capsys, "report", "--out", str(tmp_path / "rep"), *r)
    assert status == 0 and f"skipping history file {bad}" in out


@pytest.mark.parametrize("series, change", [
    ("counts.est_cycles", lambda c: c["extra"].update(est_cycles_per_step=0)),
    ("counts.phase.physics",
     lambda c: c["extra"]["phase_instructions_per_step"].update(physics=-3)),
    ("phase.physics", None),
])
def test_a_series_value_that_is_no_measurement_is_named_and_left_out(
        tmp_path: Path, capsys, series: str, change: Any) -> None:
    """A 0 in a counts series reached the change points' logarithm: a ValueError traceback."""
    record(tmp_path, [250.0] * 6, counts=[5.8e6] * 6)
    bad = tmp_path / "box" / "perfgate" / "20240101T000005-aa0005.pgrun"

    def spoil(d: dict[str, Any]) -> None:
        if change is None:
            d["benchmarks"]["walk"]["phases"]["physics"]["ms_per_call"] = 0.0
        else:
            change(d["benchmarks"]["walk.counts"])

    edit(bad, spoil)
    status, out = run(capsys, "history", "walk", "--results-dir", str(tmp_path),
                      "--series", series)
    assert status == 0, out
    assert (f"perfgate history: warning: not showing run 20240101T000005-aa0005 in the "
            f"{series} series: its value ") in out
    assert "(run file box/perfgate/20240101T000005-aa0005.pgrun)" in out
    assert f"{series} series, 5 run(s)" in out


def test_garbage_rows_in_an_asv_file_are_named_and_never_judged_in_place_of_the_newest(
        tmp_path: Path, capsys) -> None:
    """asv's own rows with a time per env-step of 5e-324 or a start time of NaN: an
    OverflowError traceback (check) or a ValueError from time.gmtime (history); a row that
    was not a list was dropped without a word, and an older asv run judged instead."""
    h = History(tmp_path / "results", "box")
    r = ["--results-dir", str(h.results_dir), "--repo", str(tmp_path)]
    for i, (commit, value) in enumerate(((C1, 10.0e-6), (C2, 10.3e-6), ("4" * 40, 10.1e-6))):
        asv_writes(h, commit, {"walk.track_s_per_step": asv_row(value, (i + 1) * 100_000)})
    bad = asv_writes(h, C3, {"walk.track_s_per_step": asv_row(5e-324, 400_000)})
    status, out = run(capsys, "check", *r)
    assert status == 3, out
    assert (f"skipping rows of history file {bad}: row 'walk.track_s_per_step': result "
            "5e-324 is not seconds per env-step") in out
    assert f"infrastructure error: {bad} cannot be read" in out
    for row, problem in ((asv_row(40e-6, math.nan), "started_at nan is not a time"),
                         (asv_row(40e-6, True), "started_at True is not a time"),
                         (5, "is an int, not an asv result row")):
        asv_writes(h, C3, {"walk.track_s_per_step": row})
        for argv in (["check", *r], ["history", "walk", *r[:2]]):
            status, out = run(capsys, *argv)
            assert "Traceback" not in out and status in (0, 1, 3), out
            assert f"skipping rows of history file {bad}: row 'walk.track_s_per_step'" in out
            assert problem in out
    status, out = run(capsys, "check", f"asv-{'4' * 12}-{ENV}", *r)  # named: judged
    assert status == 0 and "INCONCLUSIVE" in out


def test_a_copied_or_moved_run_file_is_named_and_not_counted_twice(regressed: Path, tmp_path: Path,
                                                                    capsys) -> None:
    """A copy of a baseline run under another name counted twice (a narrower spread than
    the machine's), and accept/forget, which find a run by its file name, missed it; a run
    file moved into another machine's folder judged runs of a fingerprint not its own."""
    base = sidecar(regressed, "20240101T000003-aaaa03")
    copy = sidecar(regressed, "20240101T000003-aaaa99")
    copy.write_text(base.read_text())
    _record(tmp_path / "other", BASE[:1], machine="m2")
    moved = sidecar(regressed, "20240101T000000-aaaa77")
    edit(sidecar(tmp_path / "other", "20240101T000000-aaaa00", "m2"),
         lambda d: d.update(run_id="20240101T000000-aaaa77"))
    moved.write_text(sidecar(tmp_path / "other", "20240101T000000-aaaa00", "m2").read_text())
    status, out = run(capsys, "check", "--results-dir", str(regressed), "--repo", str(tmp_path))
    assert status == 1 and "against 5 baseline run(s)" in out, out
    assert (f"skipping history file {copy}: it holds run '20240101T000003-aaaa03', not the run "
            "its name says ('20240101T000003-aaaa99')") in out
    assert (f"skipping history file {moved}: it holds a run of machine 'm2', not 'box': move "
            "it to that machine's folder") in out


def test_a_run_id_of_another_machine_names_that_machine(tmp_path: Path, capsys) -> None:
    _record(tmp_path, BASE, machine="m1")
    _record(tmp_path, [*BASE[:2], ("7", 10.0)], machine="m2")
    sidecar(tmp_path, "20240101T000002-aaaa02", "m1").unlink()  # m2 alone has this id
    with pytest.raises(SystemExit) as exc:
        main(["check", "20240101T000002-aaaa02", "--results-dir", str(tmp_path),
              "--machine", "m1"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"perfgate check: error: no run '20240101T000002-aaaa02' of machine 'm1' in {tmp_path}: "
        "it is a run of machine 'm2': pass --machine m2")


def test_a_decisions_file_with_garbage_keeps_its_good_decisions_and_is_never_overwritten(
        regressed: Path, tmp_path: Path, capsys) -> None:
    """One bad entry made the whole file count as empty (a forgotten run served as a
    baseline again), and the next accept overwrote it, dropping every decision in it."""
    path = regressed / "box" / "perfgate" / "decisions.pgaccept"
    text = json.dumps({"perfgate_decisions": 1, "accepted": [5],
                       "forgotten": ["20240101T000004-aaaa04"]})
    path.write_text(text)
    status, out = run(capsys, "check", "--results-dir", str(regressed), "--repo", str(tmp_path))
    assert status == 1 and "against 4 baseline run(s)" in out, out  # still forgotten
    assert (f"perfgate check: warning: reading {path} without 'accepted': 1 value(s) that are "
            "no run id (5)") in out
    for cmd in ("accept", "forget"):
        status, out = run(capsys, cmd, NEWEST, "--results-dir", str(regressed))
        assert status == 3
        assert out == (f"perfgate {cmd}: infrastructure error: cannot read the decisions file "
                       f"{path} ('accepted': 1 value(s) that are no run id (5)): fix it, or "
                       "delete it (which drops every accept and forget recorded there), then "
                       "run this again\n")
        assert path.read_text() == text


def test_a_run_with_no_benchmark_is_nothing_gated_not_a_pass(regressed: Path, tmp_path: Path,
                                                             capsys) -> None:
    """The plugin never records a run without benchmarks; one found (hand-made, or a
    truncated list) passed check as 'passed: 0 of 0 benchmark(s)', exit 0."""
    edit(sidecar(regressed, NEWEST), lambda d: d.update(benchmarks={}))
    status, out = run(capsys, "check", "--results-dir", str(regressed), "--repo", str(tmp_path))
    assert status == 3
    assert (
        f"perfgate check: infrastructure error: run {NEWEST} of machine 'box', commit "
        "6666666666 holds no benchmark: nothing to judge; give the run to judge as RUN_ID"
    ) in out.splitlines()


DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON nesting, deeper than json's recursion limit


@pytest.mark.parametrize("where", ["box/perfgate/20240101T000002-aaaa02.pgrun",
                                   "box/11111111-virtualenv-pyunknown.json",
                                   "box/perfgate/decisions.pgaccept", "box/machine.json"])
def test_json_nested_past_the_parsers_limit_is_garbage_like_any_other(
        regressed: Path, tmp_path: Path, capsys, where: str) -> None:
    """json raises RecursionError, which no reader's `except ValueError` caught: a
    traceback from check, history and report alike."""
    (regressed / where).write_text(DEEP)
    for argv in (["check", "--repo", str(tmp_path)], ["history", "walk"],
                 ["report", "--out", str(tmp_path / "rep")]):
        status, out = run(capsys, *argv, "--results-dir", str(regressed))
        assert status == (1 if argv[0] == "check" else 0), out
        # history reads no decisions; machine.json is read only for asv-run rows
        readers = {"decisions.pgaccept": ("check", "report"), "machine.json": ()}.get(
            Path(where).name, ("check", "history", "report"))
        if argv[0] in readers:
            assert str(regressed / where) in out and "nested too deep" in out, out


def test_a_deeply_nested_config_or_report_is_named_too(tmp_path: Path, capsys,
                                                       monkeypatch) -> None:
    (tmp_path / "asv.conf.json").write_text(DEEP)
    (tmp_path / "report.json").write_text(DEEP)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["check"])
    assert exc.value.code == 2
    assert (f"perfgate check: error: cannot find the history folder: {tmp_path}/asv.conf.json "
            "is nested too deep to be asv's config") in capsys.readouterr().err
    status, out = run(capsys, "check", "--report", "report.json")
    assert status == 3 and ("perfgate check: infrastructure error: cannot read the report "
                            "report.json: nested too deep") in out


@pytest.mark.parametrize("report", ["garbage", "missing", "a directory"])
def test_json_names_the_error_whenever_the_exit_is_3(tmp_path: Path, report: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """docs/cli.md: with --json, "error" is set whenever the exit is 3, whatever path said so
    (a report that is garbage, missing or a directory left it null)."""
    path = tmp_path / "report.json"
    if report == "garbage":
        path.write_text("{not json")
    elif report == "a directory":
        path.mkdir()
    status = main(["check", "--json", "--report", str(path)])
    doc = json.loads(capsys.readouterr().out)
    assert status == 3 and doc["exit"] == 3
    assert doc["error"]["kind"] == "infrastructure"
    assert str(path) in doc["error"]["message"]
    assert doc["error"]["message"].startswith("no report at" if report == "missing"
                                              else "cannot read the report")


def test_a_run_folder_that_is_a_file_is_named_never_blamed_on_base(
        regressed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = regressed / "box" / "perfgate"
    shutil.rmtree(folder)
    folder.write_text("not a folder")
    status, out = run(capsys, "compare", "1111", "--results-dir", str(regressed))
    assert status == 3, out
    assert (f"warning: not reading history file {folder}: it is not a folder: perfgate keeps "
            "this machine's run records in a folder of that name") in out
    assert (f"infrastructure error: BASE '1111': no readable run of machine 'box' has that id "
            f"or commit, and 1 history file(s) could not be read ({folder})") in out
    assert "error: BASE" not in out.replace("infrastructure error: BASE", "")
