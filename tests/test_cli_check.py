"""`perfgate check`: a recorded run judged against its history, exit statuses for CI."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import BASE
from helpers import record_runs as _record

from pytest_perfgate.cli import main


def test_a_regressed_history_exits_1_and_a_clean_one_0(tmp_path: Path, capsys) -> None:
    slow, clean = tmp_path / "slow", tmp_path / "clean"
    _record(slow, [*BASE, ("6", 20.0)])
    _record(clean, [*BASE, ("6", 10.01)])
    argv = ["check", "--repo", str(tmp_path)]  # not a git checkout: every other commit counts
    assert main([*argv, "--results-dir", str(slow)]) == 1
    out = capsys.readouterr().out
    assert "perfgate check: run 20240101T000005-aaaa05 of machine 'box', commit 6666666666" in out
    assert "REGRESSION" in out and "perfgate REGRESSION: walk" in out
    assert main([*argv, "--results-dir", str(clean)]) == 0
    out = capsys.readouterr().out
    assert " OK " in out and "REGRESSION" not in out
    # An earlier run by id: the first run has nothing before it.
    assert main([*argv, "--results-dir", str(slow), "20240101T000000-aaaa00"]) == 0
    assert "NO BASELINE" in capsys.readouterr().out


def test_a_run_is_judged_again_at_the_threshold_it_was_recorded_with(tmp_path: Path,
                                                                     capsys) -> None:
    """A project that sets perfgate_threshold = 1% gets the same verdict from check as from
    its pytest run; --threshold still overrides, and old records fall back to 5%."""
    strict, old = tmp_path / "strict", tmp_path / "old"
    _record(strict, [*BASE, ("6", 10.3)], threshold=0.01)  # 3% slower
    _record(old, [*BASE, ("6", 10.3)])
    argv = ["check", "--repo", str(tmp_path), "--results-dir"]
    assert main([*argv, str(strict)]) == 1
    assert "(threshold 1%)" in capsys.readouterr().out
    assert main([*argv, str(strict), "--threshold", "10%"]) == 0
    assert main([*argv, str(old)]) == 0
    assert " OK " in capsys.readouterr().out


def test_missing_history_is_an_infrastructure_error_not_a_pass(tmp_path: Path, capsys) -> None:
    assert main(["check", "--results-dir", str(tmp_path / "none")]) == 3
    assert capsys.readouterr().err.startswith(
        f"perfgate check: infrastructure error: no history at {tmp_path / 'none'}")
    (tmp_path / "empty").mkdir()
    assert main(["check", "--results-dir", str(tmp_path / "empty")]) == 3
    _record(tmp_path / "ab", BASE, mode="ab")
    assert main(["check", "--results-dir", str(tmp_path / "ab")]) == 3
    assert "has no recorded history-mode run" in capsys.readouterr().err


def test_usage_errors_exit_2(tmp_path: Path, capsys) -> None:
    _record(tmp_path / "two", BASE, machine="m1")
    _record(tmp_path / "two", BASE, machine="m2")
    for argv, message in [
        (["--results-dir", str(tmp_path / "two")], "holds runs of several machines (m1, m2): "
         "name one with --machine"),
        (["--results-dir", str(tmp_path / "two"), "--machine", "m1", "nope"],
         "no run 'nope' of machine 'm1'"),
        (["--alpha", "0.7"], "argument --alpha: '0.7'"),
    ]:
        with pytest.raises(SystemExit) as exc:
            main(["check", *argv])
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


def test_compare_two_commits_side_by_side(tmp_path: Path, capsys) -> None:
    # three runs of the base commit, then a 2x slower head, then an unrelated later commit
    _record(tmp_path, [("1", 10.0), ("1", 10.05), ("1", 9.97), ("6", 20.0), ("7", 10.0)])
    argv = ["compare", "--results-dir", str(tmp_path), "--repo", str(tmp_path)]
    assert main([*argv, "111", "666"]) == 0  # a report, not a gate: exit 0 whatever it says
    out = capsys.readouterr().out
    assert out.startswith("perfgate compare: run 20240101T000003-aaaa03 of machine 'box', "
                          "commit 6666666666 against the runs of commit 1111111111\n")
    assert "REGRESSION" in out and "baseline: 3 run(s) at 1111111111" in out
    # the base may be newer than the head: the comparison asked for, not the history rule
    assert main([*argv, "7777", "666"]) == 0
    assert "against the runs of commit 7777777777" in capsys.readouterr().out
    for args, message in [(["111", "1111"], "BASE and HEAD are the same commit"),
                          (["999"], "BASE '999': no run of machine 'box' has that id or commit")]:
        with pytest.raises(SystemExit) as exc:
            main([*argv, *args])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_counts_regression_reads_as_instructions_and_names_the_run_to_accept(
        tmp_path: Path, capsys) -> None:
    from helpers import record

    runs = record(tmp_path / "r", [250.0] * 6, counts=[5.8e6] * 5 + [5.858e6])  # +1%
    assert main(["check", "--results-dir", str(tmp_path / "r"), "--repo", str(tmp_path),
                 "--threshold", "0.5%"]) == 1
    out = capsys.readouterr().out
    assert ("instruction counts: instructions per env-step grew by the equivalent of a "
            "throughput drop of 1.0% (threshold 0.5%)") in out
    assert "  instructions/env-step: 5.86M now vs 5.80M baseline" in out
    assert "steps/s: " not in out.split("perfgate REGRESSION: walk.counts")[1]
    assert "counted under callgrind, one call of the step after warm-up; instructions/" \
           "env-step by phase: physics 5.57M (95%), reset 293k (5%)" in out
    assert f"accept it: perfgate accept {runs[-1].run_id}" in out
