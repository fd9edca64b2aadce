"""The gate: a pure function from samples to a :class:`Verdict`.

Written by hand because no library decides "regression / inconclusive" with run-level
replication. Everything is on the log scale of *time per env-step* (lower is better), and
reported as a throughput ratio ``head / baseline`` (0.80 = 20% fewer env-steps/s).

Two kinds of evidence feed the same decision:

* history: the current run against the newest runs of the same machine. The unit of
  replication is the run: each run is summarised by the median of its windows, and the
  spread between runs (which includes the machine's drift, FIELD-NOTES 7) sets the
  uncertainty. Windows of one run are not independent samples of the machine's speed, so a
  run's median is taken to be no more precise than one window: the pooled within-run spread
  is a floor under the run-to-run spread, and counts as PRIOR_RUNS runs of evidence about
  it (so two or three baseline runs can already catch a gross slowdown, while a drifting
  history widens the interval and ends INCONCLUSIVE).
* paired: base and head measured in alternating short turns in the same time span; the
  per-turn log ratios are the replicates, so drift common to both cancels.

Decision rule (one-sided t test at level ``alpha`` on the log time ratio):
REGRESSION when the slowdown is significant and the throughput drop exceeds ``threshold``;
IMPROVEMENT symmetrically; INCONCLUSIVE when the smallest drop the evidence could resolve
exceeds ``threshold`` (the noise hides what we were asked to find); else OK.
"""

from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass
from typing import Sequence

PRIOR_RUNS = 3  # how many runs' worth of evidence the within-run spread counts for


class Outcome(enum.Enum):
    OK = "OK"
    REGRESSION = "REGRESSION"
    IMPROVEMENT = "IMPROVEMENT"
    NO_BASELINE = "NO BASELINE"
    UNSTABLE = "UNSTABLE"
    INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True)
class Rule:
    """What counts as a regression, and what to do with the verdicts that are not clear."""

    threshold: float = 0.05  # fractional throughput drop that matters
    alpha: float = 0.01  # one-sided significance level
    unstable: str = "fail"  # or "warn"
    inconclusive: str = "warn"  # or "fail"

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold={self.threshold!r} must be a fraction in (0, 1), "
                             "e.g. 0.05 for a 5% drop")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha={self.alpha!r} must be in (0, 0.5), e.g. 0.01")
        if self.unstable not in ("fail", "warn"):
            raise ValueError(f"unstable={self.unstable!r}: use 'fail' or 'warn'")
        if self.inconclusive not in ("fail", "warn"):
            raise ValueError(f"inconclusive={self.inconclusive!r}: use 'fail' or 'warn'")


@dataclass(frozen=True)
class Evidence:
    """A log time ratio (head / base, > 0 means slower) with its standard error."""

    log_ratio: float
    se: float
    df: float
    n_base: int  # baseline runs (history) or turns (paired)
    method: str  # "history" or "paired"
    between: float | None = None  # run-to-run spread of log medians (history)
    within: float | None = None  # pooled spread of log windows inside runs


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    message: str
    ratio: float | None = None  # throughput head / base
    ci: tuple[float, float] | None = None  # of the ratio, at confidence 1 - 2*alpha
    p_value: float | None = None  # one-sided, for "head is slower"
    resolvable: float | None = None  # smallest drop the evidence could call significant
    evidence: Evidence | None = None

    def fails(self, rule: Rule) -> bool:
        if self.outcome is Outcome.REGRESSION:
            return True
        if self.outcome is Outcome.UNSTABLE:
            return rule.unstable == "fail"
        if self.outcome is Outcome.INCONCLUSIVE:
            return rule.inconclusive == "fail"
        return False


def _t_sf(t: float, df: float) -> float:
    from scipy import stats  # lazy: keep plugin import cheap

    return float(stats.t.sf(t, df))


def _t_ppf(q: float, df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))


