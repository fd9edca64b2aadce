"""The pair of side processes as the unit of noise (modes/ab/spread.py): a change within the
spread between pairs is never called; one that clears it still is. Scripted verdicts with
their evidence (log ratio, standard error); no processes, no timing."""

from __future__ import annotations

import math

import pytest

from pytest_perfgate.core.evidence import Evidence
from pytest_perfgate.core.gate import Outcome, Rule, Verdict
from pytest_perfgate.modes.ab import confirm, spread

REG, OK, IMP = Outcome.REGRESSION, Outcome.OK, Outcome.IMPROVEMENT
RULE = Rule(threshold=0.02, alpha=0.01)


def ve(outcome: Outcome, ratio: float, se: float) -> Verdict:
    """A pair's verdict as the paired test gives it: throughput ratio, log-ratio evidence."""
    ev = Evidence(-math.log(ratio), se, 30, 48, "paired")
    return Verdict(outcome, f"env-steps/s {outcome.value.lower()} at {ratio}", ratio=ratio,
                   ci=(ratio * math.exp(-2.5 * se), ratio * math.exp(2.5 * se)), evidence=ev)


def test_pairs_within_their_turns_noise_show_no_spread() -> None:
    assert spread.of([ve(REG, 0.500, 0.01), ve(REG, 0.503, 0.01)]) is None
    assert spread.of([ve(REG, 0.9, 0.01)]) is None  # one pair: nothing to compare
    assert spread.of([ve(REG, 0.9, 0.01), Verdict(Outcome.UNSTABLE, "x")]) is None


def test_a_learner_bound_ring_pair_that_meets_differently_per_pair_is_not_a_regression(
        ) -> None:
    """Pairs of one unchanged ring pair ranged from 0.62 to 1.02, each pair's own interval
    tight: two agreeing REGRESSIONs are not enough, a third pair is measured, and the
    change is held to the spread between them."""
    first, second = ve(REG, 0.621, 0.02), ve(REG, 0.788, 0.02)
    assert confirm.wanted([first, second], RULE)  # agreed, but beyond their noise
    assert confirm.why_more([first, second]) == (
        "the pairs differ more than their turns' noise (0.621 (REGRESSION), 0.788 "
        "(REGRESSION))")
    third = ve(OK, 1.022, 0.02)
    assert not confirm.wanted([first, second, third], RULE)
    i, got = confirm.agreed([first, second, third], rule=RULE)
    assert got.outcome is Outcome.INCONCLUSIVE and i == 1
    s = spread.of([first, second, third])
    assert s is not None and s.pairs == 3 and math.expm1(s.tau) > 0.2
    assert got.ratio == pytest.approx(math.exp(-s.log_ratio))
    lo, hi = got.ci or (0, 0)
    assert lo < 0.98 < hi  # the threshold lies within the pairs' interval
    assert got.message.startswith(
        "one pair measured -21.2%, but pairs of side processes of the same two revisions "
        "scatter by ")
    assert ("beyond their own turns' noise (the pairs: 0.621, 0.788, 1.022), and against "
            "that spread the change is not resolved: ratio ") in got.message
    assert got.message.endswith(
        " over the 3 pairs. This workload's processes meet differently in every pair (a "
        "ring's collector and learner, several collectors, subprocess envs): a change "
        "within that spread is never called. Run again, or raise the threshold above the "
        "spread.")
    assert got.evidence is not None and got.evidence.method == "pairs"


def test_a_real_slowdown_of_the_bounding_process_clears_the_spread() -> None:
    """Small per-process offsets on top of a real 5% drop: still a REGRESSION, at about its
    true size, noted with the spread."""
    pairs = [ve(REG, 0.950, 0.002), ve(REG, 0.943, 0.002), ve(REG, 0.952, 0.002)]
    assert confirm.wanted(pairs[:2], RULE)
    i, got = confirm.agreed(pairs, rule=RULE)
    assert got.outcome is REG and i == 2 and got.ratio == 0.952
    assert "The pairs' ratios scatter by " in got.message
    assert "beyond their turns' noise, and the change clears that too: ratio 0.948 [" \
        in got.message
    # pairs that agree within their turns' noise: as before, no third pair, no note
    tight = [ve(REG, 0.950, 0.004), ve(REG, 0.951, 0.004)]
    assert not confirm.wanted(tight, RULE)
    i, got = confirm.agreed(tight, rule=RULE)
    assert got.outcome is REG and "scatter" not in got.message


