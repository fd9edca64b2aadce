"""Instruction counts (--perfgate-counts): the parts that need no valgrind.

Client requests natively, callgrind dump parsing, the counts verdict through the history
gate (a fake counting worker), the asv series, options and markers, and the skip when
valgrind is missing. Real callgrind workers: tests/test_counts_valgrind.py (slow).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_perfgate.core.gate import Outcome
from pytest_perfgate.core.load import NullProbe
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.history.asv import asv_entries
from pytest_perfgate.modes.counts import client
from pytest_perfgate.modes.counts.counting import FORMULA, CountsMode, counts_result
from pytest_perfgate.modes.counts.runner import Counts, CountsError, collect, est_cycles, read_dump
from pytest_perfgate.modes.counts.worker import label
from pytest_perfgate.session.gating import GateSession
from pytest_perfgate.session.options import Options
from pytest_perfgate.session.perfgate import PerfGate

pytest_plugins = ["pytester"]


def test_client_requests_are_no_ops_natively() -> None:
    if client.unsupported():
        pytest.skip(client.unsupported() or "")
    assert client.running_on_valgrind() == 0
    assert client.request(client.ZERO_STATS, default=7) == 7  # natively: the default back
    client.zero_stats()
    client.toggle_collect()
    client.dump_stats_at("perfgate-counts:x:0")


DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
desc: Trigger: Client Request: perfgate-counts:walk:0
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 1000 300 200 5 7 1 2
totals: 1000 300 200 5 7 1 2
"""


def test_a_dump_reads_its_trigger_and_events_and_pads_dropped_zeros(tmp_path: Path) -> None:
    (tmp_path / "cg.out.1").write_text(DUMP)
    trigger, events = read_dump(tmp_path / "cg.out.1")
    assert trigger == "perfgate-counts:walk:0"
    assert events == {"Ir": 1000, "Dr": 300, "Dw": 200, "I1mr": 5, "D1mr": 7, "D1mw": 1,
                      "ILmr": 2, "DLmr": 0, "DLmw": 0}
    assert est_cycles(events) == 1000 + 10 * (5 + 7 + 1) + 100 * 2
    assert "10*(I1mr+D1mr+D1mw)" in FORMULA and "100*(ILmr+DLmr+DLmw)" in FORMULA


def test_collect_pairs_each_benchmark_with_its_dumps(tmp_path: Path) -> None:
    (tmp_path / "cg.out.1").write_text(DUMP)
    (tmp_path / "bench-001.json").write_text(json.dumps(
        {"name": "walk", "transitions": 4, "labels": [label("walk", 0)]}))
    (c,) = collect(tmp_path, "t::walk", 0).values()
    assert (c.name, c.instructions, c.per_step()) == ("walk", (1000,), (250.0,))
    assert c.phases_s == {}  # no timing recorded: none shown


def test_collect_reports_where_the_worker_time_went(tmp_path: Path) -> None:
    (tmp_path / "cg.out.1").write_text(DUMP)
    (tmp_path / "started").write_text("1000.0")
    (tmp_path / "bench-001.json").write_text(json.dumps(
        {"name": "walk", "transitions": 4, "labels": [label("walk", 0)],
         "reached_at": 1030.5, "phases_s": {"warmup": 2.0, "counted": 20.0}}))
    (c,) = collect(tmp_path, "t::walk", 0).values()
    assert c.phases_s == {"to_measure": 30.5, "warmup": 2.0, "counted": 20.0}
    (tmp_path / "started").write_text("garbage")  # informative only: dropped, not an error
    (c,) = collect(tmp_path, "t::walk", 0).values()
    assert c.phases_s == {"warmup": 2.0, "counted": 20.0}


def test_collect_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(CountsError, match=r"t::walk \(exit code 1\) reached no "
                                          r"perfgate.measure\(\) call"):
        collect(tmp_path, "t::walk", 1)
    (tmp_path / "worker.log").write_text("E   ZeroDivisionError\n")
    (tmp_path / "bench-001.json").write_text(json.dumps(
        {"name": "walk", "transitions": 4, "labels": [label("walk", 0)]}))
    with pytest.raises(CountsError, match=r"(?s)left no dump for perfgate-counts:walk:0.*"
                                          r"ZeroDivisionError"):
        collect(tmp_path, "t::walk", 1)
    (tmp_path / "bench-001.json").write_text(json.dumps(
        {"name": "walk", "transitions": 4, "error": "needs measure(step)"}))
    with pytest.raises(CountsError, match="walk: needs measure"):
        collect(tmp_path, "t::walk", 1)


def _session(tmp_path: Path, ipe: float, threshold: float = 0.01) -> GateSession:
    opts = Options(enabled=True, machine="box", results_dir=str(tmp_path / "results"),
                   windows=3, window_time=0.05, counts=True, threshold=threshold)
    s = GateSession(opts, tmp_path, FakeClock())
    s.load_probe = NullProbe()

    def runner(nodeid: str, cwd: Path) -> dict[str, Counts]:
        n = int(ipe * 4)
        return {"walk": Counts("walk", 4, (n,), (int(n * 1.25),), {"Ir": n})}

    s._counts_mode = CountsMode(s.history_mode, tmp_path, runner=runner)
    return s


def _run(tmp_path: Path, ipe: float, threshold: float = 0.01) -> tuple[PerfGate, GateSession]:
    s = _session(tmp_path, ipe, threshold)
    gate = PerfGate(s, "t::walk", "walk")
    clock = s.clock
    assert isinstance(clock, FakeClock)
    gate.measure(lambda: clock.advance(0.001), transitions=4, name="walk")
    s.finish()
    return gate, s


