"""The pair of side processes as the unit of noise.

A pair's interval comes from its turns, which share the pair's two processes: whatever sets
those processes' speeds for their whole life (how a collector and its learner meet over the
ring, where each landed in memory) is in every turn, invisible to that interval. Pairs of
the same two revisions then differ by more than their turns' noise explains. This module
sees that from the pairs that measured (a random-effects meta-analysis: DerSimonian and
Laird's between-pair variance, Hartung and Knapp's t interval on k - 1 degrees of freedom,
never narrower than the pairs' own), and holds a called change to the threshold against
it: a change within the spread between pairs is never a REGRESSION or an IMPROVEMENT.
Written by hand: a dozen lines of arithmetic that no installed library offers for
(log ratio, standard error) pairs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_perfgate.core.evidence import Evidence
from pytest_perfgate.core.gate import Outcome, Rule, Verdict, decide
from pytest_perfgate.core.metric import ENV_STEPS, Metric

if TYPE_CHECKING:
    from pytest_perfgate.core.measure import Measurement

SE_FLOOR = 1e-6  # log units: a pair measured on a fake clock has no noise at all
TINY_CALL_S = 1e-4  # a call this short carries its process's own offset (docs/ab.md)


def varies_by_process(m: Measurement) -> bool:
    """Whether a workload's speed varies from one pair of processes to the next beyond its
    turns: several processes met in its windows (a ring pair, several collectors), or one
    call takes microseconds (where layout, hash seed and alignment are the change's size)."""
    if any(w.streams > 1 for w in m.windows):
        return True
    calls = sum(w.calls for w in m.windows)
    return calls > 0 and sum(w.wall_s for w in m.windows) / calls < TINY_CALL_S


@dataclass(frozen=True)
class Spread:
    """What the pairs that measured say together."""

    log_ratio: float  # the pairs' random-effects mean log time ratio (> 0: slower)
    se: float  # its standard error, the spread between pairs included
    tau: float  # between-pair standard deviation beyond the turns' noise, log units
    pairs: int


def of(verdicts: Sequence[Verdict]) -> Spread | None:
    """The pairs' combined figure when they differ by more than their own turns' noise
    explains (between-pair variance > 0); None when they agree within it, or when fewer
    than two pairs measured a ratio with its standard error."""
    got = [(v.evidence.log_ratio, max(v.evidence.se, SE_FLOOR) ** 2) for v in verdicts
           if v.evidence is not None and v.ratio is not None and math.isfinite(v.evidence.se)]
    k = len(got)
    if k < 2:
        return None
    w = [1 / var for _, var in got]
    fixed = sum(wi * y for wi, (y, _) in zip(w, got, strict=True)) / sum(w)
    q = sum(wi * (y - fixed) ** 2 for wi, (y, _) in zip(w, got, strict=True))
    scale = sum(w) - sum(wi * wi for wi in w) / sum(w)
    tau2 = max(0.0, (q - (k - 1)) / scale) if scale > 0 else 0.0
    if tau2 <= 0:
        return None
    ws = [1 / (var + tau2) for _, var in got]
    mean = sum(wi * y for wi, (y, _) in zip(ws, got, strict=True)) / sum(ws)
    hk = sum(wi * (y - mean) ** 2 for wi, (y, _) in zip(ws, got, strict=True)) \
        / ((k - 1) * sum(ws))
    se = math.sqrt(max(hk, 1 / sum(ws)))
    return Spread(mean, se, math.sqrt(tau2), k)


def hold(verdicts: Sequence[Verdict], got: Verdict, rule: Rule,
         metric: Metric = ENV_STEPS) -> Verdict | None:
    """``got`` (a change the pairs agreed on) held to the threshold against the spread
    between the pairs: None when they agree within their turns' noise (it stands as it
    is); ``got`` noted when the change clears the spread too; else INCONCLUSIVE, naming
    the spread and what to do."""
    s = of(verdicts)
    if s is None:
        return None
    ev = Evidence(s.log_ratio, s.se, s.pairs - 1, s.pairs, "pairs", between=s.tau)
    together = decide(ev, rule, metric)
    scatter = f"{math.expm1(s.tau):.1%}"
    if together.outcome is got.outcome:
        return got.noted(f"The pairs' ratios scatter by {scatter} beyond their turns' "
                         f"noise, and the change clears that too: "
                         f"{_ratio(together)} over the {s.pairs} pairs")
    return dataclasses.replace(
        got, outcome=Outcome.INCONCLUSIVE, ratio=together.ratio, ci=together.ci,
        message=metric.say(
            f"one pair measured {_drop(got)}, but pairs of side processes of the same two "
            f"revisions scatter by {scatter} beyond their own turns' noise (the pairs: "
            f"{_pairs(verdicts)}), and against that spread the change is not resolved: "
            f"{_ratio(together)} over the {s.pairs} pairs. This workload's processes meet "
            "differently in every pair (a ring's collector and learner, several collectors, "
            "subprocess envs): a change within that spread is never called. Run again, or "
            "raise the threshold above the spread."), evidence=ev)


def _ratio(v: Verdict) -> str:
    if v.ci is None:
        return f"ratio {v.ratio:.3f}"
    return f"ratio {v.ratio:.3f} [{v.ci[0]:.3f}-{v.ci[1]:.3f}]"


def _drop(v: Verdict) -> str:
    ratio = v.ratio if v.ratio is not None else 1.0
    return f"{ratio - 1:+.1%}"


def _pairs(verdicts: Sequence[Verdict]) -> str:
    return ", ".join(f"{v.ratio:.3f}" for v in verdicts if v.ratio is not None)
