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

The evidence models live in :mod:`pytest_perfgate.core.evidence`; every path from them
to a verdict goes through :func:`decide` (or :func:`sequential_decide`, its looks) here.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pytest_perfgate.core.evidence import Evidence, history_evidence, t_dist, t_ppf, t_sf
from pytest_perfgate.core.metric import ENV_STEPS, Metric


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
class Verdict:
    outcome: Outcome
    message: str
    ratio: float | None = None  # throughput head / base
    ci: tuple[float, float] | None = None  # of the ratio, at confidence 1 - 2*alpha
    p_value: float | None = None  # one-sided, for "head is slower"
    resolvable: float | None = None  # smallest drop the evidence could call significant
    evidence: Evidence | None = None

    def noted(self, text: str) -> Verdict:
        """This verdict with ``text`` as one more sentence of its message."""
        end = "" if self.message.endswith(".") else "."
        said = f"{self.message}{end} {text[0].upper()}{text[1:]}"
        return replace(self, message=said if said.endswith(".") else said + ".")

    def fails(self, rule: Rule) -> bool:
        if self.outcome is Outcome.REGRESSION:
            return True
        if self.outcome is Outcome.UNSTABLE:
            return rule.unstable == "fail"
        if self.outcome is Outcome.INCONCLUSIVE:
            return rule.inconclusive == "fail"
        return False


def decide(ev: Evidence, rule: Rule, metric: Metric = ENV_STEPS) -> Verdict:
    """Turn evidence into a verdict by the rule in the module docstring.

    Kept polluted windows move the ratio by up to ``ev.slack`` either way: significance is
    tested at the end of that range least favourable to the verdict, and the interval and
    the resolvable drop widen by it. Evidence the model calls ``thin`` is INCONCLUSIVE.
    ``metric`` words the verdict (its unit's direction and phrases, core/metric.py).
    """
    ratio = math.exp(-ev.log_ratio)
    drop = 1 - ratio
    where = _basis(ev)
    if ev.thin is not None:
        return Verdict(Outcome.INCONCLUSIVE,
                       metric.say(f"measured {_signed(drop)} against {ev.n_base} baseline "
                                  f"run(s), but {ev.thin}"), ratio=ratio, evidence=ev)
    lo, hi = ev.log_ratio - ev.slack, ev.log_ratio + ev.slack
    if ev.se > 0:
        tq = t_ppf(1 - rule.alpha, ev.df)
        p_slow = t_sf(lo / ev.se, ev.df)
        p_fast = t_sf(-hi / ev.se, ev.df)
        ci = (math.exp(-hi - tq * ev.se), math.exp(-lo + tq * ev.se))
        resolvable = 1 - math.exp(-tq * ev.se - ev.slack)
    else:  # identical samples: no noise seen at all
        p_slow = 0.0 if lo > 0 else 1.0
        p_fast = 0.0 if hi < 0 else 1.0
        ci, resolvable = (math.exp(-hi), math.exp(-lo)), 1 - math.exp(-ev.slack)

    def verdict(outcome: Outcome, message: str) -> Verdict:
        return Verdict(outcome, metric.say(message), ratio=ratio, ci=ci, p_value=p_slow,
                       resolvable=resolvable, evidence=ev)

    if p_slow < rule.alpha and -math.expm1(-lo) > rule.threshold:
        return verdict(Outcome.REGRESSION,
                       f"{metric.fell} {drop:.1%} (threshold {percent(rule.threshold)}), "
                       f"p={p_slow:.2g} {where}")
    if p_fast < rule.alpha and math.expm1(-hi) > rule.threshold:
        return verdict(Outcome.IMPROVEMENT,
                       f"{metric.rose} {-drop:.1%}, p={p_fast:.2g} {where}; "
                       "the baseline will move up once this lands")
    if resolvable > rule.threshold:
        return verdict(Outcome.INCONCLUSIVE,
                       f"measured {_signed(drop)}, but the noise {where} can only resolve "
                       f"drops of {_drop(resolvable)} or more, above the "
                       f"{percent(rule.threshold)} "
                       f"threshold. {_advice(ev, rule, metric)}")
    return verdict(Outcome.OK, f"{_signed(drop)} {where}, within the "
                   f"{percent(rule.threshold)} threshold (resolves drops >= "
                   f"{_drop(resolvable)})")


