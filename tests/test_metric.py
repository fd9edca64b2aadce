"""The metric is data: one gate, report and asv path for env-steps/s, calls/s, a user's unit
and instruction counts (core/metric.py)."""

from __future__ import annotations

import pytest

from pytest_perfgate.core.gate import Outcome, Rule, evaluate
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.metric import CALLS, ENV_STEPS, INSTRUCTIONS, metric_for, rate_unit
from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.history.asv import asv_entries
from pytest_perfgate.report.render import explain, table
from pytest_perfgate.session.naming import readable_name

RULE = Rule(threshold=0.05)
BASE = [[10.0, 10.1, 9.9, 10.0]] * 2 + [[10.2, 10.1, 10.3, 10.2], [9.8, 9.9, 9.7, 9.8]]


def test_one_gate_words_each_metric_from_its_data() -> None:
    slow = [20.0, 20.2, 19.8, 20.0]
    rate = evaluate(slow, BASE, RULE, metric=metric_for("rows/s"))
    assert rate.outcome is Outcome.REGRESSION
    assert rate.message.startswith("throughput fell 50.0% (threshold 5%)")
    counts = evaluate(slow, BASE, RULE, metric=INSTRUCTIONS)
    assert counts.outcome is Outcome.REGRESSION and counts.ratio == rate.ratio
    assert counts.message.startswith(
        "instruction counts: instructions per env-step grew by the equivalent of a "
        "throughput drop of 50.0% (threshold 5%)")
    fast = evaluate([5.0, 5.0, 5.1, 4.9], BASE, RULE, metric=INSTRUCTIONS)
    assert fast.message.startswith("instruction counts: instructions per env-step fell: a "
                                   "throughput rise of 100.0%")
    thin = evaluate([10.0] * 4, BASE[:1], RULE, metric=INSTRUCTIONS)
    assert "one run cannot show whether this workload's instruction counts vary" in \
        thin.message
    none = evaluate([10.0] * 4, [], RULE, metric=INSTRUCTIONS)
    assert none.message == "instruction counts: no earlier run on this machine to compare with"


def test_a_noisy_history_says_what_each_metric_can_do() -> None:
    noisy = [[10.0] * 4, [13.0] * 4, [8.0] * 4, [12.5] * 4]
    calls = evaluate([10.5] * 4, noisy, RULE, metric=CALLS)
    assert calls.outcome is Outcome.INCONCLUSIVE
    assert calls.message.endswith(
        "a cheap call's speed drifts between runs: compare in one run "
        "with the interleaved A/B mode (--perfgate-ab BASE_REV), or gate its instruction "
        "counts, which do not drift with the machine (--perfgate-counts), or raise the "
        "threshold.")
    steps = evaluate([10.5] * 4, noisy, RULE)
    assert steps.message.endswith("use the interleaved A/B mode (--perfgate-ab BASE_REV) for "
                                  "a paired comparison, or raise the threshold.")
    counts = evaluate([10.5] * 4, noisy, RULE, metric=INSTRUCTIONS)
    assert counts.message.endswith("make the step deterministic (one thread, a held state, "
                                   "no time-dependent work) so the threshold, not the noise, "
                                   "decides.")


def test_the_report_shows_each_result_in_its_unit() -> None:
    calls = BenchRecord("t.parse", (2.0, 2.0), 5e5, cores=1.0, unit=CALLS.unit)
    steps = BenchRecord("t.walk", (1.0, 1.0), 1e6, cores=1.0)
    counts = BenchRecord("t.walk.counts", (1200.0,), 1e6 / 1200.0, unit=INSTRUCTIONS.unit)
    v = evaluate([2.0] * 4, [[1.0] * 4] * 3, RULE, metric=CALLS)
    j = Judged(calls, v, RULE, "t.py::test_parse", ["a" * 40], 1e6)
    rows = table([j, Judged(steps, None, RULE, "t"), Judged(counts, None, RULE, "c")])
    assert rows[0].split()[:3] == ["benchmark", "now", "baseline"]
    assert rows[2].split()[:4] == ["t.parse", "500k", "calls/s", "1.00M"]
    assert rows[3].split()[:3] == ["t.walk", "1.00M", "env-steps/s"]
    assert rows[4].split()[:3] == ["t.walk.counts", "1.20k", "instructions/env-step"]
    assert table([Judged(steps, None, RULE, "t")])[0].split()[1] == "steps/s"
    text = explain(j)
    assert "  calls/s: 500k now (median window) vs 1.00M baseline (geometric mean" in text
    assert "cores used 1.00" in text