def _pooled_within(runs: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    ss, df = 0.0, 0
    for r in runs:
        if len(r) >= 2:
            logs = [math.log(x) for x in r]
            m = statistics.fmean(logs)
            ss += sum((v - m) ** 2 for v in logs)
            df += len(logs) - 1
    return (math.sqrt(ss / df), df) if df else (None, 0)


def history_evidence(current: Sequence[float], baseline: Sequence[Sequence[float]]) -> Evidence:
    """Compare one run's window samples with earlier runs' (all in time per env-step)."""
    if not current:
        raise ValueError("the current run has no samples")
    base = [r for r in baseline if r]
    if not base:
        raise ValueError("history_evidence needs at least one baseline run")
    y = [math.log(statistics.median(r)) for r in base]
    x = math.log(statistics.median(current))
    n = len(y)
    d = x - statistics.fmean(y)
    between = statistics.stdev(y) if n >= 2 else None
    within, df_w = _pooled_within([*base, current])
    if within is None:  # single-window runs: only the runs themselves tell the spread
        s, df = (between or 0.0), float(max(n - 1, 1))
    else:
        # The within-run spread acts as a prior worth PRIOR_RUNS runs for the run-to-run
        # spread, and as a floor under it: a run's median is no more precise than a window.
        pooled = ((n - 1) * (between or 0.0) ** 2 + PRIOR_RUNS * within ** 2) / (n - 1 + PRIOR_RUNS)
        s, df = math.sqrt(max(within ** 2, pooled)), float(n - 1 + PRIOR_RUNS)
    return Evidence(d, s * math.sqrt(1 + 1 / n), df, n, "history", between, within)


def paired_evidence(base: Sequence[float], head: Sequence[float]) -> Evidence:
    """Alternating turns: turn i measured base[i] then head[i] (or the reverse)."""
    if len(base) != len(head) or len(base) < 2:
        raise ValueError(f"paired evidence needs equal, >= 2 turns per side; got "
                         f"{len(base)} base and {len(head)} head")
    diffs = [math.log(h / b) for b, h in zip(base, head)]
    n = len(diffs)
    return Evidence(statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(n),
                    float(n - 1), n, "paired")


def decide(ev: Evidence, rule: Rule) -> Verdict:
    """Turn evidence into a verdict by the rule in the module docstring."""
    ratio = math.exp(-ev.log_ratio)
    if ev.se > 0:
        tq = _t_ppf(1 - rule.alpha, ev.df)
        p_slow = _t_sf(ev.log_ratio / ev.se, ev.df)
        p_fast = _t_sf(-ev.log_ratio / ev.se, ev.df)
        ci = (math.exp(-ev.log_ratio - tq * ev.se), math.exp(-ev.log_ratio + tq * ev.se))
        resolvable = 1 - math.exp(-tq * ev.se)
    else:  # identical samples: no noise seen at all
        p_slow = 0.0 if ev.log_ratio > 0 else 1.0
        p_fast = 0.0 if ev.log_ratio < 0 else 1.0
        ci, resolvable = (ratio, ratio), 0.0
    drop = 1 - ratio
    common = dict(ratio=ratio, ci=ci, p_value=p_slow, resolvable=resolvable, evidence=ev)
    where = _basis(ev)
    if p_slow < rule.alpha and drop > rule.threshold:
        return Verdict(Outcome.REGRESSION,
                       f"throughput fell {drop:.1%} (threshold {rule.threshold:.0%}), "
                       f"p={p_slow:.2g} {where}", **common)
    if p_fast < rule.alpha and -drop > rule.threshold:
        return Verdict(Outcome.IMPROVEMENT,
                       f"throughput rose {-drop:.1%}, p={p_fast:.2g} {where}; "
                       "the baseline will move up once this lands", **common)
    if resolvable > rule.threshold:
        return Verdict(Outcome.INCONCLUSIVE,
                       f"measured {_signed(drop)}, but the noise {where} can only resolve "
                       f"drops of {resolvable:.1%} or more, above the {rule.threshold:.0%} "
                       f"threshold. {_advice(ev)}", **common)
    return Verdict(Outcome.OK, f"{_signed(drop)} {where}, within the "
                   f"{rule.threshold:.0%} threshold (resolves drops >= {resolvable:.1%})",
                   **common)


def _signed(drop: float) -> str:
    return f"{drop:.1%} slower" if drop >= 0 else f"{-drop:.1%} faster"


def _basis(ev: Evidence) -> str:
    if ev.method == "paired":
        return f"over {ev.n_base} interleaved turns"
    spread = max(ev.between or 0.0, ev.within or 0.0)
    return f"against {ev.n_base} baseline run(s), run-to-run spread {spread:.1%}"


def _advice(ev: Evidence) -> str:
    if ev.method == "paired":
        return "Measure more turns (--perfgate-ab-turns) or raise the threshold."
    return ("This runner's speed drifts between runs more than the threshold; use the "
            "interleaved A/B mode (--perfgate-ab BASE_REV) for a paired comparison, "
            "or raise the threshold.")


def no_baseline(message: str) -> Verdict:
    return Verdict(Outcome.NO_BASELINE, message)


def unstable(message: str) -> Verdict:
    return Verdict(Outcome.UNSTABLE, message)


def evaluate(current: Sequence[float], baseline: Sequence[Sequence[float]], rule: Rule,
             *, steady: bool = True) -> Verdict:
    """The history gate: current run's window samples vs baseline runs' window samples."""
    if not steady:
        return unstable("steady state was never reached during warm-up: the workload's "
                        "speed kept changing (raise --perfgate-warmup-max or make the step "
                        "hold its state steady)")
    if not any(baseline):
        return no_baseline("no earlier run on this machine to compare with; this result "
                           "was recorded and becomes the baseline")
    return decide(history_evidence(current, baseline), rule)