def sequential_decide(ev: Evidence, rule: Rule, level: float, final: bool,
                      metric: Metric = ENV_STEPS) -> Verdict | None:
    """One look of the group-sequential paired test (docs/design.md §3); None: measure on.

    ``level`` is the look's nominal one-sided level (core/sequential.py): the interval
    ``[lo, hi]`` of the log time ratio at that level is a repeated confidence interval, true
    at every look at once with confidence 1 - alpha per side. REGRESSION when it shows a
    slowdown (lo > 0) and does not rule out a drop of the threshold; OK when it rules such a
    drop out ("no drop larger than X"); IMPROVEMENT symmetrically; at the last look
    INCONCLUSIVE when it still holds both no change and the threshold, naming how many more
    turns would resolve it. The threshold is thus the drop the test is built to catch, not a
    bar the estimate itself must clear (which caught a drop of exactly the threshold in at
    most half the trials).
    """
    ratio = math.exp(-ev.log_ratio)
    drop = 1 - ratio
    where = _basis(ev)
    if ev.thin is not None:
        return Verdict(Outcome.INCONCLUSIVE,
                       metric.say(f"measured {_signed(drop)} {where}, but {ev.thin}"),
                       ratio=ratio, evidence=ev)
    q = t_dist().isf(level, ev.df) if ev.se > 0 else 0.0
    half = float(q) * ev.se + ev.slack
    lo, hi = ev.log_ratio - half, ev.log_ratio + half
    limit = -math.log1p(-rule.threshold)  # a drop of the threshold, as a log slowdown
    rise = math.log1p(rule.threshold)  # a rise of the threshold, as a log speed-up
    p_slow = t_sf(ev.log_ratio / ev.se, ev.df) if ev.se > 0 else float(ev.log_ratio <= 0)
    least, worst = -math.expm1(-lo), -math.expm1(-hi)  # the drop's interval
    conf = f"{percent(1 - rule.alpha)} confidence"
    thr = percent(rule.threshold)

    def verdict(outcome: Outcome, message: str) -> Verdict:
        return Verdict(outcome, metric.say(message), ratio=ratio,
                       ci=(math.exp(-hi), math.exp(-lo)), p_value=p_slow,
                       resolvable=-math.expm1(-half), evidence=ev)

    if lo > 0 and hi >= limit:
        return verdict(Outcome.REGRESSION,
                       f"{metric.fell} {drop:.1%} (threshold {thr}): by {least:.1%} to "
                       f"{worst:.1%} at {conf}, p={p_slow:.2g} {where}")
    if hi < 0 and -lo >= rise:
        return verdict(Outcome.IMPROVEMENT,
                       f"{metric.rose} {-drop:.1%}: by {math.expm1(-hi):.1%} to "
                       f"{math.expm1(-lo):.1%} at {conf} {where}; the baseline will move up "
                       "once this lands")
    if hi < limit:
        if lo > 0:
            return verdict(Outcome.OK, f"{_signed(drop)} {where}: a real drop, but no larger "
                           f"than {worst:.1%} at {conf}, within the {thr} threshold")
        least_rise = math.expm1(-hi)  # the least rise the interval shows, if it shows one
        if worst > 0:
            bound = f"no drop larger than {worst:.1%}"
        elif least_rise >= 0.0005:  # shown as at least 0.1%
            bound = f"no drop at all (a rise of at least {least_rise:.1%})"
        else:
            bound = "no drop at all"
        return verdict(Outcome.OK, f"{_signed(drop)} {where}: {bound} at {conf} "
                       f"(threshold {thr})")
    if not final:
        return None
    return verdict(Outcome.INCONCLUSIVE,
                   f"measured {_signed(drop)} {where}, but at {conf} the change lies between "
                   f"{_signed(least)} and {_signed(worst)}: that holds both no drop and the "
                   f"{thr} threshold. {_more_turns(ev, rule, float(q))}")