def test_an_improvement_within_the_spread_is_not_called_either() -> None:
    pairs = [ve(IMP, 1.057, 0.004), ve(IMP, 1.021, 0.004), ve(OK, 1.003, 0.004)]
    _i, got = confirm.agreed(pairs, rule=RULE)
    assert got.outcome is Outcome.INCONCLUSIVE


def test_the_pairs_basis_is_worded_for_pairs() -> None:
    from pytest_perfgate.core.gate import decide

    ev = Evidence(0.05, 0.2, 2, 3, "pairs", between=0.18)
    v = decide(ev, RULE)
    assert v.outcome is Outcome.INCONCLUSIVE
    assert "over 3 pairs of side processes, spread between pairs 19.7%" in v.message
    assert v.message.endswith("The cause is the spread between pairs of side processes, which "
                              "more turns in one pair cannot narrow: run again, or raise the "
                              "threshold above it.")


def test_two_agreeing_pairs_of_processes_that_meet_get_a_third_pair() -> None:
    """An A/A ring pair on this machine: two pairs read 0.750 and 0.770, each interval
    excluding no change, while first pairs of unchanged code scatter with an sd of 0.17 in
    log ratio. Two pairs that agree say nothing of that spread: a third pair is measured,
    and the change is held to the spread of the three."""
    first, second = ve(REG, 0.750, 0.05), ve(REG, 0.770, 0.05)
    assert not confirm.wanted([first, second], RULE)  # one process a side: decided
    assert confirm.wanted([first, second], RULE, varies=True)
    assert confirm.why_more([first, second]) == (
        "to see the spread between pairs of this workload's processes (0.750 (REGRESSION), 0.770 "
        "(REGRESSION))")
    third = ve(OK, 0.995, 0.04)
    assert not confirm.wanted([first, second, third], RULE, varies=True)
    _i, got = confirm.agreed([first, second, third], rule=RULE)
    assert got.outcome is Outcome.INCONCLUSIVE
    # a real slowdown of a pair of processes that meet still stands with the third pair
    pairs = [ve(REG, 0.50, 0.02), ve(REG, 0.52, 0.02), ve(REG, 0.49, 0.02)]
    assert confirm.agreed(pairs, rule=RULE)[1].outcome is REG


def test_the_controller_measures_a_third_pair_when_the_sides_ran_several_streams() -> None:
    from ab_fakes import FakeLooks, FakeRun, controller, judge

    from pytest_perfgate.core.measure import Measurement
    from pytest_perfgate.core.window import Window

    def streams(s_per_step: float) -> Measurement:
        w = Window(8, 8 * s_per_step, 8 * s_per_step, streams=2)
        return Measurement((w, w, w), True, 0.0, 0)

    ctl, log, _ = controller([(0.75, ve(REG, 0.750, 0.05)), (0.77, ve(REG, 0.770, 0.05)),
                              (0.995, ve(OK, 0.995, 0.04))])
    measure = ctl._measure

    def with_streams(*args: object) -> object:
        _run, verdict = measure(*args)  # type: ignore[arg-type]
        return FakeRun(streams(0.001), streams(0.001 / verdict.ratio), FakeLooks(24)), verdict

    ctl._measure = with_streams  # type: ignore[assignment]
    j = judge(ctl, log)
    assert [x for x in log if x.startswith("start")] == ["start pair2", "start pair3"]
    assert j.verdict is not None and j.verdict.outcome is Outcome.INCONCLUSIVE


def test_processes_that_meet_and_calls_of_microseconds_vary_by_process() -> None:
    from pytest_perfgate.core.measure import Measurement
    from pytest_perfgate.core.window import Window

    def m(wall: float, calls: int, streams: int = 1) -> Measurement:
        w = Window(8, wall, wall, calls=calls, streams=streams)
        return Measurement((w, w), True, 0.0, 0)

    assert spread.varies_by_process(m(0.1, 10, streams=2))  # a ring pair's windows
    assert spread.varies_by_process(m(0.1, 60_000))  # 1.7 us a call: pytest-benchmark's
    assert not spread.varies_by_process(m(0.1, 50))  # 2 ms a step
    assert not spread.varies_by_process(m(0.1, 0))
