"""A regression is called only when a fresh pair of side processes measures it too.

Each side of an A/B run is one process. Two processes of the same code can run at steadily
different speeds (where the allocator put the hot arrays, the hash seed, which core they
share with what): a difference present in every turn, which the turns' interval therefore
cannot show, and which one pair reports as a change of the code. So a REGRESSION of one pair
is measured again by a fresh pair (new processes for both sides), and a third pair breaks a
tie. Only pairs that judged (REGRESSION, IMPROVEMENT, OK) vote; the verdict is the outcome
two of them agree on, with the figures of the newest pair that says it (the first pair was
measured again because it was extreme; a fresh pair was chosen for nothing, so its ratio is
not pulled away from the truth). Fresh pairs that could not judge (UNSTABLE, INCONCLUSIVE,
a side that failed) leave the first verdict, marked unconfirmed; fresh pairs that judged
and disagree make it INCONCLUSIVE (docs/ab.md, "Fresh pairs").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from pytest_perfgate.core.gate import Outcome, Verdict
from pytest_perfgate.core.metric import ENV_STEPS, Metric

VOTES = (Outcome.REGRESSION, Outcome.IMPROVEMENT, Outcome.OK)  # the outcomes of a pair that judged
MOST_PAIRS = 3


def wanted(verdicts: Sequence[Verdict]) -> bool:
    """Whether another fresh pair must measure: the first pair called a REGRESSION and no
    two pairs that judged agree yet (at most :data:`MOST_PAIRS` pairs in all)."""
    if (not verdicts or verdicts[0].outcome is not Outcome.REGRESSION
            or len(verdicts) >= MOST_PAIRS):
        return False
    return _agreed(verdicts) is None


def why_more(verdicts: Sequence[Verdict]) -> str:
    """Why the next fresh pair measures, for the status line."""
    if len(verdicts) == 1:
        return f"to confirm {saying(verdicts)}"
    return f"to decide between {saying(verdicts)}"


def agreed(verdicts: Sequence[Verdict], failed: str | None = None,
           metric: Metric = ENV_STEPS) -> tuple[int, Verdict]:
    """The pair whose measurement stands (its index) and the verdict. ``failed``: why the
    last fresh pair could not be measured (a side failed), if it could not; ``metric``
    words an INCONCLUSIVE of pairs that disagree."""
    if len(verdicts) == 1 and failed is None:
        return 0, verdicts[0]
    said = saying(verdicts)
    first = verdicts[0].outcome.value
    lost = f"; a fresh pair could not be measured ({failed})" if failed else ""
    outcome = _agreed(verdicts)
    if outcome is not None:
        i = max(k for k, v in enumerate(verdicts) if v.outcome is outcome)
        if outcome is verdicts[0].outcome:
            note = (f"A fresh pair of side processes measured it too (the pairs: {said}); "
                    "the fresh pair's figures stand")
        else:
            note = (f"The first pair's {first} was not reproduced by fresh pairs of side "
                    f"processes (the pairs: {said}); the newest pair's figures stand")
        return i, verdicts[i].noted(note)
    judged = [k for k, v in enumerate(verdicts) if v.outcome in VOTES]
    if judged == [0]:  # no fresh pair judged: nothing speaks against the first
        fresh = saying(verdicts[1:])
        why = "; ".join(x for x in (f"they measured {fresh}" if fresh else "",
                                    f"one could not be measured ({failed})" if failed else "")
                        if x)
        return 0, verdicts[0].noted(
            f"Not confirmed: no fresh pair of side processes could judge ({why}), so the "
            "first pair's verdict stands")
    i = judged[-1]
    v = verdicts[i]
    own = v.message.removeprefix(metric.subject)
    return i, dataclasses.replace(v, outcome=Outcome.INCONCLUSIVE, message=metric.say(
        f"pairs of side processes of the same two revisions disagree: they measured "
        f"{said}{lost}. The first pair's {first} was neither reproduced nor refuted: the "
        "difference lies near the threshold or between processes. Run again (on a quieter "
        f"machine), or raise the threshold. The newest judging pair's figures stand: {own}"))


def record(verdicts: Sequence[Verdict]) -> list[dict[str, object]]:
    """Each pair's ratio, interval and outcome, in order, for the run's metadata."""
    return [{"ratio": v.ratio, "ci": None if v.ci is None else list(v.ci),
             "outcome": v.outcome.value} for v in verdicts]


def saying(verdicts: Sequence[Verdict]) -> str:
    """What the pairs measured, in order: "0.887 (REGRESSION), UNSTABLE"."""
    return ", ".join(v.outcome.value if v.ratio is None else f"{v.ratio:.3f} ({v.outcome.value})"
                     for v in verdicts)


def _agreed(verdicts: Sequence[Verdict]) -> Outcome | None:
    """The outcome two pairs that judged agree on, if any."""
    votes = Counter(v.outcome for v in verdicts if v.outcome in VOTES)
    return next((o for o, n in votes.most_common() if n >= 2), None)