def test_counts_are_a_second_result_judged_by_the_same_gate(tmp_path: Path) -> None:
    gate, _s = _run(tmp_path, 1000.0)
    assert [j.result.name for j in gate.results] == ["walk", "walk.counts"]
    counts = gate.results[1]
    assert counts.result.samples == (1000.0,) and counts.result.extra[
        "est_cycles_per_step"] == 1250.0
    assert counts.verdict is not None and counts.verdict.outcome is Outcome.NO_BASELINE
    assert counts.verdict.message.startswith("instruction counts: no earlier run of walk.counts")
    for _ in range(2):
        _run(tmp_path, 1000.0)
    gate, _ = _run(tmp_path, 1000.0)  # unchanged: no spread at all, the threshold decides
    v = gate.results[1].verdict
    assert v is not None and v.outcome is Outcome.OK, v
    gate, _ = _run(tmp_path, 1020.0)  # 2% more instructions per env-step, threshold 1%
    v = gate.results[1].verdict
    assert v is not None and v.outcome is Outcome.REGRESSION, v
    assert "instruction counts: instructions per env-step grew" in v.message
    assert gate.results[0].verdict is not None  # the wall-time verdict stands beside it


def test_counts_messages_name_a_fine_threshold_and_what_one_run_cannot_show(
        tmp_path: Path) -> None:
    _run(tmp_path, 1000.0, 0.005)
    gate, _ = _run(tmp_path, 1000.0, 0.005)
    v = gate.results[1].verdict
    assert v is not None and v.outcome is Outcome.INCONCLUSIVE, v  # one earlier run
    assert "one run cannot show whether this workload's instruction counts vary between " \
           "runs" in v.message
    gate, _ = _run(tmp_path, 1000.0, 0.005)
    v = gate.results[1].verdict
    assert v is not None and v.outcome is Outcome.OK, v
    assert "within the 0.5% threshold (resolves drops >= 0%)" in v.message  # not "0%"
    gate, _ = _run(tmp_path, 1010.0, 0.005)
    v = gate.results[1].verdict
    assert v is not None and v.outcome is Outcome.REGRESSION, v
    assert "throughput drop of 1.0% (threshold 0.5%)" in v.message


def test_counts_that_vary_between_runs_are_inconclusive_and_say_why(tmp_path: Path) -> None:
    for ipe in (1000.0, 1100.0, 950.0, 1080.0):
        gate, _ = _run(tmp_path, ipe)
    v = gate.results[1].verdict
    assert v is not None and v.outcome is Outcome.INCONCLUSIVE, v
    assert "the counts themselves vary between runs" in v.message


def test_a_test_that_opts_out_gets_no_counts(tmp_path: Path) -> None:
    s = _session(tmp_path, 1000.0)
    gate = PerfGate(s, "t::walk", "walk", counts=False)
    clock = s.clock
    assert isinstance(clock, FakeClock)
    gate.measure(lambda: clock.advance(0.001), transitions=4, name="walk")
    assert [j.result.name for j in gate.results] == ["walk"]


def test_a_measure_source_workload_is_refused_before_any_worker_starts(tmp_path: Path
                                                                       ) -> None:
    s = _session(tmp_path, 1000.0)
    started: list[str] = []
    assert s._counts_mode is not None
    s._counts_mode.runner = lambda nodeid, cwd: started.append(nodeid) or {}
    clock = s.clock
    assert isinstance(clock, FakeClock)

    class Pool:  # a workload stepping in other processes
        def run_window(self, duration_s: float) -> RawWindow:
            clock.advance(duration_s)
            return RawWindow(40, duration_s, duration_s, calls=10)

    with pytest.raises(CountsError) as e:
        PerfGate(s, "t::pair", "pair").measure_source(Pool(), transitions=4, name="pair")
    assert str(e.value) == (
        "pair: instruction counts need perfgate.measure(step, ...): a measure_source() "
        "workload runs its steps in other processes, which callgrind does not follow; mark "
        "the test @pytest.mark.perfgate(counts=False) to keep its wall-time verdict")
    assert started == []


def test_counts_are_their_own_asv_series_lower_is_better() -> None:
    res = counts_result(Counts("walk", 4, (4000,), (5000,)), "walk")
    run = RunRecord("r", 1.0, "a" * 40, 0, None, False, "box", "f", {}, {res.name: res})
    entries = asv_entries(run, {})
    assert entries["walk.counts"]["type"] == "track"
    assert entries["walk.counts"]["unit"] == "instructions/env-step"
    assert entries["walk.counts.est_cycles"]["unit"] == "est. cycles/env-step"
    assert "walk.counts.steps_per_s" not in entries


def test_counts_option_is_a_bare_flag_and_an_ini_bool() -> None:
    assert Options.resolve(True, {"counts": True}, {}).counts is True
    assert Options.resolve(True, {}, {"counts": "true"}).counts is True
    assert not Options.resolve(True, {}, {}).counts


def test_missing_valgrind_skips_naming_the_package(pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_walk="""
        def test_walk(perfgate):
            perfgate.measure(lambda: None, transitions=1)
    """)
    monkeypatch.setenv("PATH", str(pytester.path))  # no valgrind on it
    res = pytester.runpytest_subprocess("--perfgate", "--perfgate-counts", "-rs",
                                        "-p", "no:cacheprovider", timeout=120)
    res.assert_outcomes(skipped=1)
    res.stdout.fnmatch_lines(["*perfgate: instruction counts need valgrind, which is not on "
                              "PATH: install valgrind (`apt-get install valgrind`)*"])


def test_a_bad_counts_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_walk="""
        import pytest
        @pytest.mark.perfgate(counts="yes")
        def test_walk(perfgate):
            pass
    """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*@pytest.mark.perfgate(counts='yes') on test_walk.py::test_walk:"
                              " counts='yes' is not a boolean: use counts=True*"])
