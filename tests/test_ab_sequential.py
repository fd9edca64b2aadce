"""The sequential A/B test: its boundaries, its error rates, the load-change rule, its texts.

Everything runs on scripted fake sides, a fake clock and a fake /proc/stat: no timing.
"""

from __future__ import annotations

import math
import random

import pytest

from pytest_perfgate.core.evidence import Evidence, paired_evidence
from pytest_perfgate.core.gate import Outcome, Rule, decide, sequential_decide
from pytest_perfgate.core.load import LoadSample
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.sequential import boundaries, obf_spent, plan
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.modes.ab.abba import load_changed, measure_sequential
from pytest_perfgate.session.options import OptionError, Options, parse_looks

RULE = Rule(threshold=0.02, alpha=0.01)

# ---- the design ----------------------------------------------------------------------------


def test_boundaries_match_the_published_obrien_fleming_spending_values() -> None:
    # Lan-DeMets O'Brien-Fleming spending, 4 equally spaced looks, one-sided 0.025: the
    # values gsDesign (sfLDOF) and ldbounds print
    got = boundaries((0.25, 0.5, 0.75, 1.0), 0.025)
    assert got == pytest.approx((4.3326, 2.9631, 2.3590, 2.0141), abs=2e-3)
    assert boundaries((1.0,), 0.01) == pytest.approx((2.3263,), abs=1e-4)  # one look: plain
    assert obf_spent(0.5, 0.01) < 0.01 / 10 and obf_spent(1.0, 0.01) == 0.01
    # a run cut short spends the rest of alpha at its last look
    short = boundaries((0.25, 0.6), 0.01)
    assert short[1] < boundaries((0.25, 0.6, 1.0), 0.01, spend_all=False)[1]


def test_plan_spaces_the_looks_and_merges_close_ones() -> None:
    assert plan(288, 4, 0.01).looks == (72, 144, 216, 288)
    assert plan(6, 4, 0.01).looks == (6,)  # looks are at least 8 turns apart
    assert plan(20, 4, 0.01).looks == (10, 20)
    with pytest.raises(ValueError, match=r"looks=0: give a whole number of looks from 1 to 10"):
        plan(96, 0, 0.01)
    with pytest.raises(ValueError, match=r"max_turns=1: the paired test needs >= 2 turns"):
        plan(1, 4, 0.01)


def _trial(rng: random.Random, shift: float, sd: float, design_looks: int,
           peek: bool = False) -> Outcome:
    """One simulated A/B run: per-turn log ratios N(shift, sd), judged at each look."""
    design = plan(96, design_looks, RULE.alpha)
    diffs = [rng.gauss(shift, sd) for _ in range(design.max_turns)]
    taken: list[int] = []
    for k, at in enumerate(design.looks):
        taken.append(at)
        base = [1.0] * at
        head = [math.exp(d) for d in diffs[:at]]
        final = k == len(design.looks) - 1
        level = RULE.alpha if peek else design.level(taken, final)
        v = sequential_decide(paired_evidence(base, head), RULE, level, final)
        if v is not None:
            return v.outcome
    raise AssertionError("the last look must decide")


def test_looks_hold_false_alarms_at_alpha_where_peeking_does_not() -> None:
    rng = random.Random(3)
    n = 600
    spent = sum(_trial(rng, 0.0, 0.06, 4) is Outcome.REGRESSION for _ in range(n))
    peeked = sum(_trial(rng, 0.0, 0.06, 4, peek=True) is Outcome.REGRESSION for _ in range(n))
    assert spent <= 0.01 * n + 6  # alpha with a binomial margin
    assert peeked > spent  # testing every look at alpha is what the spending prevents


