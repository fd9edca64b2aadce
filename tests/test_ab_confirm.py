"""A change is called when fresh pairs of side processes agree (modes/ab/confirm.py).

The rule on scripted verdicts, and the controller's use of it on scripted pair measurements
(no processes, no timing); tests/test_ab.py runs it with real side processes.
"""

from __future__ import annotations

import threading
from multiprocessing import Pipe
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ab_fakes import controller, judge

from pytest_perfgate.core.gate import Outcome, Verdict
from pytest_perfgate.core.window import RawWindow
from pytest_perfgate.modes.ab import confirm
from pytest_perfgate.modes.ab.remote import Pair, Side, SideError, SideSpec
from pytest_perfgate.modes.ab.side import serve

REG, OK, IMP = Outcome.REGRESSION, Outcome.OK, Outcome.IMPROVEMENT


def v(outcome: Outcome, ratio: float | None) -> Verdict:
    return Verdict(outcome, f"env-steps/s {outcome.value.lower()} at {ratio}", ratio=ratio,
                   ci=None if ratio is None else (ratio * 0.99, ratio * 1.01))


# ---- the rule ------------------------------------------------------------------------------


def test_a_called_change_is_measured_again_until_the_fresh_pairs_decide() -> None:
    assert not confirm.wanted([])
    for outcome in (OK, Outcome.INCONCLUSIVE, Outcome.UNSTABLE, Outcome.NO_BASELINE):
        assert not confirm.wanted([v(outcome, 1.0)])
    assert confirm.wanted([v(REG, 0.9)]) and confirm.wanted([v(IMP, 1.057)])  # symmetric
    assert not confirm.wanted([v(REG, 0.9), v(REG, 0.91)])  # the first fresh pair agrees
    assert not confirm.wanted([v(IMP, 1.05), v(IMP, 1.06)])
    for second in (v(OK, 1.0), v(Outcome.UNSTABLE, None), v(Outcome.INCONCLUSIVE, 0.97)):
        assert confirm.wanted([v(REG, 0.96), second])  # two more pairs must agree
    assert not confirm.wanted([v(REG, 0.96), v(OK, 1.0), v(IMP, 1.1)])  # three at most
    assert confirm.why_more([v(REG, 0.887)]) == "to confirm 0.887 (REGRESSION)"
    assert confirm.why_more([v(REG, 0.96), v(OK, 1.0)]) == (
        "to decide between 0.960 (REGRESSION), 1.000 (OK)")


def test_a_fresh_pair_that_agrees_gives_the_verdict_with_its_figures() -> None:
    # the first pair was measured again because it was extreme: the fresh one is not
    i, got = confirm.agreed([v(REG, 0.887), v(REG, 0.893)])
    assert i == 1 and got.outcome is REG and got.ratio == 0.893
    assert got.message == ("env-steps/s regression at 0.893. A fresh pair of side processes "
                           "measured it too (the pairs: 0.887 (REGRESSION), 0.893 "
                           "(REGRESSION)); the fresh pair's figures stand.")
    i, got = confirm.agreed([v(IMP, 1.06), v(IMP, 1.05)])
    assert i == 1 and got.outcome is IMP and got.ratio == 1.05


def test_a_change_two_fresh_pairs_do_not_reproduce_is_ok() -> None:
    i, got = confirm.agreed([v(REG, 0.959), v(OK, 1.003), v(OK, 0.998)])
    assert i == 2 and got.outcome is OK and got.ratio == 0.998
    assert got.message.endswith(
        "The first pair's REGRESSION was not reproduced by fresh pairs of side processes (the "
        "pairs: 0.959 (REGRESSION), 1.003 (OK), 0.998 (OK)); the newest pair's figures stand.")
    # a tiny call's per-process offset: an IMPROVEMENT is held to the same rule
    i, got = confirm.agreed([v(IMP, 1.057), v(OK, 1.002), v(OK, 0.997)])
    assert got.outcome is OK and got.ratio == 0.997


@pytest.mark.parametrize("second", [v(Outcome.INCONCLUSIVE, 1.022), v(Outcome.UNSTABLE, None),
                                    v(OK, 1.0)], ids=["inconclusive", "unstable", "ok"])
def test_a_pair_that_did_not_reproduce_it_never_leaves_the_call_to_one_later_pair(
        second: Verdict) -> None:
    """A learner-bound ring pair seen on third-party code: 0.621 REGRESSION, 1.022
    INCONCLUSIVE, 0.788 REGRESSION was called a REGRESSION; its throughput had not
    changed."""
    i, got = confirm.agreed([v(REG, 0.621), second, v(REG, 0.788)])
    assert got.outcome is Outcome.INCONCLUSIVE and i == 2 and got.ratio == 0.788
    assert "(two pairs must agree)" in got.message


def test_fresh_pairs_that_could_not_start_leave_the_call_standing_unconfirmed() -> None:
    # an infrastructure error is never a pass in disguise
    i, got = confirm.agreed([v(REG, 0.9)], failed="head side: the workload raised")
    assert i == 0 and got.outcome is REG and got.message.endswith(
        "Not confirmed: no fresh pair of side processes could be measured (head side: the "
        "workload raised), so the first pair's verdict stands.")


