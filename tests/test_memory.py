"""Peak memory: recorded per benchmark, exported as <bench>.rss, gated only when asked."""

from __future__ import annotations

import json

import pytest
from fake_session import FAKE_CLOCK_CONFTEST

from pytest_perfgate.core.gate import Outcome, Rule
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.memory import decide_memory, host_figure, memory_line, not_sampled
from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.history.asv import _asv_rows as asv_rows
from pytest_perfgate.history.asv import asv_entries, rss_series
from pytest_perfgate.report.render import explain, notes, row

MiB = 2**20
MEM = {"peak_rss": 300 * MiB, "rss": 280 * MiB, "uss": 200 * MiB, "pss": 240 * MiB,
       "processes": 5}


def bench(memory=MEM) -> BenchRecord:
    return BenchRecord(name="humanoid", samples=(100.0, 110.0), rate=9500.0,
                       cores=1.83, memory=dict(memory))


def test_the_rule_and_its_words() -> None:
    rule = Rule(threshold=0.10)
    v = decide_memory(130 * MiB, [100 * MiB, 101 * MiB, 99 * MiB], rule)
    assert v.outcome is Outcome.REGRESSION and v.fails(rule)
    assert v.message == ("peak memory rose 30.0% (130 MiB now vs 100 MiB, the median of 3 "
                         "baseline run(s)' peaks), more than the 10% memory threshold")
    ok = decide_memory(105 * MiB, [100 * MiB], rule)
    assert ok.outcome is Outcome.OK and ok.message == (
        "peak memory within 10% (+5.0%: 105 MiB now vs 100 MiB, the median of 1 baseline "
        "run(s)' peaks)")
    less = decide_memory(50 * MiB, [100 * MiB], rule)
    assert less.outcome is Outcome.IMPROVEMENT and not less.fails(rule)
    assert less.message == ("peak memory fell 50.0% (50 MiB now vs 100 MiB, the median of "
                            "1 baseline run(s)' peaks)")
    none = decide_memory(50 * MiB, [0.0], rule)  # older runs recorded no memory
    assert none.outcome is Outcome.NO_BASELINE and none.message == (
        "no baseline run recorded peak memory (runs before this version did not); this run's "
        "is recorded and becomes the baseline of later commits")


def test_a_workload_without_memory_figures_is_named_not_passed() -> None:
    assert host_figure(bench({})) is None
    figure, verdict = not_sampled()
    j = Judged(bench({}), verdict, Rule(), "t::x", memory=figure)
    assert j.name == "humanoid.rss" and figure.peak is None and j.baseline_commits == []
    assert row(j) == ("humanoid.rss", "-", "-", "-", "-", "NO BASELINE", "-")  # not 0 MiB
    assert verdict.outcome is Outcome.NO_BASELINE
    assert verdict.message == ("this workload's memory was not sampled (only perfgate.measure "
                               "steps and worker groups report it), so memory_threshold= "
                               "cannot gate it")


def test_memory_is_recorded_and_read_back_and_garbage_is_named() -> None:
    b = bench()
    assert BenchRecord.from_json(json.loads(json.dumps(b.to_json()))) == b
    old = b.to_json()
    del old["memory"]
    assert BenchRecord.from_json(old).memory == {}  # records from before keep loading
    bad = {**b.to_json(), "memory": {"peak_rss": -5}}
    with pytest.raises(ValueError, match=r"benchmark 'humanoid': field 'memory' holds "
                       r"'peak_rss': -5, expected a byte count between 0 and 1e\+18"):
        BenchRecord.from_json(bad)
    with pytest.raises(ValueError, match="field 'memory' is a str"):
        BenchRecord.from_json({**b.to_json(), "memory": "lots"})


def test_the_asv_series_is_the_peak_in_bytes() -> None:
    run = RunRecord(run_id="r1", started_at=1.7e9, commit="a" * 40, commit_date_ms=1,
                    branch="main", dirty=False, machine="m", fingerprint="f",
                    metadata={}, benchmarks={"humanoid": bench()})
    entries = asv_entries(run, {})
    assert rss_series("humanoid") == "humanoid.rss"
    assert entries["humanoid.rss"]["unit"] == "bytes"
    assert entries["humanoid.rss"]["type"] == "track"
    rows = asv_rows(run, entries)
    assert rows["humanoid.rss"][0] == [float(300 * MiB)]
    bare = RunRecord(**{**run.__dict__, "benchmarks": {"humanoid": bench({})}})
    assert "humanoid.rss" not in asv_entries(bare, {})


def test_the_report_shows_the_memory_and_the_memory_verdict() -> None:
    j = Judged(bench(), None, Rule(), "t::x")
    assert memory_line(MEM) == ("peak memory 300 MiB over 5 processes (at the end: uss 200 "
                                "MiB, pss 240 MiB)")
    assert notes([j]) == ["humanoid: peak memory 300 MiB over 5 processes (at the end: uss "
                          "200 MiB, pss 240 MiB); cores used 1.83"]
    mem = host_figure(bench())
    assert mem is not None and mem.peak == 300 * MiB
    rule = Rule(threshold=0.10)
    v = decide_memory(mem.peak, [200 * MiB], rule)
    mj = Judged(bench(), v, rule, "t::x", ["b" * 40], memory=mem)  # on its measurement
    assert mj.name == "humanoid.rss"
    assert row(mj) == ("humanoid.rss", "300 MiB", "-", "0.667", "-", "REGRESSION", "-")
    assert notes([mj]) == ["humanoid.rss: REGRESSION: " + v.message]  # its measurement: at j
    assert explain(mj) == "\n".join([
        "perfgate REGRESSION: humanoid.rss",
        "  peak memory rose 50.0% (300 MiB now vs 200 MiB, the median of 1 baseline run(s)' "
        "peaks), more than the 10% memory threshold",
        "  peak memory 300 MiB over 5 processes (at the end: uss 200 MiB, pss 240 MiB)",
        "  baseline: 1 run(s) at bbbbbbbbbb"])


