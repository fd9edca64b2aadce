"""`perfgate check` as a CI gate: GitHub annotations, the step summary, gating a pytest
report (history or A/B), telling a regression from an infrastructure error; and the test
location each result carries for the annotations."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from fake_session import FAKE_CLOCK_CONFTEST

from pytest_perfgate.cli import main
from pytest_perfgate.core.gate import Outcome, Rule, Verdict
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import BenchRecord, BenchResult, RunRecord
from pytest_perfgate.history.store import History
from pytest_perfgate.report import render
from pytest_perfgate.report.github import annotation, escape_data, escape_property


def test_annotations_are_escaped_by_githubs_rules() -> None:
    assert escape_data("50%\r\nnext") == "50%25%0D%0Anext"
    assert escape_property("a,b:c%") == "a%2Cb%3Ac%25"
    assert annotation("error", "fell 9%\nsee log", file="perf/x,y:z.py", line=7,
                      title="perfgate REGRESSION: PR") == (
        "::error file=perf/x%2Cy%3Az.py,line=7,title=perfgate REGRESSION%3A PR::"
        "fell 9%25%0Asee log")
    assert annotation("warning", "m") == "::warning::m"  # no location: a plain annotation


def test_location_round_trips_and_old_sidecars_still_read() -> None:
    b = BenchRecord("walk", (1.0, 2.0), 5.0, test_file="perf/test_walk.py", test_line=12)
    assert BenchRecord.from_json(json.loads(json.dumps(b.to_json()))) == b
    old = {k: v for k, v in b.to_json().items() if k not in ("test_file", "test_line")}
    assert BenchRecord.from_json(old).test_file is None  # written before locations were kept
    assert BenchRecord.from_json({**b.to_json(), "test_line": 12.0}).test_line == 12
    for bad, says in [({"test_line": 0}, "field 'test_line' is 0, expected a line number"),
                      ({"test_line": "7"}, "field 'test_line' is a string ('7')"),
                      ({"test_file": 3}, "field 'test_file' is an integer (3)")]:
        with pytest.raises(ValueError, match=r"benchmark 'walk': " + says.replace("(", r"\(")
                           .replace(")", r"\)")):
            BenchRecord.from_json({**b.to_json(), **bad})


def _judged(name: str, outcome: Outcome, line: int = 7, **rule: str) -> Judged:
    r = BenchResult(name, (10.0, 10.2, 9.9), 1e5)
    ratio = 0.8 if outcome is Outcome.REGRESSION else 1.0
    v = Verdict(outcome, f"{name} says {outcome.value}: 20%, p=1e-05", ratio, (0.7, 0.9), 1e-5)
    return Judged(r, v, Rule(threshold=0.02, **rule), f"perf/test_x.py::test_{name}", ["a" * 40],
                  1.25e5, where=("perf/test_x.py", line))


def _report(tmp_path: Path, *judged: Judged) -> str:
    path = tmp_path / "report.json"
    render.write_json(str(path), list(judged), {"machine": "box"})
    return str(path)


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(["check", *argv])
    return code, capsys.readouterr().out.splitlines()


def test_a_regression_in_a_report_exits_1_with_an_error_at_the_test(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")  # annotations on by default in Actions
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    rep = _report(tmp_path, _judged("walk", Outcome.REGRESSION, 7),
                  _judged("run", Outcome.OK, 20))
    code, out = _check(capsys, "--report", rep, "--pytest-exit", "1", "--summary",
                       str(summary), "--title", "PR vs merge base")
    assert code == 1
    errors = [line for line in out if line.startswith("::")]
    assert errors == ["::error file=perf/test_x.py,line=7,title=perfgate REGRESSION (PR vs "
                      "merge base)::walk: REGRESSION: walk says REGRESSION: 20%25, p=1e-05"]
    assert "perfgate check: PR vs merge base: FAILED: 1 benchmark(s) REGRESSION" in out
    text = summary.read_text()
    assert text.startswith("earlier step\n## perfgate: PR vs merge base: FAILED: 1 benchmark(s)"
                           " REGRESSION\n\n| benchmark | steps/s |")  # appended, not replaced
    assert "| walk | 100k | 125k | 0.800 [0.700-0.900] | 1e-05 | REGRESSION |" in text
    # --no-github wins over the environment
    code, out = _check(capsys, "--report", rep, "--no-github")
    assert code == 1 and not any(line.startswith("::") for line in out)


def test_an_errored_run_is_infrastructure_never_a_regression_nor_a_pass(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = _report(tmp_path, _judged("walk", Outcome.OK))
    code, out = _check(capsys, "--report", ok, "--pytest-exit", "1", "--github")
    assert code == 3
    assert out[-1] == ("::error title=perfgate infrastructure error::pytest exited 1 (tests "
                       "failed) but no verdict failed: a perf test errored outside the gate "
                       "(a crashed workload or A/B side; its error is in pytest's output)")
    assert not any("REGRESSION" in line for line in out)
    for exit_status in ("2", "3", "5"):  # interrupted, could not record, nothing collected
        assert _check(capsys, "--report", ok, "--pytest-exit", exit_status)[0] == 3
    assert _check(capsys, "--report", ok, "--pytest-exit", "0")[0] == 0
    missing = str(tmp_path / "none.json")
    code, out = _check(capsys, "--report", missing, "--pytest-exit", "0", "--github")
    assert code == 3 and out[-1] == (
        f"::error title=perfgate infrastructure error::no report at {missing}: it measured "
        "nothing: every perf test skipped or deselected?")
    assert _check(capsys, "--report", missing, "--pytest-exit", "4")[0] == 2
    (tmp_path / "garbage.json").write_text("{\"perfgate_report\": 1, \"benchmarks\": [{}]}")
    code, out = _check(capsys, "--report", str(tmp_path / "garbage.json"))
    assert code == 3 and out[0] == (
        f"perfgate check: infrastructure error: cannot read the report {tmp_path}/garbage.json: "
        "benchmarks[0] (None): missing key 'result'")
    (tmp_path / "other.json").write_text("[1]")
    code, out = _check(capsys, "--report", str(tmp_path / "other.json"))
    assert code == 3 and "not a perfgate JSON report" in out[0]


def test_a_report_read_back_keeps_the_rule_its_verdicts_were_judged_by(
        tmp_path: Path) -> None:
    from pytest_perfgate.report.readback import read_report

    inconclusive = Judged(BenchResult("walk", (10.0, 10.2), 1e5),
                          Verdict(Outcome.INCONCLUSIVE, "noisy", 0.97, (0.9, 1.05), 0.2), Rule(
                              threshold=0.03, alpha=0.05, unstable="warn",
                              inconclusive="fail"), "perf/test_x.py::test_walk")
    ok = _judged("run", Outcome.OK, unstable="warn", inconclusive="fail")
    (walk, run) = read_report(Path(_report(tmp_path, inconclusive, ok)))
    assert walk.rule == inconclusive.rule and run.rule == ok.rule  # not guessed from 'fails'
    assert walk.verdict is not None and walk.verdict.fails(walk.rule)
    data = json.loads((tmp_path / "report.json").read_text())
    for e in data["benchmarks"]:  # a report written before the rule was recorded
        for key in ("alpha", "unstable", "inconclusive"):
            del e[key]
    (tmp_path / "old.json").write_text(json.dumps(data))
    (walk, run) = read_report(tmp_path / "old.json")
    assert walk.rule == Rule(threshold=0.03, inconclusive="fail", unstable="warn")
    assert run.rule == Rule(threshold=0.02, unstable="warn", inconclusive="warn")
    data["benchmarks"][0]["unstable"] = "maybe"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"benchmarks\[0\] \('walk'\): unstable='maybe'"):
        read_report(tmp_path / "bad.json")


def test_pairs_memory_figures_and_re_measuring_read_back_from_the_verdicts_entry(
        tmp_path: Path) -> None:
    from dataclasses import replace

    from pytest_perfgate.core.memory import host_figure
    from pytest_perfgate.report.readback import read_report

    walk = _judged("walk", Outcome.REGRESSION)
    pairs = (Verdict(Outcome.REGRESSION, "", 0.8, (0.7, 0.9)), walk.verdict)
    paired = replace(walk, pairs=pairs, remeasured=True)  # type: ignore[arg-type]
    measured = replace(walk.result, memory={"peak_rss": 300 * 2**20, "processes": 2})
    figure = host_figure(measured)
    mem = Judged(measured, Verdict(Outcome.OK, "peak memory within 10%", 1.0), Rule(0.1),
                 walk.test_id, ["a" * 40], memory=figure)
    entries = json.loads(Path(_report(tmp_path, paired, mem)).read_text())["benchmarks"]
    assert [e["benchmark"] for e in entries] == ["walk", "walk.rss"]
    assert [p["outcome"] for p in entries[0]["pairs"]] == ["REGRESSION", "REGRESSION"]
    assert "ab_pairs" not in entries[0]["result"]["extra"] and entries[0]["remeasured"]
    assert entries[1]["result"]["samples"] == [300 * 2**20]  # the file keeps its figure
    (back, back_mem) = read_report(tmp_path / "report.json")
    assert [(p.outcome, p.ratio, p.ci) for p in back.pairs] == [
        (p.outcome, p.ratio, p.ci) for p in pairs] and back.remeasured
    assert back_mem.name == "walk.rss" and back_mem.memory == figure
    assert render.row(back_mem) == render.row(mem)
    old = json.loads((tmp_path / "report.json").read_text())  # before "pairs" had its key
    e = old["benchmarks"][0]
    e["result"]["extra"]["ab_pairs"] = e.pop("pairs")
    del e["remeasured"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    (back, _) = read_report(tmp_path / "old.json")
    assert [p.outcome for p in back.pairs] == [Outcome.REGRESSION] * 2 and not back.remeasured


def test_no_baseline_is_a_warning_or_with_fail_not_gated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _report(tmp_path, _judged("walk", Outcome.NO_BASELINE))
    code, out = _check(capsys, "--report", rep, "--pytest-exit", "0", "--github")
    assert code == 0
    assert "perfgate check: report report.json: passed, nothing failed: 1 NOT GATED (no " \
        "baseline: not a pass for those)" in out
    assert out[-1].startswith("::warning file=perf/test_x.py,line=7,title=perfgate NO BASELINE")
    code, out = _check(capsys, "--report", rep, "--no-baseline", "fail", "--github")
    assert code == 3 and "perfgate check: report report.json: INFRASTRUCTURE ERROR" in out[-3]
    assert out[-1].startswith("::error title=perfgate infrastructure error::1 benchmark(s) have "
                              "no baseline") and "seed the history" in out[-1]


def test_usage_errors_name_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _report(tmp_path, _judged("walk", Outcome.OK))
    for argv, says in [(["--report", rep, "RUN1"], "give no RUN_ID and no --baseline"),
                       (["--pytest-exit", "1"], "--pytest-exit goes with --report"),
                       (["--report", rep, "--pytest-exit", ""], "'' is not an exit status"),
                       (["--summary", str(tmp_path)], "--summary")]:
        with pytest.raises(SystemExit) as exc:
            main(["check", "--results-dir", str(tmp_path), *argv])
        assert exc.value.code == 2 and says in capsys.readouterr().err


def test_history_check_annotates_from_the_recorded_location(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(3)
    for i, level in enumerate([10.0, 10.05, 9.95, 10.0, 10.02, 20.0]):
        b = BenchRecord("walk", tuple(level * (1 + rng.gauss(0, 0.005)) for _ in range(8)),
                        1e6 / level, verdict="OK", test_file="perf/test_walk.py", test_line=4)
        History(tmp_path, "box").record(RunRecord(
            f"20240101T0000{i:02d}-aaaa{i:02d}", float(i), str(i + 1) * 40, 0, "main", False,
            "box", "fp", {"mode": "history"}, {"walk": b}))
    code, out = _check(capsys, "--results-dir", str(tmp_path), "--repo", str(tmp_path),
                       "--github")
    assert code == 1
    assert out[-1].startswith("::error file=perf/test_walk.py,line=4,title=perfgate "
                              "REGRESSION::walk: REGRESSION: throughput fell")
    code, out = _check(capsys, "--results-dir", str(tmp_path / "none"), "--github")
    assert code == 3 and out[-1].startswith("::error title=perfgate infrastructure error::no "
                                            "history at")


CONFTEST = FAKE_CLOCK_CONFTEST


def test_the_plugin_records_each_benchmarks_test_location(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    sub = pytester.mkpydir("perf")
    (sub / "test_walk.py").write_text("from conftest import CLOCK\n\n\n"
                                      "def test_walk(perfgate):\n"
                                      "    perfgate.measure(lambda: CLOCK.advance(0.001), 4)\n")
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    res = pytester.runpytest_inprocess("--perfgate", "--perfgate-machine=box",
                                       "--perfgate-windows=4", "--perfgate-window-time=0.05",
                                       "--perfgate-json=out.json", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    entry = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]
    assert (entry["result"]["test_file"], entry["result"]["test_line"]) == (
        "perf/test_walk.py", 4)
    run, = (pytester.path / "results" / "box" / "perfgate").glob("*.pgrun")
    bench, = json.loads(run.read_text())["benchmarks"].values()
    assert (bench["test_file"], bench["test_line"]) == ("perf/test_walk.py", 4)
