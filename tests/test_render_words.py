"""The failure text's words agree with its figures: "grew most" only names a phase that
grew against a baseline (a run with no baseline has none to grow from)."""

from __future__ import annotations

from pytest_perfgate.core.gate import Outcome, Rule, Verdict
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import BenchResult, PhaseSummary
from pytest_perfgate.report.render import explain

PHASES = {"env_step": PhaseSummary(2.0, 0.49, 1.0), "policy": PhaseSummary(1.0, 0.3, 1.0)}


def judged(outcome: Outcome, baseline: dict[str, float]) -> Judged:
    r = BenchResult("walk", (10.0, 10.0, 10.0), 1e5, phases=PHASES)
    return Judged(r, Verdict(outcome, "why"), Rule(), "t::walk",
                  ["a" * 40] if baseline else [], 1e5 if baseline else None, baseline)


def test_no_baseline_names_no_phase_that_grew() -> None:
    text = explain(judged(Outcome.NO_BASELINE, {}))
    assert "grew most" not in text and "env_step" in text  # the phases are still listed


def test_nothing_grew_names_nothing() -> None:
    assert "grew most" not in explain(judged(Outcome.OK, {"env_step": 2.5, "policy": 1.0}))


def test_the_phase_that_grew_is_named_with_its_figures() -> None:
    text = explain(judged(Outcome.REGRESSION, {"env_step": 1.0, "policy": 1.0}))
    assert "  grew most: env_step 1->2 ms" in text


def test_a_spoiled_run_sets_neither_the_level_nor_the_spread() -> None:
    """One run of four whose windows outside load mostly spoiled made the spread 10.5%
    where the clean runs scatter 1.5%, and the message blamed the runner."""
    import math
    import statistics

    from pytest_perfgate.core.evidence import history_evidence

    clean = [[100.0] * 6, [101.5] * 6, [98.5] * 6]
    spoiled = [125.0] * 6
    runs = [*clean, spoiled]
    ev = history_evidence([100.0] * 6, runs, runs, baseline_polluted=[0, 0, 0, 4],
                          spread_polluted=[0, 0, 0, 4])
    expected = statistics.stdev(math.log(r[0]) for r in clean)
    assert ev.between == expected and ev.level_runs == (0, 1, 2)
    ev_old = history_evidence([100.0] * 6, runs, runs, baseline_polluted=[0, 0, 0, 4])
    assert ev_old.between is not None and ev_old.between > 5 * expected  # without the counts
