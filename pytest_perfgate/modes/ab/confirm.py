"""A change is called only when two pairs of side processes agree on it.

Each side of an A/B run is one process. Two processes of the same code can run at steadily
different speeds (where the allocator put the hot arrays, the hash seed, which core they
share with what): a difference present in every turn, which the turns' interval therefore
cannot show, and which one pair reports as a change of the code. So a REGRESSION or an
IMPROVEMENT of one pair is measured again by a fresh pair (new processes for both sides),
and a third pair breaks a tie: the verdict is the outcome two pairs agree on, taken from
the agreeing pair nearer no change (its ratio, interval and turns are what is recorded).
When three pairs all disagree, processes of the same code differ here by as much as the
change: INCONCLUSIVE, saying so (docs/ab.md, "Fresh pairs").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from pytest_perfgate.core.gate import Outcome, Verdict
from pytest_perfgate.core.metric import ENV_STEPS, Metric

CHANGES = (Outcome.REGRESSION, Outcome.IMPROVEMENT)
MOST_PAIRS = 3
_WORDS = {2: "two", 3: "three"}


def wanted(verdicts: Sequence[Verdict]) -> bool:
    """Whether another fresh pair must measure: the first pair called a change and no two
    pairs agree yet (at most :data:`MOST_PAIRS` in all)."""
    if not verdicts or verdicts[0].outcome not in CHANGES or len(verdicts) >= MOST_PAIRS:
        return False
    return _majority(verdicts) is None


def agreed(verdicts: Sequence[Verdict], metric: Metric = ENV_STEPS) -> tuple[int, Verdict]:
    """The pair whose measurement stands (its index) and the verdict: what two pairs agree
    on, from the agreeing pair nearer no change, saying what each pair measured; one pair's
    verdict as it is; INCONCLUSIVE when no two agree (three that differ, or two when a third
    could not be measured)."""
    if len(verdicts) == 1:
        return 0, verdicts[0]
    outcome = _majority(verdicts)
    said = saying(verdicts)
    if outcome is None:
        i = _median(verdicts)
        return i, Verdict(Outcome.INCONCLUSIVE, metric.say(
            f"{_WORDS[len(verdicts)]} pairs of side processes of the same two revisions "
            f"measured {said}: "
            "processes of the same code differ here by as much as the change, so no pair's "
            "verdict stands; run again, or gate instruction counts (--perfgate-counts), "
            "which do not depend on the process"), ratio=verdicts[i].ratio)
    agree = [i for i, v in enumerate(verdicts) if v.outcome is outcome]
    i = min(reversed(agree), key=lambda k: _distance(verdicts[k]))
    v = verdicts[i]
    if len(verdicts) == 2:
        note = (f"A fresh pair of side processes confirmed it ({said}); the one nearer no "
                "change stands.")
    else:
        first = verdicts[0].outcome.value
        if outcome is verdicts[0].outcome:
            why = ""
        elif outcome in (*CHANGES, Outcome.OK):
            why = f", so the first pair's {first} was a difference between its processes, " \
                  "not the code's"
        else:  # the fresh pairs could not judge (load, noise): nothing overturned it
            why = f", so the first pair's {first} is not confirmed"
        note = f"Three pairs of side processes measured {said}: two agree{why}."
    return i, v.noted(note)


def record(verdicts: Sequence[Verdict]) -> list[dict[str, object]]:
    """Each pair's ratio and outcome, for the run's metadata."""
    return [{"ratio": v.ratio, "outcome": v.outcome.value} for v in verdicts]


def _majority(verdicts: Sequence[Verdict]) -> Outcome | None:
    outcome, n = Counter(v.outcome for v in verdicts).most_common(1)[0]
    return outcome if n >= 2 else None


def _distance(v: Verdict) -> float:
    """How far the pair's ratio is from no change (no ratio: farthest)."""
    return abs(math.log(v.ratio)) if v.ratio and v.ratio > 0 else math.inf


def _median(verdicts: Sequence[Verdict]) -> int:
    """The pair with the middle ratio (pairs without one last)."""
    rated = sorted((v.ratio, i) for i, v in enumerate(verdicts) if v.ratio)
    if not rated:
        return len(verdicts) - 1
    return rated[(len(rated) - 1) // 2][1]


def saying(verdicts: Sequence[Verdict]) -> str:
    """What the pairs measured, in order: "0.887 (REGRESSION), UNSTABLE"."""
    return ", ".join(v.outcome.value if v.ratio is None else f"{v.ratio:.3f} ({v.outcome.value})"
                     for v in verdicts)
