"""`perfgate accept` / `perfgate forget`: a person's decision about a failed run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.history.decisions import load_decisions
from pytest_perfgate.history.store import History

RUN = "20240101T000000-aaaaaa"


def _record(results: Path) -> None:
    b = BenchRecord("walk", (10.0, 10.1, 9.9, 10.0), 1e5, verdict="REGRESSION")
    History(results, "box").record(
        RunRecord(RUN, 1.0, "2" * 40, 0, "main", False, "box", "fp", {}, {"walk": b}))


def test_accept_then_forget_from_the_command_line(tmp_path: Path, capsys, monkeypatch) -> None:
    _record(tmp_path)
    monkeypatch.delenv("PERFGATE_MACHINE", raising=False)
    monkeypatch.setenv("PERFGATE_RESULTS_DIR", str(tmp_path))
    assert main(["accept", RUN]) == 0
    assert capsys.readouterr().out == (
        f"accepted run {RUN} on machine box: walk (REGRESSION) now serve(s) as the baseline "
        f"for later commits (undo: perfgate forget {RUN})\n")
    assert load_decisions(tmp_path, "box").accepted == {RUN}
    assert main(["forget", RUN, "--results-dir", str(tmp_path), "--machine", "box"]) == 0
    assert load_decisions(tmp_path, "box").forgotten == {RUN}


def test_unknown_run_and_bad_values_are_usage_errors(tmp_path: Path, capsys,
                                                     monkeypatch) -> None:
    _record(tmp_path)
    monkeypatch.delenv("PERFGATE_RESULTS_DIR", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["accept", "20240101T000000-bbbbbb", "--results-dir", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "perfgate accept: error: no run '20240101T000000-bbbbbb' in " in err
    with pytest.raises(SystemExit):
        main(["forget", RUN, "--results-dir", str(tmp_path), "--machine", "../x"])
    assert "argument --machine: '../x' is not a usable machine name" in capsys.readouterr().err
    monkeypatch.setenv("PERFGATE_MACHINE", ".hidden")
    with pytest.raises(SystemExit):
        main(["accept", RUN, "--results-dir", str(tmp_path)])
    assert ("perfgate accept: error: environment variable PERFGATE_MACHINE: '.hidden' is not "
            "a usable machine name") in capsys.readouterr().err


def test_accepting_a_run_accepts_every_failed_run_of_the_same_code(tmp_path: Path,
                                                                   capsys) -> None:
    def rec(run_id: str, commit: str, verdict: str | None, dirty: bool = False) -> None:
        b = BenchRecord("walk", (20.0, 20.1, 19.9, 20.0), 5e4, verdict=verdict)
        History(tmp_path, "box").record(
            RunRecord(run_id, 1.0, commit, 0, "main", dirty, "box", "fp", {}, {"walk": b}))

    slow, other = "2" * 40, "3" * 40
    rec("20240101T000001-aaaaa1", slow, "REGRESSION")
    rec("20240101T000002-aaaaa2", slow, "REGRESSION")
    rec("20240101T000003-aaaaa3", slow, "REGRESSION", dirty=True)  # other code: not taken
    rec("20240101T000004-aaaaa4", other, "REGRESSION")  # another commit: not taken
    rec("20240101T000005-aaaaa5", slow, "OK")  # did not fail: nothing to accept
    assert main(["accept", "20240101T000002-aaaaa2", "--results-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (
        "accepted run 20240101T000002-aaaaa2 on machine box together with 1 other failed "
        "run(s) of commit 2222222222 (20240101T000001-aaaaa1): walk (REGRESSION) now serve(s) "
        "as the baseline for later commits (undo: perfgate forget 20240101T000002-aaaaa2)\n")
    assert load_decisions(tmp_path, "box").accepted == {"20240101T000001-aaaaa1",
                                                        "20240101T000002-aaaaa2"}