def _more_turns(ev: Evidence, rule: Rule, q: float) -> str:
    """How many more turns would resolve the threshold, if the measured change holds.

    The interval's half-width shrinks as 1/sqrt(turns). It resolves the threshold once it
    is narrower than the estimate's distance to 0 or to the threshold, whichever is larger
    (at least half the threshold): then it excludes one of them."""
    limit = -math.log1p(-rule.threshold)
    need = max(ev.log_ratio, limit - ev.log_ratio) - ev.slack
    cause = ""
    if ev.excluded:
        cause = (f" The outside load also changed during {ev.excluded} turn pair(s): a quiet "
                 "machine needs fewer.")
    if need <= 0 or q <= 0 or ev.se <= 0:
        return ("More turns cannot resolve it: raise the threshold, or run when the machine "
                "is quiet." + cause)
    total = math.ceil(ev.n_base * (q * ev.se / need) ** 2)
    total = max(total, ev.n_base + 1)
    return (f"About {total - ev.n_base} more turns would resolve {percent(rule.threshold)} "
            f"if the measured change holds: run again with --perfgate-ab-turns={total}, or "
            "raise the threshold." + cause)


def percent(fraction: float) -> str:
    """A fraction as a percentage with the digits it needs (3 significant): 0.05 -> '5%',
    0.005 -> '0.5%', 0.0025 -> '0.25%', 2.1e-6 -> '0.00021%'. ``:.0%`` printed a 0.5%
    threshold as '0%'."""
    v = fraction * 100
    if v == 0 or not math.isfinite(v):
        return f"{v:g}%"
    decimals = min(8, max(0, 2 - math.floor(math.log10(abs(v)))))
    text = f"{v:.{decimals}f}"
    return (text.rstrip("0").rstrip(".") if "." in text else text) + "%"


def _drop(fraction: float) -> str:
    """A resolvable drop: one decimal, or the digits a tiny one needs (counts)."""
    return f"{fraction:.1%}" if abs(fraction) >= 0.001 else percent(fraction)


def _signed(drop: float) -> str:
    return f"{drop:.1%} slower" if drop >= 0 else f"{-drop:.1%} faster"


def _basis(ev: Evidence) -> str:
    if ev.method == "paired":
        text = f"over {ev.n_base} interleaved turns"
        if ev.look and ev.look < ev.looks and not ev.cut_short:
            text += f" (stopped at look {ev.look} of {ev.looks}, of at most {ev.max_turns})"
        if ev.excluded:
            text += (f", {ev.excluded} more turn pair(s) left out because the outside load "
                     "changed between their two turns"
                     + (" (re-measuring ran out)" if ev.cut_short else ""))
        return text
    if ev.method == "pairs":  # modes/ab/spread.py: the pair of processes is the unit
        return (f"over {ev.n_base} pairs of side processes, spread between pairs "
                f"{math.expm1(ev.between or 0.0):.1%}")
    spread = max(ev.between or 0.0, ev.within or 0.0)
    text = f"against {ev.n_base} baseline run(s), run-to-run spread {spread:.1%}"
    if ev.slack > 0:
        text += (f", widened by +-{math.expm1(ev.slack):.1%} for {ev.polluted} window(s) "
                 "spoiled by outside load and kept")
    return text


