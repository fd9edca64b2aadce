"""A change is called only when fresh pairs of side processes measure it too.

Each side of an A/B run is one process. Two processes of the same code can run at steadily
different speeds (where the allocator put the hot arrays, the hash seed, which core they
share with what, how a collector and its learner happen to meet): a difference present in
every turn, which the turns' interval therefore cannot show, and which one pair reports as a
change of the code. So a REGRESSION or an IMPROVEMENT of one pair is measured again by a
fresh pair (new processes for both sides). The change stands when the first fresh pair
measures it too, or, when it does not, when the next two fresh pairs agree; any other run of
pairs is INCONCLUSIVE: a pair that could not judge (UNSTABLE, INCONCLUSIVE) never leaves the
decision to one later pair. The figures are the newest agreeing pair's (the first pair was
measured again because it was extreme; a fresh pair was chosen for nothing).

The pair is then the unit of noise (:mod:`.spread`): when the pairs differ by more than
their own turns' noise explains, as pairs of processes that meet (a collector and its
learner) do, the change must also clear the threshold against the spread between the pairs
(a third pair is measured for it), or it is INCONCLUSIVE. Fresh pairs that could not be
started (an infrastructure error) leave the first verdict, marked unconfirmed: never a pass
in disguise (docs/ab.md, "Fresh pairs").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pytest_perfgate.core.gate import Outcome, Rule, Verdict
from pytest_perfgate.core.metric import ENV_STEPS, Metric
from pytest_perfgate.modes.ab import spread

CALLS = (Outcome.REGRESSION, Outcome.IMPROVEMENT)  # what one pair alone may not decide
VOTES = (*CALLS, Outcome.OK)  # the outcomes of a pair that judged
MOST_PAIRS = 3


def wanted(verdicts: Sequence[Verdict], rule: Rule | None = None, varies: bool = False
           ) -> bool:
    """Whether another fresh pair must measure: the first pair called a change and the
    pairs have not decided it yet, or they did but differ by more than their own noise, or
    the workload is one whose speed varies by process (``varies``: processes that meet, as
    a ring pair's, or a call of microseconds, where a process's own offset is the size of
    the change), where two pairs agreeing says too little of the spread between pairs (at
    most :data:`MOST_PAIRS` pairs in all)."""
    if (not verdicts or verdicts[0].outcome not in CALLS
            or len(verdicts) >= MOST_PAIRS):
        return False
    decided = _decided(verdicts)
    if decided is None:
        return True
    return decided in CALLS and rule is not None and (varies or spread.of(verdicts) is not None)


def why_more(verdicts: Sequence[Verdict]) -> str:
    """Why the next fresh pair measures, for the status line."""
    if len(verdicts) == 1:
        return f"to confirm {saying(verdicts)}"
    if _decided(verdicts) is not None:
        if spread.of(verdicts) is None:
            return (f"to see the spread between pairs of this workload's processes "
                    f"({saying(verdicts)})")
        return f"the pairs differ more than their turns' noise ({saying(verdicts)})"
    return f"to decide between {saying(verdicts)}"


def agreed(verdicts: Sequence[Verdict], failed: str | None = None,
           metric: Metric = ENV_STEPS, rule: Rule | None = None) -> tuple[int, Verdict]:
    """The pair whose measurement stands (its index) and the verdict. ``failed``: why the
    last fresh pair could not be measured (a side failed), if it could not; ``metric``
    words an INCONCLUSIVE; ``rule``: the threshold the spread between pairs is held to."""
    if len(verdicts) == 1 and failed is None:
        return 0, verdicts[0]
    said = saying(verdicts)
    first = verdicts[0].outcome.value
    lost = f"; a fresh pair could not be measured ({failed})" if failed else ""
    if len(verdicts) == 1:  # no fresh pair could even start: nothing spoke against it
        return 0, verdicts[0].noted(
            f"Not confirmed: no fresh pair of side processes could be measured ({failed}), "
            "so the first pair's verdict stands")
    outcome = _decided(verdicts)
    if outcome is not None:
        i = max(k for k, v in enumerate(verdicts) if v.outcome is outcome)
        if outcome is verdicts[0].outcome:
            note = (f"A fresh pair of side processes measured it too (the pairs: {said}); "
                    "the fresh pair's figures stand")
        else:
            note = (f"The first pair's {first} was not reproduced by fresh pairs of side "
                    f"processes (the pairs: {said}); the newest pair's figures stand")
        got = verdicts[i].noted(note)
        if outcome in CALLS and rule is not None:
            held = spread.hold(verdicts, got, rule, metric)
            if held is not None:
                return i, held
        return i, got
    measured = [k for k, v in enumerate(verdicts) if v.ratio is not None]
    i = measured[-1] if measured else len(verdicts) - 1
    v = verdicts[i]
    own = v.message.removeprefix(metric.subject)
    return i, dataclasses.replace(v, outcome=Outcome.INCONCLUSIVE, message=metric.say(
        f"pairs of side processes of the same two revisions disagree: they measured "
        f"{said}{lost}. The first pair's {first} was neither reproduced nor refuted (two "
        "pairs must agree): the difference lies near the threshold or between processes. "
        "Run again (on a quieter machine), or raise the threshold. The newest measured "
        f"pair's figures stand: {own}"))


def saying(verdicts: Sequence[Verdict]) -> str:
    """What the pairs measured, in order: "0.887 (REGRESSION), UNSTABLE"."""
    return ", ".join(v.outcome.value if v.ratio is None else f"{v.ratio:.3f} ({v.outcome.value})"
                     for v in verdicts)


def _decided(verdicts: Sequence[Verdict]) -> Outcome | None:
    """What the pairs decided: the first pair's call when the first fresh pair measured it
    too, else what the next two fresh pairs agree on; None while undecided."""
    fresh = [v.outcome for v in verdicts[1:]]
    if fresh and fresh[0] is verdicts[0].outcome:
        return fresh[0]
    if len(fresh) >= 2 and fresh[0] is fresh[1] and fresh[1] in VOTES:
        return fresh[1]
    return None
