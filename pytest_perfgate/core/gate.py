"""The gate: a pure function from samples to a :class:`Verdict`.

Written by hand because no library decides "regression / inconclusive" with run-level
replication. Everything is on the log scale of *time per env-step* (lower is better), and
reported as a throughput ratio ``head / baseline`` (0.80 = 20% fewer env-steps/s).

Two kinds of evidence feed the same decision:

* history: the current run against the newest runs of the same machine. The unit of
  replication is the run: each run is summarised by the median of its windows, and the
  spread between runs (which includes the machine's drift, docs/design.md §1) sets the
  uncertainty. Windows of one run are not independent samples of the machine's speed, so
  a run's own precision is estimated from how its two halves disagree, not from the
  window count (see ``history_evidence``).
* paired: base and head measured in alternating short turns in the same time span; the
  per-turn log ratios are the replicates, so drift common to both cancels. They are
  summarised by a 20% trimmed mean (Yuen's t), robust to the odd turn a neighbour spoils.

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
from typing import Any, Sequence

PAIRED_TRIM = 0.2  # trimmed from each end of the paired per-turn log ratios (docs/design.md §3)

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
    within: float | None = None  # noise of one run's median, seen from inside runs


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


def _t() -> Any:
    """Student's t from scipy, imported on first use: the plugin import stays cheap."""
    from scipy import stats  # type: ignore[import-untyped]

    return stats.t


def _t_sf(t: float, df: float) -> float:
    return float(_t().sf(t, df))


def _t_ppf(q: float, df: float) -> float:
    return float(_t().ppf(q, df))


def _run_noise(runs: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    """How precise one run's median is, from inside the runs: (variance in log units, df).

    Split each run's windows into halves: if the half medians m1, m2 scatter independently,
    var(log m1 - log m2) / 4 estimates the variance of the whole run's median. Windows next
    to each other share the machine's drift, so this is more honest than stdev/sqrt(K).
    Runs of fewer than 4 windows fall back to the windows' own variance (conservative).
    """
    split = [(math.log(statistics.median(r[:len(r) // 2]))
              - math.log(statistics.median(r[len(r) // 2:]))) ** 2 / 4
             for r in runs if len(r) >= 4]
    if split:
        return statistics.fmean(split), len(split)
    ss, df = 0.0, 0
    for r in runs:
        if len(r) >= 2:
            logs = [math.log(x) for x in r]
            m = statistics.fmean(logs)
            ss += sum((v - m) ** 2 for v in logs)
            df += len(logs) - 1
    return (ss / df, df) if df else (None, 0)


def history_evidence(current: Sequence[float], baseline: Sequence[Sequence[float]],
                     spread: Sequence[Sequence[float]] | None = None) -> Evidence:
    """Compare one run's window samples with earlier runs' (all in time per env-step).

    ``baseline`` (the newest runs) sets the level; ``spread`` (a longer stretch of history,
    default the baseline itself) sets the run-to-run variance of run medians, which is
    pooled with the run-noise estimate from inside every run (one df per run): two or three
    runs can already catch a gross slowdown, and a drifting history widens the interval
    into INCONCLUSIVE.
    """
    if not current:
        raise ValueError("the current run has no samples")
    base = [r for r in baseline if r]
    if not base:
        raise ValueError("history_evidence needs at least one baseline run")
    y = [math.log(statistics.median(r)) for r in base]
    x = math.log(statistics.median(current))
    n = len(y)
    d = x - statistics.fmean(y)
    wide = [r for r in spread if r] if spread else base
    ys = [math.log(statistics.median(r)) for r in wide]
    k = len(ys)
    between = statistics.stdev(ys) if k >= 2 else None
    noise, m = _run_noise([*wide, current])
    ss = (k - 1) * (between or 0.0) ** 2 + m * (noise or 0.0)
    df = (k - 1) + m
    s = math.sqrt(ss / df) if df else 0.0
    within = math.sqrt(noise) if noise is not None else None
    return Evidence(d, s * math.sqrt(1 + 1 / n), float(max(df, 1)), n, "history", between,
                    within)


def paired_evidence(base: Sequence[float], head: Sequence[float],
                    trim: float = PAIRED_TRIM) -> Evidence:
    """Alternating turns: turn i measured base[i] then head[i] (or the reverse).

    The per-turn log ratios are summarised by their ``trim``-trimmed mean with the
    Tukey-McLaughlin (Yuen) standard error: a neighbour taking the core for one turn makes
    that turn's ratio wild, and on a shared 2-vCPU runner (90 trials, docs/design.md §3) the
    20% trimmed mean cut A/A false alarms from 2/50 to 0/50 while catching +5% in 8/10
    trials instead of 5/10. ``trim=0`` is the plain mean and t.
    """
    if len(base) != len(head) or len(base) < 2:
        raise ValueError(f"paired evidence needs equal, >= 2 turns per side; got "
                         f"{len(base)} base and {len(head)} head")
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim={trim!r} must be in [0, 0.5), e.g. 0.2")
    diffs = sorted(math.log(h / b) for b, h in zip(base, head, strict=True))
    n = len(diffs)
    g = int(trim * n)
    core = diffs[g:n - g]
    winsorized = [diffs[g]] * g + core + [diffs[n - g - 1]] * g
    se = statistics.stdev(winsorized) / ((1 - 2 * g / n) * math.sqrt(n))
    return Evidence(statistics.fmean(core), se, float(len(core) - 1), n, "paired")


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
    def verdict(outcome: Outcome, message: str) -> Verdict:
        return Verdict(outcome, message, ratio=ratio, ci=ci, p_value=p_slow,
                       resolvable=resolvable, evidence=ev)

    where = _basis(ev)
    if p_slow < rule.alpha and drop > rule.threshold:
        return verdict(Outcome.REGRESSION,
                       f"throughput fell {drop:.1%} (threshold {rule.threshold:.0%}), "
                       f"p={p_slow:.2g} {where}")
    if p_fast < rule.alpha and -drop > rule.threshold:
        return verdict(Outcome.IMPROVEMENT,
                       f"throughput rose {-drop:.1%}, p={p_fast:.2g} {where}; "
                       "the baseline will move up once this lands")
    if resolvable > rule.threshold:
        return verdict(Outcome.INCONCLUSIVE,
                       f"measured {_signed(drop)}, but the noise {where} can only resolve "
                       f"drops of {resolvable:.1%} or more, above the {rule.threshold:.0%} "
                       f"threshold. {_advice(ev)}")
    return verdict(Outcome.OK, f"{_signed(drop)} {where}, within the "
                   f"{rule.threshold:.0%} threshold (resolves drops >= {resolvable:.1%})")


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
             *, steady: bool = True, spread: Sequence[Sequence[float]] | None = None
             ) -> Verdict:
    """The history gate: current run's window samples vs baseline runs' window samples."""
    if not steady:
        return unstable("steady state was never reached during warm-up: the workload's "
                        "speed kept changing (raise --perfgate-warmup-max or make the step "
                        "hold its state steady)")
    if not any(baseline):
        return no_baseline("no earlier run on this machine to compare with; this result "
                           "was recorded and becomes the baseline")
    return decide(history_evidence(current, baseline, spread), rule)