def test_pairs_that_disagree_are_inconclusive_with_the_newest_measured_figures() -> None:
    i, got = confirm.agreed([v(REG, 0.93), v(OK, 1.0), v(IMP, 1.08)])
    assert i == 2 and got.outcome is Outcome.INCONCLUSIVE and got.ratio == 1.08
    assert got.ci == (1.08 * 0.99, 1.08 * 1.01)  # its interval, not dropped
    assert got.message == (
        "pairs of side processes of the same two revisions disagree: they measured 0.930 "
        "(REGRESSION), 1.000 (OK), 1.080 (IMPROVEMENT). The first pair's REGRESSION was "
        "neither reproduced nor refuted (two pairs must agree): the difference lies near the "
        "threshold or between processes. Run again (on a quieter machine), or raise the "
        "threshold. The newest measured pair's figures stand: env-steps/s improvement at "
        "1.08")
    i, got = confirm.agreed([v(REG, 0.95), v(OK, 1.0)], failed="base side crashed")
    assert i == 1 and got.outcome is Outcome.INCONCLUSIVE
    assert "they measured 0.950 (REGRESSION), 1.000 (OK); a fresh pair could not be " \
        "measured (base side crashed). The first" in got.message


def test_one_pair_is_its_own_verdict() -> None:
    one = v(REG, 0.9)
    assert confirm.agreed([one]) == (0, one)


# ---- the controller --------------------------------------------------------------------------

def test_a_regression_two_pairs_agree_on_is_recorded_from_the_fresh_pair() -> None:
    ctl, log, sink = controller([(0.887, v(REG, 0.887)), (0.893, v(REG, 0.893))])
    j = judge(ctl, log)
    assert log == ["measure REGRESSION",
                   "perfgate: : pair 2 of side processes, to confirm 0.887 (REGRESSION) (0.0 s)",
                   "start pair2", "measure REGRESSION", "close pair2", "done pair1"]
    assert sink == [j] and j.verdict is not None and j.verdict.outcome is REG
    assert j.verdict.ratio == 0.893 and "measured it too" in j.verdict.message
    # the figures are the standing pair's: the head's rate over the base's is its ratio
    assert j.baseline_rate is not None
    assert j.result.rate / j.baseline_rate == pytest.approx(0.893)
    assert [p.outcome for p in j.pairs] == [REG, REG]
    assert "ab_pairs" not in j.result.extra  # the measurement holds no verdict


def test_a_first_pairs_false_alarm_is_overturned_by_two_fresh_pairs() -> None:
    ctl, log, _ = controller([(0.959, v(REG, 0.959)), (1.003, v(OK, 1.003)),
                              (0.998, v(OK, 0.998))])
    j = judge(ctl, log)
    assert [x for x in log if not x.startswith("perfgate:")] == [
        "measure REGRESSION", "start pair2", "measure OK", "start pair3", "measure OK",
        "close pair2", "close pair3", "done pair1"]
    assert log[4].endswith("pair 3 of side processes, to decide between 0.959 (REGRESSION), "
                           "1.003 (OK) (0.0 s)")
    assert j.verdict is not None and j.verdict.outcome is OK and j.verdict.ratio == 0.998
    assert "The first pair's REGRESSION was not reproduced" in j.verdict.message


def test_an_overturned_regression_is_shown_though_it_ends_ok() -> None:
    from pytest_perfgate.report.render import notes, worth_a_line

    ctl, log, _ = controller([(0.959, v(REG, 0.959)), (1.003, v(OK, 1.003)),
                              (0.998, v(OK, 0.998))])
    (line,) = notes([judge(ctl, log)])
    assert line.startswith("test_walk: OK: env-steps/s ok at 0.998. The first pair's ")
    ctl, log, _ = controller([(1.0, v(OK, 1.0))])
    plain = judge(ctl, log)
    assert notes([plain]) == ["test_walk: OK: env-steps/s ok at 1.0"]  # every one, shown
    assert notes([plain], every_verdict=False) == [] and not worth_a_line(plain)  # written


def test_ok_is_not_measured_again_an_improvement_is_and_the_switch_turns_it_off() -> None:
    ctl, log, _ = controller([(1.0, v(OK, 1.0))])
    j = judge(ctl, log)
    assert log == ["measure OK", "done pair1"] and j.pairs == ()
    ctl, log, _ = controller([(1.057, v(IMP, 1.057)), (1.002, v(OK, 1.002)),
                              (0.997, v(OK, 0.997))])
    j = judge(ctl, log)
    assert [x for x in log if not x.startswith("perfgate:")] == [
        "measure IMPROVEMENT", "start pair2", "measure OK", "start pair3", "measure OK",
        "close pair2", "close pair3", "done pair1"]
    assert j.verdict is not None and j.verdict.outcome is OK
    ctl, log, _ = controller([(0.9, v(REG, 0.9))], confirm_on=False)
    j = judge(ctl, log)
    assert log == ["measure REGRESSION", "done pair1"]
    assert j.verdict is not None and j.verdict.outcome is REG


