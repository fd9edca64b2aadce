"""The end of a session that measured everything: the verdicts are always printed, what
can be written is written, and what cannot is an infrastructure error (exit status 3, never
a regression's 1) with a message naming the path and the fix, not a traceback."""

from __future__ import annotations

import json

import pytest
from helpers import CONFTEST, PERF_TEST

ARGS = ["--perfgate", "--perfgate-machine=testbox", "--perfgate-windows=6",
        "--perfgate-window-time=0.05", "-p", "no:cacheprovider"]

# The perf test breaks a path after configure checked it (a disk that changes mid-run).
BREAKER = """
import os, pathlib
def test_break_paths():
    for kind, path in (("dir", os.environ.get("MAKE_DIR")), ("file", os.environ.get("MAKE_FILE"))):
        if path:
            p = pathlib.Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.mkdir() if kind == "dir" else p.write_text("in the way")
"""


@pytest.fixture
def sandbox(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_perf=PERF_TEST, test_zz_break=BREAKER)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def runs(p: pytest.Pytester) -> list[object]:
    return list((p.path / "results" / "testbox" / "perfgate").glob("*.pgrun"))


def verdicts_printed(res: pytest.RunResult) -> None:
    res.stdout.fnmatch_lines(["*= perfgate =*", "benchmark *steps/s*baseline*",
                              "test_perf.test_walk *NO BASELINE*"])
    assert "Traceback" not in res.stdout.str() and "INTERNALERROR" not in res.stdout.str()


def test_step_summary_in_a_missing_folder_warns_then_fails_as_infrastructure(
        sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = sandbox.path / "runner-temp" / "_runner_file_commands" / "step_summary_x"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(gone))
    res = sandbox.runpytest_inprocess(*ARGS, "--perfgate-json=report.json", "-rw")
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR
    res.assert_outcomes(passed=2, warnings=2)  # this one, and NO BASELINE's PerfgateWarning
    verdicts_printed(res)
    why = (f"environment variable GITHUB_STEP_SUMMARY {gone}: its folder {gone.parent} does "
           "not exist (the runner sets this variable; unset it or point it at a writable file "
           "to keep the summary)")
    res.stdout.fnmatch_lines([f"*PytestConfigWarning: perfgate: {why}; the verdicts are still "
                              "printed, but the run will end with an infrastructure error",
                              f"perfgate: ERROR: could not write the markdown summary: {why}",
                              "perfgate: exit status 3: an infrastructure error, not a "
                              "regression (the verdicts above stand)"])
    assert not gone.parent.exists()  # never created: the runner's path, not ours
    assert len(runs(sandbox)) == 1  # measured results are recorded all the same
    assert json.loads((sandbox.path / "report.json").read_text())["benchmarks"]


def test_report_path_that_became_a_folder(sandbox: pytest.Pytester,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAKE_DIR", str(sandbox.path / "out" / "report.json"))
    res = sandbox.runpytest_inprocess(*ARGS, "--perfgate-json=out/report.json",
                                      "--perfgate-markdown=summary.md")
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR
    verdicts_printed(res)
    res.stdout.fnmatch_lines([f"perfgate: ERROR: could not write the JSON report: "
                              f"--perfgate-json {sandbox.path}/out/report.json is a folder, "
                              "not a file: give a file path, e.g. "
                              f"{sandbox.path}/out/report.json/perfgate.json",
                              "perfgate: exit status 3: *"])
    assert len(runs(sandbox)) == 1
    assert "NO BASELINE" in (sandbox.path / "summary.md").read_text()  # the other report


def test_history_that_cannot_be_recorded_keeps_the_reports(
        sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAKE_FILE", str(sandbox.path / "results" / "testbox"))
    res = sandbox.runpytest_inprocess(*ARGS, "--perfgate-json=report.json")
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR
    verdicts_printed(res)
    res.stdout.fnmatch_lines([f"perfgate: ERROR: could not record the run in "
                              f"{sandbox.path}/results: *Error: * (fix the path or "
                              "permissions, or pass --perfgate-record=false)",
                              "perfgate: exit status 3: *"])
    assert "recorded run" not in res.stdout.str()
    assert json.loads((sandbox.path / "report.json").read_text())["benchmarks"]


@pytest.mark.slow  # several full pytest runs in a row
def test_a_regression_keeps_its_own_status_when_everything_is_written(
        sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW", "1")
    for _ in range(3):  # the gate calls fewer than 2 earlier runs too thin to fail anything
        assert sandbox.runpytest_inprocess(*ARGS).ret == pytest.ExitCode.OK
    monkeypatch.setenv("SLOW", "2")
    res = sandbox.runpytest_inprocess(*ARGS, "--perfgate-json=report.json")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    assert "perfgate: ERROR" not in res.stdout.str()
    res.stdout.fnmatch_lines(["wrote the JSON report to */report.json"])


def test_jsonl_appends_one_line_per_benchmark_and_run(sandbox: pytest.Pytester) -> None:
    for _ in range(2):
        res = sandbox.runpytest_inprocess(*ARGS, "--perfgate-jsonl=log/perf.jsonl")
        assert res.ret == pytest.ExitCode.OK
    res.stdout.fnmatch_lines(["wrote the JSON lines log to */log/perf.jsonl"])
    lines = [json.loads(x) for x in (sandbox.path / "log" / "perf.jsonl").read_text()
             .splitlines()]
    assert [x["benchmark"] for x in lines] == ["test_perf.test_walk"] * 2
    assert lines[0]["run_id"] != lines[1]["run_id"] and all(x["run_id"] for x in lines)
    assert lines[0]["verdict"] == "NO BASELINE" and lines[1]["verdict"] is not None
    assert all(x["machine"] == "testbox" and x["fingerprint"] for x in lines)
    res = sandbox.runpytest_inprocess(*ARGS, "--perfgate-jsonl=r.json", "--perfgate-json=r.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--perfgate-json * and --perfgate-jsonl * name the same file: "
                              "the JSON lines log would be written into the JSON report; give "
                              "them different paths"])


BLOCKER = """
import sys
class NoMoreImports:
    '''What a session's end can meet after its tests (killed vector-env workers left one
    with CPython's "AST constructor recursion depth mismatch" on any fresh import).'''
    def find_spec(self, name, path=None, target=None):
        if name.startswith("pytest_perfgate.report"):
            raise SystemError("AST constructor recursion depth mismatch (simulated)")
        return None
def test_zz_block_imports():
    sys.meta_path.insert(0, NoMoreImports())
"""


def test_the_verdicts_need_no_import_at_the_sessions_end(sandbox: pytest.Pytester) -> None:
    sandbox.makepyfile(test_zz_break=BLOCKER)
    res = sandbox.runpytest_subprocess(*ARGS, "--perfgate-json=report.json")
    verdicts_printed(res)
    assert json.loads((sandbox.path / "report.json").read_text())["benchmarks"]