def test_asv_series_follow_the_metric() -> None:
    run = RunRecord("r", 0.0, "a" * 40, 0, None, False, "m", "fp", {}, {
        "t.parse": BenchRecord("t.parse", (2.0,), 5e5, unit=CALLS.unit),
        "t.walk.counts": BenchRecord("t.walk.counts", (1200.0,), 1e6 / 1200.0,
                                     unit=INSTRUCTIONS.unit,
                                     extra={"est_cycles_per_step": 1500.0})})
    entries = asv_entries(run, {})
    assert entries["t.parse.track_s_per_step"]["unit"] == "seconds"
    assert entries["t.walk.counts"]["unit"] == "instructions/env-step"
    assert entries["t.walk.counts.est_cycles"]["unit"] == "est. cycles/env-step"
    assert sorted(entries) == ["t.parse.track_s_per_step", "t.walk.counts",
                               "t.walk.counts.est_cycles"]


def test_a_recorded_unit_is_checked_and_old_counts_keep_theirs() -> None:
    d = BenchRecord("w", (1.0,), 1e6).to_json()
    assert BenchRecord.from_json(d).unit == ENV_STEPS.unit
    with pytest.raises(ValueError, match=r"benchmark 'w': field 'unit' is 'furlongs', "
                       r"expected 'instructions/env-step' or a rate such as 'calls/s'"):
        BenchRecord.from_json({**d, "unit": "furlongs"})
    with pytest.raises(ValueError, match=r"field 'unit' is an integer \(3\), expected a string"):
        BenchRecord.from_json({**d, "unit": 3})
    old = {k: v for k, v in d.items() if k != "unit"} | {"source": "perfgate-counts"}
    assert BenchRecord.from_json(old).unit == INSTRUCTIONS.unit


@pytest.mark.parametrize("bad", ["", "rows/s", "2rows", "a b", 3, None, "x" * 33])
def test_a_bad_unit_names_the_value_and_the_fix(bad: object) -> None:
    with pytest.raises(ValueError, match=r"unit=.* is not a unit of work: use 1-32 letters, "
                       r"digits, '_' or '-', starting with a letter, the plural of what one "
                       r"call does, e.g. unit='rows'"):
        rate_unit(bad, "unit=", "unit='rows'")
    assert rate_unit("rows", "", "") == "rows/s"


@pytest.mark.parametrize(("nodeid", "name"), [
    ("tests/test_ecs.py::test_has_component", "tests.test_ecs.test_has_component"),
    ("tests/test_ecs.py::test_query[1000-dense]", "tests.test_ecs.test_query-1000-dense"),
    ("t.py::TestA::test_b[cpu-4]", "t.TestA.test_b-cpu-4"),
])
def test_benchmark_names_read_well(nodeid: str, name: str) -> None:
    assert readable_name(nodeid) == name


def test_benchmark_names_stay_unique_and_short() -> None:
    a, b = readable_name("t.py::f[x y]"), readable_name("t.py::f[x_y]")
    assert a != b and a.startswith("t.f-x_y-")
    assert "." not in readable_name("t.py::f[1.5]").removeprefix("t.f")
    long = readable_name("a/" * 40 + "t.py::test_" + "x" * 60 + "[p]")
    other = readable_name("a/" * 40 + "t.py::test_" + "x" * 60 + "[q]")
    assert len(long) <= 80 and long != other and not long.endswith("_")


def test_counts_of_a_call_are_per_call() -> None:
    from pytest_perfgate.modes.counts.counting import counts_result
    from pytest_perfgate.modes.counts.runner import Counts

    c = Counts("f", 1, (1200,), (1500,), {"Ir": 1200})
    per_call = counts_result(c, "f", CALLS.unit)
    assert per_call.unit == "instructions/call" and per_call.name == "f.counts"
    assert counts_result(c, "w").unit == INSTRUCTIONS.unit
    v = evaluate([20.0] * 4, BASE, RULE, metric=metric_for(per_call.unit))
    assert v.message.startswith("instruction counts: instructions per call grew by the "
                                "equivalent of a throughput drop of 50.0%")
    assert BenchRecord.from_json(per_call.to_json()).unit == "instructions/call"