def test_a_drop_of_the_threshold_is_caught_and_clear_cases_stop_early() -> None:
    rng = random.Random(4)
    shift = -math.log(1 - 0.025)  # a drop a little above the 2% threshold
    outs = [_trial(rng, shift, 0.02, 4) for _ in range(200)]
    assert outs.count(Outcome.REGRESSION) >= 190  # >= 95% at se ~ 0.2%
    # the old rule (estimate above the threshold) catches a drop at the threshold half the
    # time, however many turns: the sequential rule catches it
    at = -math.log(1 - 0.02)
    old = [decide(paired_evidence([1.0] * 96, [math.exp(rng.gauss(at, 0.02))
                                               for _ in range(96)]), RULE).outcome
           for _ in range(200)]
    new = [_trial(rng, at, 0.02, 4) for _ in range(200)]
    assert old.count(Outcome.REGRESSION) < 140 < new.count(Outcome.REGRESSION)


# ---- the load-change rule, through the controller ------------------------------------------


class Box:
    """A fake 2-CPU machine: a hog that takes one core while ``hog`` is set, the clock, and
    the cumulative ticks /proc/stat would show."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.hog = False
        self.busy_s = 0.0
        self.rng = random.Random(7)

    def sample(self) -> LoadSample:
        return LoadSample(busy=int(self.busy_s * 100),
                          total=int(self.clock.wall_ns() / 1e9 * 100 * 2), ncpu=2)


class Side:
    """A side whose step costs 1 ms (x1.5 while the hog runs) x (1 + slowdown); ``hog``:
    the hog switches on for this side's windows and off for the other's (the adversary)."""

    def __init__(self, box: Box, slowdown: float = 0.0, hog: bool | None = None,
                 noise: float = 0.01) -> None:
        self.box, self.slowdown, self.hog_during, self.noise = box, slowdown, hog, noise

    def run_window(self, duration_s: float) -> RawWindow:
        box = self.box
        if self.hog_during is not None:
            box.hog = self.hog_during
        per = 1e-3 * (1.5 if box.hog else 1.0) * (1 + self.slowdown)
        per *= math.exp(box.rng.gauss(0, self.noise))
        calls = max(1, round(duration_s / per))
        wall = calls * per
        box.clock.advance(wall, 0.0)
        box.busy_s += wall * (1.0 if box.hog else 0.0)  # the side's own CPU: cpu_s = 0 here
        return RawWindow(calls * 10, wall, 0.0, {}, calls)


def _run(base: Side, head: Side, box: Box, turns: int = 96, looks: int = 4):  # type: ignore[no-untyped-def]
    meter = Meter(MeasureConfig(warmup_window_s=0.05, warmup_max_s=0.3), clock=box.clock,
                  load_probe=box)
    return measure_sequential(base, head, meter, plan(turns, looks, RULE.alpha), 0.1, RULE)


def test_load_switching_on_for_head_turns_only_is_left_out_not_a_regression() -> None:
    box = Box()
    # every other head turn: the hog runs during the head's turn and not the base's
    flip = {"n": 0}

    class Adversary(Side):
        def run_window(self, duration_s: float) -> RawWindow:
            if self is head:
                flip["n"] += 1
            self.hog_during = self is head and flip["n"] % 2 == 0
            return super().run_window(duration_s)

    base, head = Adversary(box), Adversary(box)
    run = _run(base, head, box)
    assert run.looks.excluded > 0
    assert run.verdict.outcome is not Outcome.REGRESSION
    assert "turn pair(s) left out because the outside load changed between their two " \
        "turns" in run.verdict.message
    # without the rule the same machine reads as a regression (the rule is what saves it)
    box2 = Box()
    flip["n"] = 0
    base, head = Adversary(box2), Adversary(box2)
    meter = Meter(MeasureConfig(warmup_window_s=0.05, warmup_max_s=0.3, load_limit=1e9),
                  clock=box2.clock, load_probe=box2)
    bad = measure_sequential(base, head, meter, plan(96, 4, RULE.alpha), 0.1, RULE)
    assert bad.looks.excluded == 0 and bad.verdict.outcome is Outcome.REGRESSION


def test_load_on_in_both_turns_cancels_and_is_kept() -> None:
    box = Box()
    box.hog = True  # a steady neighbour: both turns of every pair see it
    run = _run(Side(box), Side(box), box)
    assert run.looks.excluded == 0 and run.verdict.outcome is Outcome.OK


def test_a_load_that_keeps_changing_cuts_the_run_short_and_says_so() -> None:
    box = Box()
    base, head = Side(box, hog=False), Side(box, hog=True)  # every pair changes
    run = _run(base, head, box)
    assert run.verdict.outcome is Outcome.INCONCLUSIVE
    assert len(run.looks.pairs) == run.looks.excluded == 25  # the re-measure budget (96 // 4) + 1
    assert run.verdict.message == (
        "only 0 turn pair(s) kept: the outside load changed between the two turns of 25 "
        "pairs, so their ratios measure the other work on this machine, not the code; run "
        "again when the machine is quiet")
    assert len(run.head.windows) == 25  # recorded anyway, as measured


def test_load_changed_needs_both_readings() -> None:
    from pytest_perfgate.core.window import Window

    w = Window(10, 0.1, 0.1)
    hot = Window(10, 0.1, 0.1, other_load=1.0)
    cold = Window(10, 0.1, 0.1, other_load=0.1)
    assert load_changed(hot, cold, 0.25) and not load_changed(hot, hot, 0.25)
    assert not load_changed(w, hot, 0.25)  # no /proc/stat: nothing to judge by


def test_a_gross_regression_stops_at_the_first_look() -> None:
    box = Box()
    run = _run(Side(box), Side(box, slowdown=0.5), box)
    assert run.verdict.outcome is Outcome.REGRESSION
    assert run.looks.taken == (24,) and len(run.looks.pairs) == 24
    assert "over 24 interleaved turns (stopped at look 1 of 4, of at most 96)" in \
        run.verdict.message
    s = run.looks.summary()
    assert s["turns"] == 24 and s["looks_taken"] == 1 and s["looks"] == [24, 48, 72, 96]


# ---- the texts -----------------------------------------------------------------------------


def _ev(est: float, se: float, n: int = 96, **kw: object) -> Evidence:
    return Evidence(est, se, float(n - 2 * int(0.2 * n) - 1), n, "paired", **kw)  # type: ignore[arg-type]


def test_every_sequential_message() -> None:
    level = 0.01
    v = sequential_decide(_ev(0.003, 0.002), RULE, level, True)
    assert v is not None and v.outcome is Outcome.OK
    assert v.message == ("0.3% slower over 96 interleaved turns: no drop larger than 0.8% "
                         "at 99% confidence (threshold 2%)")
    v = sequential_decide(_ev(0.012, 0.002), RULE, level, True)
    assert v is not None and v.outcome is Outcome.OK
    assert v.message == ("1.2% slower over 96 interleaved turns: a real drop, but no larger "
                         "than 1.7% at 99% confidence, within the 2% threshold")
    v = sequential_decide(_ev(-0.01, 0.002), RULE, level, True)
    assert v is not None and v.outcome is Outcome.OK
    assert v.message == ("1.0% faster over 96 interleaved turns: no drop at all (a rise of at "
                         "least 0.5%) at 99% confidence (threshold 2%)")
    v = sequential_decide(_ev(0.03, 0.004), RULE, level, True)
    assert v is not None and v.outcome is Outcome.REGRESSION
    assert v.message == ("throughput fell 3.0% (threshold 2%): by 2.0% to 3.9% at 99% "
                         "confidence, p=2.3e-10 over 96 interleaved turns")
    v = sequential_decide(_ev(-0.04, 0.004), RULE, level, True)
    assert v is not None and v.outcome is Outcome.IMPROVEMENT
    assert v.message == ("throughput rose 4.1%: by 3.1% to 5.1% at 99% confidence over 96 "
                         "interleaved turns; the baseline will move up once this lands")
    v = sequential_decide(_ev(0.01, 0.006), RULE, level, True)
    assert v is not None and v.outcome is Outcome.INCONCLUSIVE
    assert v.message == ("measured 1.0% slower over 96 interleaved turns, but at 99% "
                         "confidence the change lies between 0.4% faster and 2.4% slower: that "
                         "holds both no drop and the 2% threshold. About 95 more turns would "
                         "resolve 2% if the measured change holds: run again with "
                         "--perfgate-ab-turns=191, or raise the threshold.")
    assert sequential_decide(_ev(0.01, 0.006), RULE, level, False) is None  # measure on


def test_look_and_load_texts() -> None:
    v = sequential_decide(_ev(0.01, 0.006, 40, look=2, looks=4, max_turns=96, excluded=3),
                          RULE, 0.003, False)
    assert v is None
    v = sequential_decide(_ev(0.001, 0.001, 48, look=2, looks=4, max_turns=96, excluded=3),
                          RULE, 0.003, False)
    assert v is not None and v.message == (
        "0.1% slower over 48 interleaved turns (stopped at look 2 of 4, of at most 96), 3 "
        "more turn pair(s) left out because the outside load changed between their two "
        "turns: no drop larger than 0.4% at 99% confidence (threshold 2%)")
    v = sequential_decide(_ev(0.01, 0.006, 60, look=3, looks=4, max_turns=96, excluded=25,
                              cut_short=True), RULE, 0.01, True)
    assert v is not None and v.outcome is Outcome.INCONCLUSIVE
    assert v.message.startswith("measured 1.0% slower over 60 interleaved turns, 25 more "
                                "turn pair(s) left out because the outside load changed "
                                "between their two turns (re-measuring ran out), but")
    assert v.message.endswith("raise the threshold. The outside load also changed during 25 "
                              "turn pair(s): a quiet machine needs fewer.")


def test_the_fixed_paired_gate_also_names_the_turns_it_needs() -> None:
    v = decide(_ev(0.01, 0.012), RULE)
    assert v.outcome is Outcome.INCONCLUSIVE
    assert v.message.endswith("About 665 more turns would resolve 2% if the measured change "
                              "holds: run again with --perfgate-ab-turns=761, or raise the "
                              "threshold.")


# ---- the option ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("0", "'0' is too small: use a whole number of looks >= 1, e.g. 4"),
    ("many", "'many' is not a whole number of looks: use e.g. 4"),
    ("11", "'11' is too many looks: use 1 to 10 (more looks stop a run hardly any sooner), "
           "e.g. 4"),
])
def test_looks_option_names_the_value_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(OptionError) as e:
        parse_looks(text)
    assert str(e.value) == message


def test_looks_flow_through_options() -> None:
    assert Options().ab_looks == 4
    assert Options.resolve(True, {}, {"ab_looks": "2"}, {}).ab_looks == 2
    with pytest.raises(OptionError, match=r"^ini option perfgate_ab_looks: '0' is too small"):
        Options.resolve(True, {}, {"ab_looks": "0"}, {})


def test_looks_flag_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_perf="def test_walk(perfgate):\n    pass\n")
    res = pytester.runpytest_subprocess("--perfgate", "--perfgate-ab-looks=0")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "argument --perfgate-ab-looks: '0' is too small: use a whole number of looks >= 1, " \
        "e.g. 4" in res.stderr.str()


def test_an_exact_no_change_says_so_without_a_rise_of_minus_zero() -> None:
    """A fake clock's A/A measures exactly 1.000: "no drop at all", no "-0.0%" rise."""
    from pytest_perfgate.core.evidence import Evidence
    from pytest_perfgate.core.gate import Outcome, Rule, sequential_decide

    v = sequential_decide(Evidence(0.0, 0.0, 10, 24, "paired"), Rule(threshold=0.02),
                          0.005, final=True)
    assert v is not None and v.outcome is Outcome.OK
    assert v.message == ("0.0% slower over 24 interleaved turns: no drop at all at 99% "
                         "confidence (threshold 2%)"), v.message
    v = sequential_decide(Evidence(-0.05, 0.001, 10, 24, "paired"), Rule(threshold=0.2),
                          0.005, final=True)
    assert v is not None and "no drop at all (a rise of at least 4." in v.message
