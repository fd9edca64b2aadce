"""A change is called when two pairs of side processes agree (modes/ab/confirm.py).

The rule on scripted verdicts, and the controller's use of it on scripted pair measurements
(no processes, no timing); tests/test_ab.py runs it with real side processes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_perfgate.core.gate import Outcome, Rule, Verdict
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.measure import Measurement
from pytest_perfgate.core.progress import LiveProgress
from pytest_perfgate.core.timing import FakeClock
from pytest_perfgate.core.window import Window
from pytest_perfgate.modes.ab import confirm
from pytest_perfgate.modes.ab.controller import ABController, ABSetup
from pytest_perfgate.modes.ab.remote import SideError, SideSpec
from pytest_perfgate.modes.mode import BenchCall

REG, OK, IMP = Outcome.REGRESSION, Outcome.OK, Outcome.IMPROVEMENT


def v(outcome: Outcome, ratio: float | None) -> Verdict:
    return Verdict(outcome, f"env-steps/s {outcome.value.lower()} at {ratio}", ratio=ratio,
                   ci=None if ratio is None else (ratio * 0.99, ratio * 1.01))


# ---- the rule ------------------------------------------------------------------------------


def test_only_a_called_change_is_measured_again_until_two_pairs_agree() -> None:
    assert not confirm.wanted([])
    for outcome in (OK, Outcome.INCONCLUSIVE, Outcome.UNSTABLE, Outcome.NO_BASELINE):
        assert not confirm.wanted([v(outcome, 1.0)])
    assert confirm.wanted([v(REG, 0.9)]) and confirm.wanted([v(IMP, 1.1)])
    assert not confirm.wanted([v(REG, 0.9), v(REG, 0.91)])  # agreed
    assert confirm.wanted([v(REG, 0.96), v(OK, 1.0)])  # a tie: a third pair
    assert confirm.wanted([v(REG, 0.96), v(Outcome.UNSTABLE, None)])
    assert not confirm.wanted([v(REG, 0.96), v(OK, 1.0), v(IMP, 1.1)])  # three at most


def test_two_agreeing_pairs_give_the_verdict_of_the_one_nearer_no_change() -> None:
    i, got = confirm.agreed([v(REG, 0.887), v(REG, 0.893)])
    assert i == 1 and got.outcome is REG and got.ratio == 0.893
    assert got.message == ("env-steps/s regression at 0.893. A fresh pair of side processes "
                           "confirmed it (0.887 (REGRESSION), 0.893 (REGRESSION)); the one "
                           "nearer no change stands.")
    i, got = confirm.agreed([v(IMP, 1.05), v(IMP, 1.2)])
    assert i == 0 and got.ratio == 1.05


def test_a_third_pair_breaks_a_tie_and_says_the_first_was_its_processes() -> None:
    i, got = confirm.agreed([v(REG, 0.959), v(OK, 1.003), v(OK, 0.998)])
    assert i == 2 and got.outcome is OK and got.ratio == 0.998
    assert got.message.endswith(
        "Three pairs of side processes measured 0.959 (REGRESSION), 1.003 (OK), 0.998 (OK): "
        "two agree, so the first pair's REGRESSION was a difference between its processes, "
        "not the code's.")
    i, got = confirm.agreed([v(REG, 0.9), v(Outcome.UNSTABLE, None), v(REG, 0.92)])
    assert i == 2 and got.outcome is REG
    assert "measured 0.900 (REGRESSION), UNSTABLE, 0.920 (REGRESSION): two agree." in got.message


def test_two_fresh_pairs_that_cannot_judge_leave_the_change_unconfirmed() -> None:
    i, got = confirm.agreed([v(REG, 0.9), v(Outcome.UNSTABLE, None), v(Outcome.UNSTABLE, None)])
    assert i == 2 and got.outcome is Outcome.UNSTABLE
    assert got.message.endswith("two agree, so the first pair's REGRESSION is not confirmed.")


def test_three_pairs_that_all_disagree_are_inconclusive_and_say_why() -> None:
    i, got = confirm.agreed([v(REG, 0.93), v(OK, 1.0), v(IMP, 1.08)])
    assert i == 1 and got.outcome is Outcome.INCONCLUSIVE and got.ratio == 1.0
    assert got.message == (
        "three pairs of side processes of the same two revisions measured 0.930 "
        "(REGRESSION), 1.000 (OK), 1.080 (IMPROVEMENT): processes of the same code differ "
        "here by as much as the change, so no pair's verdict stands; run again, or gate "
        "instruction counts (--perfgate-counts), which do not depend on the process")
    assert confirm.record([v(REG, 0.93), v(Outcome.UNSTABLE, None)]) == [
        {"ratio": 0.93, "outcome": "REGRESSION"}, {"ratio": None, "outcome": "UNSTABLE"}]


def test_one_pair_is_its_own_verdict() -> None:
    one = v(REG, 0.9)
    assert confirm.agreed([one]) == (0, one)


# ---- the controller --------------------------------------------------------------------------


class FakeLooks:
    def __init__(self, turns: int) -> None:
        self.turns = turns

    def summary(self) -> dict[str, object]:
        return {"turns": self.turns}


@dataclasses.dataclass
class FakeRun:
    base: Measurement
    head: Measurement
    looks: FakeLooks


def measurement(s_per_step: float) -> Measurement:
    w = Window(8, 8 * s_per_step, 8 * s_per_step)
    return Measurement((w, w, w), True, 0.0, 0)


class FakeSide:
    def __init__(self) -> None:
        self.proc = type("P", (), {"pid": 1})()


class FakePair:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name
        self.base, self.head = FakeSide(), FakeSide()

    def close(self) -> None:
        self.log.append(f"close {self.name}")

    def done(self) -> None:
        self.log.append(f"done {self.name}")


class Shown:
    """A live status line that logs what the progress shows."""

    live = True

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def show(self, text: str) -> None:
        self.log.append(text)

    def done(self, text: str) -> None:
        self.log.append(text)


def controller(script: list[tuple[float, Verdict] | BaseException], confirm_on: bool = True,
               fresh_fails: bool = False) -> tuple[ABController, list[str], list[Judged]]:
    spec = SideSpec("base", Path("."))
    sink: list[Judged] = []
    log: list[str] = []
    shown = Shown(log)
    meter = SimpleNamespace(progress=LiveProgress(shown, FakeClock()))
    ctl = ABController(ABSetup(spec, spec, "c" * 40, "main", "."), lambda: meter,  # type: ignore[arg-type, return-value]
                       sink.append, 96, 0.1, 4, confirm=confirm_on)
    pairs = iter(range(2, 9))

    def measure(base: Any, head: Any, call: BenchCall, metric: Any) -> Any:
        step = script.pop(0)
        if isinstance(step, BaseException):
            raise step
        ratio, verdict = step
        log.append(f"measure {verdict.outcome.value}")
        return FakeRun(measurement(0.001), measurement(0.001 / ratio), FakeLooks(24)), verdict

    def fresh(call: BenchCall, earlier: list[str]) -> Any:
        if fresh_fails:
            raise SideError("base side closed its connection while we waited for its "
                            "measure() call")
        name = f"pair{next(pairs)}"
        log.append(f"start {name}")
        return FakePair(log, name)

    ctl._measure = measure  # type: ignore[method-assign]
    ctl._fresh_pair = fresh  # type: ignore[method-assign]
    return ctl, log, sink


CALL = BenchCall("test_walk", "t.py::test_walk", 8, Rule(threshold=0.05))


def judge(ctl: ABController, log: list[str]) -> Judged:
    return ctl._judge(FakePair(log, "pair1"), None, None, CALL)  # type: ignore[arg-type]


def test_a_regression_two_pairs_agree_on_is_recorded_from_the_standing_pair() -> None:
    ctl, log, sink = controller([(0.887, v(REG, 0.887)), (0.893, v(REG, 0.893))])
    j = judge(ctl, log)
    assert log == ["measure REGRESSION",
                   "perfgate: : pair 2 of side processes, to confirm 0.887 (REGRESSION) (0.0 s)",
                   "start pair2", "measure REGRESSION", "close pair2", "done pair1"]
    assert sink == [j] and j.verdict is not None and j.verdict.outcome is REG
    assert j.verdict.ratio == 0.893 and "confirmed it" in j.verdict.message
    # the figures are the standing pair's: the head's rate over the base's is its ratio
    assert j.baseline_rate is not None
    assert j.result.rate / j.baseline_rate == pytest.approx(0.893)
    assert j.result.extra["ab_pairs"] == [{"ratio": 0.887, "outcome": "REGRESSION"},
                                          {"ratio": 0.893, "outcome": "REGRESSION"}]


def test_a_first_pairs_false_alarm_is_overturned_by_two_fresh_pairs() -> None:
    ctl, log, _ = controller([(0.959, v(REG, 0.959)), (1.003, v(OK, 1.003)),
                              (0.998, v(OK, 0.998))])
    j = judge(ctl, log)
    assert [x for x in log if not x.startswith("perfgate:")] == [
        "measure REGRESSION", "start pair2", "measure OK", "start pair3", "measure OK",
        "close pair2", "close pair3", "done pair1"]
    assert log[4].endswith("pair 3 of side processes, to confirm 0.959 (REGRESSION), 1.003 "
                           "(OK) (0.0 s)")
    assert j.verdict is not None and j.verdict.outcome is OK and j.verdict.ratio == 0.998
    assert "the first pair's REGRESSION was a difference between its processes" in \
        j.verdict.message


def test_an_overturned_change_is_shown_though_it_ends_ok() -> None:
    from pytest_perfgate.report.render import notes, worth_a_line

    ctl, log, _ = controller([(0.959, v(REG, 0.959)), (1.003, v(OK, 1.003)),
                              (0.998, v(OK, 0.998))])
    (line,) = notes([judge(ctl, log)])
    assert line.startswith("test_walk: OK: env-steps/s ok at 0.998. Three pairs of side ")
    ctl, log, _ = controller([(1.0, v(OK, 1.0))])
    plain = judge(ctl, log)
    assert notes([plain]) == [] and not worth_a_line(plain)


def test_ok_is_not_measured_again_and_the_switch_turns_confirming_off() -> None:
    ctl, log, _ = controller([(1.0, v(OK, 1.0))])
    j = judge(ctl, log)
    assert log == ["measure OK", "done pair1"] and "ab_pairs" not in j.result.extra
    ctl, log, _ = controller([(0.9, v(REG, 0.9))], confirm_on=False)
    j = judge(ctl, log)
    assert log == ["measure REGRESSION", "done pair1"]
    assert j.verdict is not None and j.verdict.outcome is REG


def test_a_tie_whose_third_pair_failed_is_inconclusive() -> None:
    ctl, log, _ = controller([(0.9, v(REG, 0.9)), (1.0, v(OK, 1.0)),
                              SideError("head side: the workload raised")])
    j = judge(ctl, log)
    assert j.verdict is not None and j.verdict.outcome is Outcome.INCONCLUSIVE
    assert j.verdict.message.startswith("two pairs of side processes of the same two "
                                        "revisions measured 0.900 (REGRESSION), 1.000 (OK)")
    assert j.verdict.message.endswith("could not confirm it: head side: the workload raised.")
    assert log[-3:] == ["close pair2", "close pair3", "done pair1"]


def test_a_fresh_pair_that_fails_leaves_the_first_verdict_saying_so() -> None:
    ctl, log, _ = controller([(0.9, v(REG, 0.9))], fresh_fails=True)
    j = judge(ctl, log)
    assert j.verdict is not None and j.verdict.outcome is REG
    assert j.verdict.message.endswith(
        "A fresh pair of side processes could not confirm it: base side closed its "
        "connection while we waited for its measure() call.")


def test_an_interrupt_while_confirming_ends_the_fresh_pair() -> None:
    ctl, log, sink = controller([(0.9, v(REG, 0.9)), KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        judge(ctl, log)
    assert log[2:] == ["start pair2", "close pair2"] and sink == []


def test_the_option_reaches_both_uses() -> None:
    from pytest_perfgate.session.options import Options

    assert Options().ab_confirm is True
    assert Options.resolve(True, {}, {}, {"PERFGATE_AB_CONFIRM": "off"}).ab_confirm is False
    assert Options.resolve(True, {"ab_confirm": True}, {},
                           {"PERFGATE_AB_CONFIRM": "off"}).ab_confirm is True
