"""The gate's decision rule, on synthetic samples (no clock, no machine)."""

from __future__ import annotations

import math
import random

import pytest

from pytest_perfgate.core.evidence import history_evidence, paired_evidence
from pytest_perfgate.core.gate import Outcome, Rule, decide, evaluate


def runs(medians: list[float], k: int = 8, jitter: float = 0.01, seed: int = 0
         ) -> list[list[float]]:
    rng = random.Random(seed)
    return [[m * math.exp(rng.gauss(0, jitter)) for _ in range(k)] for m in medians]


BASE = runs([100, 102, 99, 101, 100])  # 1-2% run-to-run spread


def test_unchanged_speed_is_ok() -> None:
    v = evaluate(runs([100.5], seed=9)[0], BASE, Rule())
    assert v.outcome is Outcome.OK
    assert v.ratio == pytest.approx(1.0, abs=0.02)
    assert v.ci[0] < v.ratio < v.ci[1]


def test_twice_as_slow_is_regression() -> None:
    v = evaluate(runs([200], seed=3)[0], BASE, Rule())
    assert v.outcome is Outcome.REGRESSION
    assert v.ratio == pytest.approx(0.5, rel=0.03)
    assert v.p_value < 0.01
    assert v.fails(Rule())
    assert "fell 50" in v.message


def test_faster_is_improvement_and_passes() -> None:
    v = evaluate(runs([70], seed=4)[0], BASE, Rule())
    assert v.outcome is Outcome.IMPROVEMENT
    assert not v.fails(Rule())
    assert "baseline will move" in v.message


def test_drifting_history_is_inconclusive_not_a_guess() -> None:
    noisy = runs([100, 130, 90, 120, 95], seed=1)  # the 1.5x drift of docs/design.md §1
    v = evaluate(runs([108], seed=2)[0], noisy, Rule(threshold=0.05))
    assert v.outcome is Outcome.INCONCLUSIVE
    assert v.resolvable > 0.05
    assert "can only resolve drops of" in v.message and "--perfgate-ab" in v.message
    assert not v.fails(Rule())
    assert v.fails(Rule(inconclusive="fail"))


def test_slowdown_at_threshold_is_never_a_silent_pass() -> None:
    for seed in range(20):
        noisy = runs([100, 100 * (1 + seed / 40), 100, 97, 103], seed=seed)
        v = evaluate(runs([125], seed=seed + 50)[0], noisy, Rule())
        assert v.outcome in (Outcome.REGRESSION, Outcome.INCONCLUSIVE), v


def test_significant_but_small_drop_is_ok() -> None:
    tight = runs([100] * 5, jitter=0.001)
    v = evaluate(runs([102], jitter=0.001, seed=7)[0], tight, Rule(threshold=0.05))
    assert v.outcome is Outcome.OK and v.p_value < 0.01


def test_drift_inside_runs_is_not_averaged_away() -> None:
    # baseline medians agree by luck, but each run drifts 10% between its halves
    base = [[90, 92, 91, 90, 110, 108, 109, 110], [110, 109, 111, 110, 90, 91, 90, 92]]
    ev = history_evidence([100, 101, 99, 100, 100, 99, 101, 100], base)
    assert ev.between is not None and ev.between < 0.01
    assert ev.within is not None and ev.within > 0.04  # the split halves disagree
    assert ev.se > 0.04  # not stdev/sqrt(8) of the windows


def test_single_baseline_run_is_too_thin_to_judge() -> None:
    # One earlier run shows nothing of the run-to-run drift: no verdict, and say what is
    # missing (the window spread is the model docs/design.md §1 rejects).
    v = evaluate(runs([200])[0], runs([100]), Rule())
    assert v.outcome is Outcome.INCONCLUSIVE and v.evidence.n_base == 1
    assert v.message.startswith("measured 50.0% slower against 1 baseline run(s)")
    assert "record at least 2 runs of an earlier commit before gating" in v.message
    assert v.p_value is None and v.ci is None and not v.fails(Rule())


def test_no_baseline_and_unstable() -> None:
    assert evaluate([1.0, 1.0], [], Rule()).outcome is Outcome.NO_BASELINE
    v = evaluate([1.0, 1.0], BASE, Rule(), steady=False)
    assert v.outcome is Outcome.UNSTABLE and v.fails(Rule())
    assert not v.fails(Rule(unstable="warn"))


def test_paired_evidence_cancels_common_drift() -> None:
    rng = random.Random(5)
    drift = [math.exp(rng.uniform(-0.3, 0.3)) for _ in range(40)]  # +-35% machine speed
    base = [100 * d * math.exp(rng.gauss(0, 0.005)) for d in drift]
    head = [105 * d * math.exp(rng.gauss(0, 0.005)) for d in drift]
    v = decide(paired_evidence(base, head), Rule(threshold=0.03))
    assert v.outcome is Outcome.REGRESSION
    assert 1 / v.ci[1] < 1.05 < 1 / v.ci[0]


def test_rule_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="threshold=1.5 must be a fraction"):
        Rule(threshold=1.5)
    with pytest.raises(ValueError, match="unstable='maybe'"):
        Rule(unstable="maybe")
    with pytest.raises(ValueError, match="equal, >= 2 turns"):
        paired_evidence([1.0], [1.0, 2.0])


def test_longer_history_sets_the_spread() -> None:
    recent = runs([100, 100.5, 99.5], jitter=0.002, seed=11)
    older = runs([100, 120, 85, 110, 92], jitter=0.002, seed=12)
    cur = runs([109], jitter=0.002, seed=13)[0]
    narrow = evaluate(cur, recent, Rule())
    wide = evaluate(cur, recent, Rule(), spread=[*recent, *older])
    assert narrow.outcome is Outcome.REGRESSION
    assert wide.outcome is Outcome.INCONCLUSIVE
    assert wide.ratio == pytest.approx(narrow.ratio)


@pytest.mark.parametrize(("fraction", "text"), [
    (0.05, "5%"), (0.005, "0.5%"), (0.0025, "0.25%"), (0.1, "10%"), (0.167, "16.7%"),
    (1.0, "100%"), (2.1e-6, "0.00021%"), (0.0, "0%")])
def test_percent_keeps_the_digits_a_threshold_needs(fraction: float, text: str) -> None:
    from pytest_perfgate.core.gate import percent

    assert percent(fraction) == text