def test_memory_threshold_out_of_range_is_a_usage_error_at_collection(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_marks="""
import pytest

@pytest.mark.perfgate(memory_threshold=1.5)
def test_a(perfgate):
    pass

@pytest.mark.perfgate(memory_threshold="lots")
def test_b(perfgate):
    pass

@pytest.mark.perfgate(memory_threshold=True)
def test_c(perfgate):
    pass
""")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([
        "ERROR: perfgate: bad marker(s):",
        "  @pytest.mark.perfgate(memory_threshold=1.5) on test_marks.py::test_a: "
        "memory_threshold: '1.5' is out of range: use a fraction between 0 and 1 (exclusive), "
        "e.g. 0.05 or 5%; it is the rise of peak memory that fails the test, e.g. "
        "memory_threshold=0.10 (or \"10%\")",
        "  @pytest.mark.perfgate(memory_threshold='lots') on test_marks.py::test_b: "
        "memory_threshold: 'lots' is not a fraction: use e.g. 0.05 or 5%; it is the rise of "
        "peak memory that fails the test, e.g. memory_threshold=0.10 (or \"10%\")",
        "  @pytest.mark.perfgate(memory_threshold=True) on test_marks.py::test_c: "
        "memory_threshold: True is not a fraction: use e.g. 0.05 or \"5%\"; it is the rise "
        "of peak memory that fails the test, e.g. memory_threshold=0.10 (or \"10%\")",
    ])


GATED = """
import os
import pytest
from conftest import CLOCK

@pytest.mark.perfgate(memory_threshold=0.10)
def test_mem(perfgate):
    blob = b"x" * int(os.environ.get("BLOB", "0"))  # resident while measured
    def step():
        CLOCK.advance(0.001)
    perfgate.measure(step, transitions=4, name="mem")
    del blob

def test_plain(perfgate):
    perfgate.measure(lambda: CLOCK.advance(0.001), transitions=4, name="plain")
"""


@pytest.mark.slow  # three pytest processes in a row
def test_the_memory_gate_end_to_end(pytester: pytest.Pytester,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(FAKE_CLOCK_CONFTEST)
    pytester.makepyfile(test_perf=GATED)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\n")
    args = ["--perfgate", "--perfgate-machine=box", "--perfgate-windows=4",
            "--perfgate-window-time=0.02", "-p", "no:cacheprovider",
            "--perfgate-json=report.json"]

    def verdicts() -> dict[str, str]:
        rep = json.loads((pytester.path / "report.json").read_text())
        return {b["benchmark"]: b["verdict"] for b in rep["benchmarks"]}

    first = pytester.runpytest_subprocess(*args)
    first.assert_outcomes(passed=2)
    assert verdicts() == {"mem": "NO BASELINE", "mem.rss": "NO BASELINE",
                          "plain": "NO BASELINE"}  # plain is not memory-gated
    first.stdout.fnmatch_lines(["*mem: peak memory * MiB over 1 process*"])
    (sidecar,) = (pytester.path / "results").rglob("*.pgrun")
    recorded = json.loads(sidecar.read_text())["benchmarks"]
    assert set(recorded) == {"mem", "plain"}  # the memory verdict's figure is mem's own
    assert recorded["mem"]["memory"]["peak_rss"] > 0
    asv = json.loads((pytester.path / "results" / "benchmarks.json").read_text())
    assert asv["mem.rss"]["unit"] == "bytes"
    monkeypatch.setenv("BLOB", str(400 * MiB))
    second = pytester.runpytest_subprocess(*args)
    second.assert_outcomes(passed=1, failed=1)
    assert verdicts()["mem.rss"] == "REGRESSION"
    second.stdout.fnmatch_lines(["*perfgate REGRESSION: mem.rss",
                                 "*peak memory rose *% (* MiB now vs * MiB, the median of 1 "
                                 "baseline run(s)' peaks), more than the 10% memory threshold"])


def test_the_memory_rule_is_the_sessions_rule_at_the_memory_threshold(tmp_path) -> None:
    """The memory verdict is judged with the session's alpha and policies, like the
    wall-time one; only its threshold is the marker's memory_threshold."""
    from pytest_perfgate.session.gating import GateSession
    from pytest_perfgate.session.options import Options
    from pytest_perfgate.session.perfgate import PerfGate

    opts = Options(enabled=True, threshold=0.2, alpha=0.05, unstable="warn",
                   inconclusive="fail")
    gate = PerfGate(GateSession(opts, tmp_path), "t::x", "x", memory_threshold=0.1)
    call = gate.call(None, 4, None, {}, "env-steps/s")
    assert call.rule == Rule(threshold=0.2, alpha=0.05, unstable="warn", inconclusive="fail")
    assert call.memory_rule == Rule(threshold=0.1, alpha=0.05, unstable="warn",
                                    inconclusive="fail")
    assert PerfGate(GateSession(opts, tmp_path), "t::y", "y").call(
        None, 4, None, {}, "env-steps/s").memory_rule is None  # not memory-gated
