"""`perfgate report --out DIR`: report.md with one PNG per benchmark, summary.md without."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import pytest
from helpers import STEP, record

from pytest_perfgate.cli import main


def report(tmp_path: Path, *argv: str) -> int:
    return main(["report", "--results-dir", str(tmp_path / "r"), "--repo", str(tmp_path),
                 *argv])


def outside_git(err: str) -> str:
    """``err`` without the warning that --repo (here a plain folder) cannot place the run's
    commit (tests/test_cli_rules.py renders it)."""
    return "".join(line for line in err.splitlines(keepends=True)
                   if not line.startswith("perfgate report: warning: commit "))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["report", *argv])
    assert exc.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_a_regressed_run_gets_its_verdict_and_plot(tmp_path: Path, capsys) -> None:
    record(tmp_path / "r", [250.0] * 12 + [300.0], names=("walk", "test_x[a b]"), sigma=0.01)
    out = tmp_path / "out"
    assert report(tmp_path, "--out", str(out)) == 0  # a report, not a gate: 0 on REGRESSION
    assert capsys.readouterr().out == (
        f"perfgate report: run 20240101T000012-aa0012 (dddddddddd), 2 benchmark(s): wrote "
        f"{out / 'report.md'}, {out / 'summary.md'} and 2 PNG(s)\n")
    assert png_size(out / "walk.png") == (900, 320)
    assert png_size(out / "test_x_a_b.png") == (900, 320)
    summary = (out / "summary.md").read_text()
    lines = summary.splitlines()
    assert lines[0] == "## perfgate report"
    assert lines[2] == (f"Run `20240101T000012-aa0012` of machine 'box' in {tmp_path / 'r'}, "
                        "commit `dddddddddd`, 2024-01-01 12:00 UTC.")
    assert lines[4] == ("| benchmark | verdict | change vs baseline [CI] | steps/s | "
                        "baseline steps/s |")
    walk = next(line for line in lines if line.startswith("| `walk`"))
    cells = [c.strip() for c in walk.strip("|").split("|")]
    assert cells[1] == "REGRESSION" and cells[2].startswith("-16.")  # 250 -> 300 us/step
    assert cells[3] == "3.33k" and float(cells[4].rstrip("k")) == pytest.approx(4.0, abs=0.03)
    assert "- `walk`: REGRESSION: throughput fell 16." in summary
    assert "![" not in summary
    # one slower newest run is no change point yet: it needs two runs on each side
    assert lines[-1] == "- none found"
    full = (out / "report.md").read_text()
    assert full.startswith(summary)
    assert "![walk: history](walk.png)" in full
    assert "![test_x[a b]: history](test_x_a_b.png)" in full


def test_a_step_in_the_history_is_listed_with_its_commit(tmp_path: Path, capsys) -> None:
    record(tmp_path / "r", STEP)
    assert report(tmp_path, "--out", str(tmp_path / "out")) == 0
    lines = (tmp_path / "out" / "summary.md").read_text().splitlines()
    [cp] = [line for line in lines[lines.index("### Change points"):] if line.startswith("- ")]
    assert cp == ("- `walk`: -16.7% env-steps/s (4.00k -> 3.33k) from commit `9999999999`, run "
                       "`20240101T000008-aa0008`, 2024-01-01 08:00 UTC")


def test_an_older_run_one_run_only_and_counts(tmp_path: Path, capsys) -> None:
    record(tmp_path / "r", [250.0] * 6, counts=[5.8e6] * 6)
    out = tmp_path / "out"
    assert report(tmp_path, "--out", str(out), "--run", "20240101T000000-aa0000") == 0
    summary = (out / "summary.md").read_text()
    assert "| benchmark | verdict | change vs baseline [CI] | steps/s | baseline steps/s | " \
           "instructions/env-step |" in summary
    assert "| `walk` | NO BASELINE | - | 4.00k | - | 5.80M |" in summary
    assert "- none found" in summary
    assert report(tmp_path, "--out", str(out), "--run", "333") == 0  # a commit prefix
    assert "Run `20240101T000002-aa0002`" in (out / "summary.md").read_text()
    one = tmp_path / "one"
    record(one / "r", [250.0])
    assert report(one, "--out", str(one / "out")) == 0
    summary = (one / "out" / "summary.md").read_text()
    assert "- `walk`: 1 run(s) in the history: change points need at least 4" in summary
    assert png_size(one / "out" / "walk.png") == (900, 320)


def test_instruction_counts_get_their_own_plot_and_change_points(tmp_path: Path,
                                                                  capsys) -> None:
    record(tmp_path / "r", [250.0] * 12, counts=[5.8e6] * 6 + [5.858e6] * 6)
    out = tmp_path / "out"
    assert report(tmp_path, "--out", str(out)) == 0
    assert capsys.readouterr().out.endswith(" and 2 PNG(s)\n")
    assert png_size(out / "walk-counts.png") == (900, 320)
    full = (out / "report.md").read_text()
    assert "![walk: history](walk.png)\n\n![walk: instruction counts](walk-counts.png)" in full
    assert ("- `walk`: +1.0% instructions/env-step (5.80M -> 5.86M) from commit `7777777777`, "
            "run `20240101T000006-aa0006`, 2024-01-01 06:00 UTC") in full.splitlines()


def test_bad_out_run_and_machine_are_usage_errors(tmp_path: Path, capsys,
                                                  monkeypatch) -> None:
    record(tmp_path / "r", [250.0] * 3)
    r = ["--results-dir", str(tmp_path / "r")]
    (tmp_path / "file").write_text("x")
    assert usage_error(capsys, *r, "--out", str(tmp_path / "file")) == (
        f"perfgate report: error: --out '{tmp_path / 'file'}' is a file, not a folder: give a "
        "folder, e.g. perfgate-report")
    assert usage_error(capsys, *r, "--out", str(tmp_path / "file" / "sub")) == (
        f"perfgate report: error: --out '{tmp_path / 'file' / 'sub'}': {tmp_path / 'file'} is "
        "a file, not a folder: give a path in a folder")
    assert usage_error(capsys, *r, "--out", " ") == (
        "perfgate report: error: --out is empty: give a folder, e.g. perfgate-report")
    monkeypatch.setattr(os, "access", lambda *a: False)  # root may write anywhere
    assert usage_error(capsys, *r, "--out", str(tmp_path / "ro" / "x")) == (
        f"perfgate report: error: --out '{tmp_path / 'ro' / 'x'}': cannot write in "
        f"{tmp_path}: give a writable folder")
    monkeypatch.undo()
    assert usage_error(capsys, *r, "--out", str(tmp_path / "o"), "--run", "nope") == (
        "perfgate report: error: --run 'nope': no history-mode run of machine 'box' has that "
        "id or commit; newest runs: 20240101T000002-aa0002, 20240101T000001-aa0001, "
        "20240101T000000-aa0000")
    assert usage_error(capsys, *r, "--out", str(tmp_path / "o"), "--run", "") == (
        "perfgate report: error: --run is empty: give a run id printed as 'recorded run "
        "RUN_ID' or a commit prefix")
    assert main(["report", *r, "--out", str(tmp_path / "o"), "--machine", "ci"]) == 3
    assert capsys.readouterr().err == (
        f"perfgate report: infrastructure error: no history of machine 'ci' in "
        f"{tmp_path / 'r'} (machines with runs: box): record runs under that name first, or "
        "pass one of them to --machine\n")
    assert usage_error(capsys, *r).endswith("the following arguments are required: --out")
    assert not (tmp_path / "o").exists()


def test_missing_or_garbage_history_and_missing_libraries_are_infrastructure(
        tmp_path: Path, capsys, monkeypatch) -> None:
    out = str(tmp_path / "out")
    assert report(tmp_path, "--out", out) == 3
    assert capsys.readouterr().err == (
        f"perfgate report: infrastructure error: no history at {tmp_path / 'r'}: record runs "
        "with `pytest --perfgate` first, or pass --results-dir\n")
    bad = tmp_path / "r" / "box" / "perfgate"
    bad.mkdir(parents=True)
    (bad / "x.pgrun").write_bytes(b"\x00\xff garbage")
    assert report(tmp_path, "--out", out) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"perfgate report: warning: skipping history file "
                             f"{bad / 'x.pgrun'}: ")
    assert err[1] == (f"perfgate report: infrastructure error: machine 'box' in "
                      f"{tmp_path / 'r'} has no readable history-mode run: record runs with "
                      "`pytest --perfgate` first")
    record(tmp_path / "r", [250.0] * 2)  # the good runs are reported, the bad file named once
    assert report(tmp_path, "--out", out) == 0
    captured = capsys.readouterr()
    assert outside_git(captured.err) == (f"perfgate report: warning: skipping history file "
                                         f"{bad / 'x.pgrun'}: {err[0].split('x.pgrun: ', 1)[1]}\n")
    assert captured.out.startswith("perfgate report: run 20240101T000001-aa0001")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert report(tmp_path, "--out", out) == 3
    assert capsys.readouterr().err == ("perfgate report: infrastructure error: matplotlib is "
                                       "not installed: pip install 'pytest-perfgate[report]'  "
                                       "(or: pip install matplotlib)\n")


def test_a_failed_write_is_an_infrastructure_error(tmp_path: Path, capsys,
                                                   monkeypatch) -> None:
    from pytest_perfgate.core import atomic

    record(tmp_path / "r", [250.0] * 3)
    (tmp_path / "taken" / "walk.png").mkdir(parents=True)  # a folder where the plot goes
    assert report(tmp_path, "--out", str(tmp_path / "taken")) == 3
    err = outside_git(capsys.readouterr().err)
    assert err.startswith(f"perfgate report: infrastructure error: cannot write the report in "
                          f"{tmp_path / 'taken'}: [Errno 21] Is a directory: ")

    def full_disk(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "atomic_write", full_disk)
    assert report(tmp_path, "--out", str(tmp_path / "out")) == 3
    assert outside_git(capsys.readouterr().err) == (
        f"perfgate report: infrastructure error: cannot write the report in "
        f"{tmp_path / 'out'}: [Errno 28] No space left on device\n")


def test_a_change_point_confirmed_by_later_runs_names_the_run_it_starts_at(
        tmp_path: Path, capsys) -> None:
    record(tmp_path / "r", [250.0] * 12 + [300.0] * 3, sigma=0.01)
    out = tmp_path / "out"
    assert report(tmp_path, "--out", str(out), "--run", "20240101T000012-aa0012") == 0
    capsys.readouterr()
    last = (out / "summary.md").read_text().splitlines()[-1]
    assert last.startswith("- `walk`: -1") and last.endswith(
        "run `20240101T000012-aa0012`, 2024-01-01 12:00 UTC (starts at this run)")
