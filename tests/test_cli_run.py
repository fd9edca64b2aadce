"""Every command is a function: ``run(...)`` with named parameters, called from Python with
no argument parsing, returns the exit status ``perfgate`` exits with; ``Reply.body`` holds
what ``--json`` prints, and a usage error is raised, not exited."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_perfgate.cli import check, compare, history, report
from pytest_perfgate.cli._found import Judging, Where
from pytest_perfgate.cli._out import Reply, UsageError

NEWEST = "20240101T000005-aaaa05"  # the regressed run of the ``regressed`` history


def test_check_judges_and_fills_the_json_body(regressed: Path, tmp_path: Path) -> None:
    where, judging = Where(results_dir=regressed), Judging(repo=tmp_path)
    reply = Reply("perfgate check")
    assert check.run(where=where, judging=judging, reply=reply) == 1
    assert reply.body["passed"] is False and reply.body["run"]["run_id"] == NEWEST
    assert [b["outcome"] for b in reply.body["benchmarks"]] == ["REGRESSION"]
    assert reply.body["benchmarks"][0]["accept"] == f"perfgate accept {NEWEST}"
    assert check.run(where=where, judging=Judging(repo=tmp_path, threshold=0.9)) == 0
    assert check.run("20240101T000000-aaaa00", where=where, judging=judging) == 0


def test_check_says_an_infrastructure_error_and_raises_a_usage_error(
        regressed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reply = Reply("perfgate check")
    assert check.run(where=Where(results_dir=tmp_path / "none"), reply=reply) == 3
    assert reply.infra_problem is not None and reply.infra_problem.startswith(
        f"no history at {tmp_path / 'none'}")
    assert reply.body["problems"] == [reply.infra_problem]
    with pytest.raises(UsageError, match="RUN_ID is empty"):
        check.run(" ", where=Where(results_dir=regressed), judging=Judging(repo=tmp_path))
    capsys.readouterr()


def test_history_prints_the_series_and_returns_its_document(
        regressed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reply = Reply("perfgate history")
    assert history.run("walk", where=Where(results_dir=regressed), reply=reply) == 0
    assert capsys.readouterr().out.startswith(
        "perfgate history: walk, gated series, 6 run(s) of machine 'box'")
    assert reply.body["benchmark"] == "walk" and len(reply.body["points"]) == 6
    with pytest.raises(UsageError, match="name the benchmark to show"):
        history.run(None, where=Where(results_dir=regressed))


def test_compare_judges_one_commit_against_another(regressed: Path, tmp_path: Path) -> None:
    reply = Reply("perfgate compare")
    assert compare.run("1" * 10, "6" * 10, where=Where(results_dir=regressed),
                       judging=Judging(repo=tmp_path), reply=reply) == 0
    assert reply.body["head"]["run_id"] == NEWEST and reply.body["base"]["commit"] == "1" * 40
    assert reply.body["benchmarks"][0]["ratio"] == pytest.approx(0.5, rel=0.02)
    with pytest.raises(UsageError, match="same commit"):
        compare.run("6" * 10, where=Where(results_dir=regressed), judging=Judging(repo=tmp_path))


def test_report_writes_its_files(regressed: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("ruptures")
    reply, out = Reply("perfgate report"), tmp_path / "out"
    assert report.run(out, where=Where(results_dir=regressed), judging=Judging(repo=tmp_path),
                      reply=reply) == 0
    assert reply.body["files"] == [str(out / name) for name in ("report.md", "summary.md",
                                                                "walk.png")]
    assert all(Path(f).is_file() for f in reply.body["files"])
    with pytest.raises(UsageError, match="--out is empty"):
        report.run(" ", where=Where(results_dir=regressed))