def test_a_tie_whose_third_pair_failed_is_inconclusive() -> None:
    ctl, log, _ = controller([(0.9, v(REG, 0.9)), (1.0, v(OK, 1.0)),
                              SideError("head side: the workload raised:\nTraceback ...")])
    j = judge(ctl, log)
    assert j.verdict is not None and j.verdict.outcome is Outcome.INCONCLUSIVE
    assert "measured 0.900 (REGRESSION), 1.000 (OK); a fresh pair could not be measured " \
        "(head side: the workload raised:). The first" in j.verdict.message
    assert log[-3:] == ["close pair2", "close pair3", "done pair1"]
    assert len(j.pairs) == 2  # what was measured: two pairs


def test_a_fresh_pair_that_fails_to_start_leaves_the_first_verdict_saying_so() -> None:
    ctl, log, _ = controller([(0.9, v(REG, 0.9))], fresh_fails=True)
    j = judge(ctl, log)
    assert j.verdict is not None and j.verdict.outcome is REG
    assert j.verdict.message.endswith(
        "Not confirmed: no fresh pair of side processes could be measured (base side closed "
        "its connection while we waited for its measure() call [exit code 1]. Its output "
        "ends with:), so the first pair's verdict stands.")


def test_a_pair_whose_head_cannot_start_ends_the_base_it_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_perfgate.modes.ab import remote

    started: list[Side] = []

    class Recorded(Side):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            started.append(self)

    monkeypatch.setattr(remote, "Side", Recorded)
    missing = tmp_path / "no-such-checkout"
    with pytest.raises(SideError, match=r"could not start a side process: .*no-such-checkout"):
        Pair.start(SideSpec("base", tmp_path), SideSpec("head", missing), "test_x.py::test_x",
                   str(Path(__file__).parents[1]))
    (base,) = started  # a real process: ended and waited for, its log closed
    assert base.proc.poll() is not None and base.log.closed


def test_an_interrupt_while_confirming_ends_the_fresh_pair() -> None:
    ctl, log, sink = controller([(0.9, v(REG, 0.9)), KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        judge(ctl, log)
    assert log[2:] == ["start pair2", "close pair2"] and sink == []


# ---- bringing a fresh pair to a later measure() call, over the real protocol ----------------


class Steps:
    """A side's workload: windows of ``duration`` seconds of 8 transitions, no clock."""

    def run_window(self, duration_s: float) -> RawWindow:
        return RawWindow(8, duration_s, duration_s)


def side_thread(role: str, served: dict[str, list[int]]) -> tuple[Side, threading.Thread]:
    """A Side whose far end is a thread running a test with two measure() calls through
    the side's own ``serve`` (modes/ab/side.py): "first", then "second"."""
    ours, theirs = Pipe(duplex=True)
    side = Side.__new__(Side)
    side.conn, side.spec, side.hung, side.command = ours, SideSpec(role, Path(".")), False, role
    side.proc = SimpleNamespace(poll=lambda: None, wait=lambda t=None: 0)  # type: ignore[assignment]

    def test_body() -> None:
        try:
            for name in ("first", "second"):
                served[f"{role} {name}"] = [len(serve(theirs, Steps(), name, 8, None, False))]
        except (EOFError, OSError):  # the controller let go of this side: the test ends
            served[f"{role} ended"] = []

    thread = threading.Thread(target=test_body, daemon=True)
    thread.start()
    return side, thread


def test_a_fresh_pair_passes_the_tests_earlier_calls_with_one_window_each() -> None:
    served: dict[str, list[int]] = {}
    (base, tb), (head, th) = side_thread("base", served), side_thread("head", served)
    ctl, _, _ = controller([])
    pair = Pair(base, head)
    bsrc, hsrc = ctl._bring(pair, ["first"], "second")
    assert served == {"base first": [1], "head first": [1]}  # one short window, let go
    for src in (bsrc, hsrc):
        assert src.run_window(0.01).wall_s == 0.01  # now serving the later call
    pair.done()
    tb.join(5), th.join(5)
    assert served["base second"] == [1] and served["head second"] == [1]


def test_a_pair_that_reaches_another_call_than_the_test_had_is_an_error() -> None:
    served: dict[str, list[int]] = {}
    (base, tb), (head, th) = side_thread("base", served), side_thread("head", served)
    ctl, _, _ = controller([])
    with pytest.raises(SideError, match=r"base side reached \('bench', 'first'\), expected "
                                        r"\('bench', 'walk'\)"):
        ctl._bring(Pair(base, head), ["walk"], "second")
    base.conn.close(), head.conn.close()
    tb.join(5), th.join(5)
    assert "base ended" in served and "head ended" in served


def test_the_option_reaches_both_uses() -> None:
    from pytest_perfgate.session.options import Options

    assert Options().ab_confirm is True
    assert Options.resolve(True, {}, {}, {"PERFGATE_AB_CONFIRM": "off"}).ab_confirm is False
    assert Options.resolve(True, {"ab_confirm": True}, {},
                           {"PERFGATE_AB_CONFIRM": "off"}).ab_confirm is True