def _advice(ev: Evidence, rule: Rule, metric: Metric) -> str:
    """The true reason the evidence cannot resolve the threshold, and the one thing to do:
    too few runs (the spread is small but its estimate has few degrees of freedom), outside
    load (the slack of kept spoiled windows), or the spread itself."""
    if ev.method == "paired":
        return _more_turns(ev, rule, t_ppf(1 - rule.alpha, ev.df))
    if ev.method == "pairs":
        return ("The cause is the spread between pairs of side processes, which more turns "
                "in one pair cannot narrow: run again, or raise the threshold above it.")
    limit = -math.log1p(-rule.threshold)  # the threshold as a log drop
    spread = max(ev.between or 0.0, ev.within or 0.0)
    room = math.sqrt(1 + 1 / ev.n_base)
    if ev.slack > 0 and t_ppf(1 - rule.alpha, ev.df) * ev.se <= limit:
        return (f"The cause is outside load: {ev.polluted} window(s) were spoiled by other "
                "work on this machine and kept, which widens the interval; run again when "
                "the machine is quiet.")
    need = next((k for k in range(int(ev.df) + 2, 200)
                 if t_ppf(1 - rule.alpha, k - 1) * spread * room + ev.slack <= limit), None)
    if need is not None:
        return (f"The cause is too few runs: the run-to-run spread ({spread:.1%}) is below "
                f"the threshold, but {int(ev.df) + 1} earlier run(s) estimate it too loosely "
                f"to resolve {percent(rule.threshold)}; record runs of earlier commits until "
                f"about {need} have been measured (or compare now with --perfgate-ab "
                "BASE_REV).")
    most = (limit - ev.slack) / (t_ppf(1 - rule.alpha, 1e6) * room)
    return (f"The cause is the spread: this runner's run medians scatter by {spread:.1%}, "
            f"and resolving {percent(rule.threshold)} at alpha={rule.alpha:g} needs a "
            f"spread below {max(most, 0.0):.1%} however many runs are recorded; "
            f"{metric.noisy}")


def no_baseline(message: str, metric: Metric = ENV_STEPS) -> Verdict:
    return Verdict(Outcome.NO_BASELINE, metric.say(message))


def unstable(message: str, metric: Metric = ENV_STEPS) -> Verdict:
    return Verdict(Outcome.UNSTABLE, metric.say(message))


def never_steady(warmup_load: float | None, who: str = "", spoiled_after: int = 0) -> str:
    """Why warm-up never settled, and what to do: outside load when the guard saw it (during
    warm-up, or spoiling ``spoiled_after`` windows or turn pairs measured after it: the
    user can only wait for a quiet machine, or alternate base and head), else the
    workload's own speed."""
    what = f"the {who} side never reached steady state" if who else \
        "steady state was never reached"
    fix = ("run again when the machine is quiet, or compare with --perfgate-ab BASE_REV, "
           "which measures both in the same seconds")
    if warmup_load is not None:
        return (f"{what} during warm-up while other work on this machine kept "
                f"{warmup_load:.1f} core(s) busy (outside load, seen by the load guard): "
                f"the cause is that load, not the code; {fix}")
    if spoiled_after:
        return (f"{what} during warm-up, and the load guard then saw outside load spoil "
                f"{spoiled_after} of the windows measured after it: other work on this "
                f"machine came and went, which is the likely cause, not the code; {fix}")
    return (f"{what} during warm-up, with no outside load seen: the workload's own speed "
            "kept changing; raise --perfgate-warmup-max, and if the step is yours, make it "
            "reach a steady state (docs/measurement.md)")


def evaluate(current: Sequence[float], baseline: Sequence[Sequence[float]], rule: Rule,
             *, steady: bool = True, spread: Sequence[Sequence[float]] | None = None,
             polluted: int = 0, baseline_polluted: Sequence[int] = (),
             metric: Metric = ENV_STEPS, warmup_load: float | None = None,
             spread_polluted: Sequence[int] = (), load_windows: int = 0) -> Verdict:
    """The history gate: current run's window samples vs baseline runs' window samples
    (``load_windows``: the current run's windows the load guard saw spoiled, kept or
    measured again)."""
    if not steady:
        return unstable(never_steady(warmup_load, spoiled_after=load_windows), metric)
    if not any(baseline):
        return no_baseline("no earlier run on this machine to compare with", metric)
    return decide(history_evidence(current, baseline, spread, polluted=polluted,
                                   baseline_polluted=baseline_polluted, metric=metric,
                                   spread_polluted=spread_polluted),
                  rule, metric)
