"""Judging a calibration study: every estimator's verdict through the gate's own rule.

Split from :mod:`calibrate` (which measures): everything here is pure over saved
:class:`~pytest_perfgate.study.calibrate.TrialRecord` s, so ``perfgate calibrate --analyse``
re-judges a study offline at another threshold, estimator or turn count. Each estimator only
reads the paired turns into an :class:`~pytest_perfgate.core.gate.Evidence` (a log ratio,
its standard error and degrees of freedom); ``core.gate.decide`` turns every one of them
into a verdict, so the study judges exactly as the shipped gate does (docs/design.md §3).

Over 300 lines because judging, counting and the report's tables are one study's three
views of the same records; they change together.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_perfgate.core.evidence import PAIRED_TRIM, Evidence, history_evidence, paired_evidence
from pytest_perfgate.core.gate import Outcome, Rule, decide, percent
from pytest_perfgate.core.measure import Window
from pytest_perfgate.core.sequential import Design, plan
from pytest_perfgate.study.calibrate import (
    ESTIMATORS,
    LOAD_CHANGE,
    TARGETS,
    StudyError,
    TrialRecord,
)

BOOTSTRAP_RESAMPLES = 4000


def _stats() -> Any:
    """scipy.stats, imported on first use: the CLI's import stays cheap."""
    from scipy import stats  # type: ignore[import-untyped]

    return stats

# ---- judging -------------------------------------------------------------------------------


def estimator_evidence(base: Sequence[float], head: Sequence[float],
                       estimator: str = "trimmed", seed: int = 0) -> Evidence:
    """Paired per-turn times read by one estimator (see ESTIMATORS), for ``gate.decide``.

    "trimmed" is the shipped gate's ``paired_evidence``, "t" the same at trim 0 (the plain
    mean and t). "wilcoxon" is the Hodges-Lehmann estimate (median of the Walsh averages)
    with the standard error implied by its distribution-free 95% signed-rank interval;
    "bootstrap" the mean with its bootstrap standard error. All use n - 1 degrees of freedom.
    """
    if estimator == "trimmed":
        return paired_evidence(base, head, PAIRED_TRIM)
    if estimator == "t":
        return paired_evidence(base, head, 0.0)
    if estimator not in ESTIMATORS:
        raise StudyError(f"estimator={estimator!r}: use one of {', '.join(ESTIMATORS)}")
    n = len(base)
    if len(head) != n or n < 2:
        raise StudyError(f"{n} base and {len(head)} head turns: an estimator needs equal, "
                         ">= 2 turns per side")
    diffs = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    if estimator == "wilcoxon":
        est, se = _hodges_lehmann(diffs)
    else:
        est, se = _bootstrap_mean(diffs, seed)
    return Evidence(est, se, float(n - 1), n, "paired")


def _hodges_lehmann(d: Sequence[float]) -> tuple[float, float]:
    """The Walsh averages' median, and (upper - lower) / (2 z) of the signed-rank interval."""
    n = len(d)
    walsh = sorted((d[i] + d[j]) / 2 for i in range(n) for j in range(i, n))
    z = float(_stats().norm.ppf(0.975))
    k = int(n * (n + 1) / 4 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    k = min(max(k, 0), (len(walsh) - 1) // 2)
    return statistics.median(walsh), (walsh[-k - 1] - walsh[k]) / (2 * z)


def _bootstrap_mean(d: Sequence[float], seed: int) -> tuple[float, float]:
    """The mean, and the standard deviation of the means of resampled turns (seeded)."""
    import numpy as np

    arr = np.asarray(d, dtype=float)
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, len(arr), (BOOTSTRAP_RESAMPLES, len(arr)))].mean(axis=1)
    return float(arr.mean()), float(means.std(ddof=1))


TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def outside_load(t: TrialRecord) -> list[float] | None:
    """Per turn pair: the larger outside load (busy cores not ours) of its two turns."""
    if not t.probes or any("busy_ticks" not in p for p in t.probes):
        return None
    other = [max(0.0, p["busy_ticks"] / TICKS_PER_S - p.get("cores", 0.0)) for p in t.probes]
    return [max(other[2 * i], other[2 * i + 1]) for i in range(len(other) // 2)]


def paired_outcome(t: TrialRecord, rule: Rule, estimator: str = "trimmed",
                   turns: int | None = None, guard: float | None = None) -> Outcome:
    """A trial's A/B verdict by ``gate.decide``; "trimmed" is the shipped gate itself.

    ``guard``: drop turn pairs where either turn saw more outside load than this many busy
    cores (the /proc/stat noise guard, needs probes); the verdict uses what is left.
    """
    if not t.steady:
        return Outcome.UNSTABLE
    n = turns or len(t.base)
    keep = list(range(n))
    load = outside_load(t) if guard is not None else None
    if guard is not None and load is not None:
        kept = [i for i in keep if load[i] <= guard]
        keep = kept if len(kept) >= 2 else keep
    base = [t.base[i] for i in keep]
    head = [t.head[i] for i in keep]
    return decide(estimator_evidence(base, head, estimator, seed=t.index), rule).outcome




def replay(t: TrialRecord, rule: Rule, design: Design, limit: float = LOAD_CHANGE
           ) -> tuple[Outcome, int, bool]:
    """A trial's recorded pairs judged by a sequential design, as the gate would have:
    (outcome, pairs used, enough): ``enough`` is False when the design wanted more pairs
    than the trial recorded (it stopped sooner live), so the outcome is not the design's."""
    from pytest_perfgate.modes.ab.turns import run_looks

    loads = t.loads or ((None, None),) * len(t.base)
    pairs = [(Window(10**6, b, 0.0, other_load=lb), Window(10**6, h, 0.0, other_load=lh))
             for b, h, (lb, lh) in zip(t.base, t.head, loads, strict=True)]
    short = {"hit": False}

    def feed(i: int) -> tuple[Window, Window] | None:
        if i < len(pairs):
            return pairs[i]
        short["hit"] = True
        return None

    looks = run_looks(feed, design, rule, limit)
    outcome = looks.verdict.outcome if t.steady else Outcome.UNSTABLE
    return outcome, len(looks.pairs), not short["hit"]


def analyse_sequential(trials: Sequence[TrialRecord], rule: Rule, max_turns: int, looks: int,
                       limit: float = LOAD_CHANGE) -> Report:
    """The sequential A/B gate's figures: each trial replayed by the design (max_turns,
    looks); a trial that stopped sooner live than this design would is left out (counted
    in ``Report.left_out``). Seconds: warm-up plus the pairs the design measured."""
    if not trials:
        raise StudyError("no trials to analyse")
    design = plan(max_turns, looks, rule.alpha)
    judged = [(t, *replay(t, rule, design, limit)) for t in trials]
    usable = [(t, o, n) for t, o, n, ok in judged if ok]
    rows = []
    for s in sorted({t.slowdown for t, _, _ in usable}):
        group = [(t, o) for t, o, _ in usable if t.slowdown == s]
        outs = [o for _, o in group]
        rows.append(Row(s, Rate(sum(_fails(o, rule) for o in outs), len(outs)),
                        Rate(sum(o is Outcome.INCONCLUSIVE for o in outs), len(outs)),
                        measured_slowdown([t for t, _ in group]),
                        sum(o is Outcome.UNSTABLE for o in outs)))
    secs = statistics.fmean(t.warmup_s + n * t.turn_wall for t, _, n in usable) \
        if usable else 0.0
    pairs = statistics.fmean(n for _, _, n in usable) if usable else 0.0
    walls = [t.wall_s * n / len(t.base) for t, _, n in usable if t.wall_s and t.base]
    wall = statistics.fmean(walls) if walls else 0.0
    k = len(design.looks)
    return Report("A/B sequential", f"{k} look{'s' if k != 1 else ''}, trimmed", max_turns, rule,
                  tuple(rows), secs, pairs=pairs, wall=wall,
                  left_out=len(judged) - len(usable))


def history_outcomes(trials: Sequence[TrialRecord], rule: Rule, baseline_runs: int
                     ) -> dict[int, Outcome]:
    """History mode: each head run against the base runs of the previous trials."""
    order = sorted((t for t in trials if t.hist_base and t.hist_head), key=lambda t: t.index)
    out: dict[int, Outcome] = {}
    for i, t in enumerate(order):
        if i < baseline_runs:
            continue  # the history is still filling up: a real team would see NO BASELINE
        base = [p.hist_base for p in order[i - baseline_runs:i]]
        out[t.index] = decide(history_evidence(t.hist_head, base), rule).outcome
    return out


# ---- counting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    """k of n, with its exact (Clopper-Pearson) 95% confidence interval."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else float("nan")

    @property
    def ci(self) -> tuple[float, float]:
        if not self.n:
            return (float("nan"), float("nan"))
        ci = _stats().binomtest(self.k, self.n).proportion_ci(0.95, method="exact")
        return (float(ci.low), float(ci.high))

    def __str__(self) -> str:
        if not self.n:
            return "-"
        lo, hi = self.ci
        return f"{self.value:.0%} [{lo:.0%}-{hi:.0%}] ({self.k}/{self.n})"


@dataclass(frozen=True)
class Row:
    """One injected slowdown's figures in one mode."""

    slowdown: float
    called: Rate  # REGRESSION (or a failing UNSTABLE) verdicts
    inconclusive: Rate
    measured: tuple[float, float, float] | None  # slowdown measured: pooled, 95% CI
    unstable: int = 0  # of the called: UNSTABLE warm-ups (they fail CI by default)


@dataclass(frozen=True)
class Report:
    """Everything the study found at one setting (mode x estimator x turns x threshold)."""

    mode: str  # "A/B" or "history"
    estimator: str
    turns: int
    rule: Rule
    rows: tuple[Row, ...]  # first row: slowdown 0 (A/A)
    seconds: float  # measurement seconds per side per verdict (warm-up included)
    pairs: float = 0.0  # sequential: turn pairs measured per verdict, on average
    wall: float = 0.0  # sequential: wall seconds per verdict (both sides, warm-up included)
    left_out: int = 0  # sequential: trials that stopped sooner live than this design

    def row(self, slowdown: float) -> Row | None:
        return next((r for r in self.rows if abs(r.slowdown - slowdown) < 1e-9), None)

    @property
    def false_alarms(self) -> Rate:
        r = self.row(0.0)
        return r.called if r else Rate(0, 0)

    def smallest_detected(self, power: float = 0.95, max_false: float = 0.01) -> float | None:
        """The smallest injected slowdown caught >= power, if false alarms are <= max_false."""
        fa = self.false_alarms
        if not fa.n or fa.value > max_false:
            return None
        hits = [r.slowdown for r in self.rows if r.slowdown > 0 and r.called.n
                and r.called.value >= power]
        return min(hits) if hits else None


def measured_slowdown(trials: Sequence[TrialRecord], turns: int | None = None
                      ) -> tuple[float, float, float] | None:
    """Pooled measured slowdown (head time / base time - 1) over trials, with a 95% CI.

    Each trial contributes the mean of its per-turn log ratios; trials are the replicates,
    so the interval reflects trial-to-trial variation (including the calibration's).
    """
    stats = _stats()
    means = [statistics.fmean(t.diffs[:turns or len(t.base)]) for t in trials if t.diffs]
    if not means:
        return None
    m = statistics.fmean(means)
    if len(means) < 2:
        return (math.expm1(m), float("nan"), float("nan"))
    tq = float(stats.t.ppf(0.975, len(means) - 1))
    half = tq * statistics.stdev(means) / math.sqrt(len(means))
    return (math.expm1(m), math.expm1(m - half), math.expm1(m + half))


def _fails(o: Outcome, rule: Rule) -> bool:
    return o is Outcome.REGRESSION or (o is Outcome.UNSTABLE and rule.unstable == "fail")


def analyse(trials: Sequence[TrialRecord], rule: Rule, estimator: str = "trimmed",
            turns: int | None = None, guard: float | None = None) -> Report:
    """Interleaved A/B figures at this rule/estimator, over the first ``turns`` turns."""
    if not trials:
        raise StudyError("no trials to analyse")
    full = min(len(t.base) for t in trials)
    n = turns or full
    if not 2 <= n <= full:
        raise StudyError(f"turns={turns!r}: the trials hold {full} turns; analyse 2-{full}")
    rows = []
    for s in sorted({t.slowdown for t in trials}):
        group = [t for t in trials if t.slowdown == s]
        outs = [paired_outcome(t, rule, estimator, n, guard) for t in group]
        rows.append(Row(s, Rate(sum(_fails(o, rule) for o in outs), len(outs)),
                        Rate(sum(o is Outcome.INCONCLUSIVE for o in outs), len(outs)),
                        measured_slowdown(group, n), sum(o is Outcome.UNSTABLE for o in outs)))
    secs = statistics.fmean(t.warmup_s + n * t.turn_wall for t in trials)
    name = estimator if guard is None else f"{estimator}, guard {guard:g} cores"
    return Report("A/B", name, n, rule, tuple(rows), secs)


def analyse_history(trials: Sequence[TrialRecord], rule: Rule, baseline_runs: int) -> Report:
    """History-mode figures: K-window runs judged against the previous base runs."""
    outs = history_outcomes(trials, rule, baseline_runs)
    judged = [t for t in trials if t.index in outs]
    rows = []
    for s in sorted({t.slowdown for t in judged}):
        group = [t for t in judged if t.slowdown == s]
        o = [outs[t.index] for t in group]
        logs = [math.log(statistics.median(t.hist_head) / statistics.median(t.hist_base))
                for t in group]
        rows.append(Row(s, Rate(sum(_fails(x, rule) for x in o), len(o)),
                        Rate(sum(x is Outcome.INCONCLUSIVE for x in o), len(o)),
                        (math.expm1(statistics.fmean(logs)), float("nan"), float("nan"))))
    k = len(judged[0].hist_head) if judged else 0
    secs = statistics.fmean(t.warmup_s + t.hist_wall for t in judged) if judged else 0.0
    return Report("history", "runs", k, rule, tuple(rows), secs)


# ---- reporting -----------------------------------------------------------------------------


def render(reports: Iterable[Report]) -> list[str]:
    """A markdown table: one line per mode, false alarms, then detection per slowdown."""
    reports = list(reports)
    slows = sorted({r.slowdown for rep in reports for r in rep.rows if r.slowdown > 0})
    head = ["mode", "A/A false alarms"] + [f"+{percent(s)} caught" for s in slows] + \
           ["INCONCLUSIVE (all trials)", "UNSTABLE", "s per side per verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rep in reports:
        inc = Rate(sum(r.inconclusive.k for r in rep.rows), sum(r.inconclusive.n for r in rep.rows))
        cells = [f"{rep.mode} ({_setting(rep)})", str(rep.false_alarms)]
        for s in slows:
            row = rep.row(s)
            cells.append(str(row.called) if row else "-")
        unst = sum(r.unstable for r in rep.rows)
        cells += [f"{inc.value:.0%}" if inc.n else "-", str(unst), f"{rep.seconds:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _setting(rep: Report) -> str:
    thr = f"threshold {rep.rule.threshold:.1%}, alpha {rep.rule.alpha:g}"
    if rep.mode == "A/B sequential":
        out = f"at most {rep.turns} turns, {rep.estimator}, {thr}"
        return out + (f"; {rep.left_out} trials stopped sooner live, left out"
                      if rep.left_out else "")
    if rep.mode == "history":
        return f"{rep.turns} windows per run, {thr}"
    return f"{rep.turns} turns, {rep.estimator}, {thr}"


NONE_KEPT = ("not measured: no turn pair kept, the outside load changed between the two turns "
             "of every pair")


def render_measured(rep: Report) -> list[str]:
    """Verification that an injected slowdown measures as itself."""
    out = []
    for r in rep.rows:
        what = "A/A" if r.slowdown == 0 else f"injected +{percent(r.slowdown)}"
        if r.measured is None:
            if r.called.n:
                out.append(f"  {what:>14}: {NONE_KEPT} ({r.called.n} trial(s))")
            continue
        m, lo, hi = r.measured
        ci = f" [{lo:+.1%} .. {hi:+.1%}]" if not math.isnan(lo) else ""
        out.append(f"  {what:>14}: measured {m:+.2%}{ci} over {r.called.n} trials")
    return out


def conclusion(rep: Report, power: float = 0.95, max_false: float = 0.01) -> str:
    """The sentence a team wants: the smallest regression this runner catches."""
    fa = rep.false_alarms
    setting = f"({_setting(rep)}, {rep.seconds:.0f} s of measurement per side)"
    if not fa.n:
        return ("No A/A trials were run, so the false-alarm rate is unknown: run with "
                "--aa-trials >= 50.")
    if fa.value > max_false:
        return (f"This runner raised false alarms in {fa} of A/A trials {setting}, above "
                f"{max_false:.0%}: raise --threshold or --turns and run again.")
    s = rep.smallest_detected(power, max_false)
    ci = fa.ci
    if s is None:
        return (f"None of the tested slowdowns was caught >= {power:.0%} of the time "
                f"{setting}: try larger slowdowns, more --turns, or a lower --threshold.")
    row = rep.row(s)
    assert row is not None
    return (f"This runner catches a {percent(s)} slowdown {row.called.value:.0%} of the time "
            f"(95% CI {row.called.ci[0]:.0%}-{row.called.ci[1]:.0%}) with "
            f"{fa.value:.0%} false alarms (95% CI up to {ci[1]:.1%}) {setting}.")


def meets_targets(rep: Report) -> dict[str, bool | None]:
    """The targets for the best mode, judged on point estimates; None where the study did
    not measure what a target needs (a slowdown it did not inject, no A/A trials)."""
    d5, d3, d2, fa = rep.row(0.05), rep.row(0.03), rep.row(0.02), rep.false_alarms
    return {
        "false_alarms<=1%": fa.value <= TARGETS["false_alarms"] if fa.n else None,
        "5% caught>=95%": None if d5 is None else d5.called.value >= TARGETS["detect_5"],
        "3% caught>=80%": None if d3 is None else d3.called.value >= TARGETS["detect_3"],
        "2% caught>=95%": None if d2 is None else d2.called.value >= TARGETS["detect_2"],
        "<=20 s per side": rep.seconds <= TARGETS["seconds"],
    }


def lever_table(trials: Sequence[TrialRecord], rule: Rule,
                estimators: Sequence[str] = ESTIMATORS,
                turns: Sequence[int] = ()) -> list[str]:
    """Offline levers on the same data: estimator x turns -> false alarms, detection, sd."""
    full = min(len(t.base) for t in trials)
    counts = sorted({n for n in (*turns, full) if 2 <= n <= full})
    reps = [analyse(trials, rule, e, n) for n in counts for e in estimators]
    return render(reps)


def sequential_levers(trials: Sequence[TrialRecord], rule: Rule, turns: Sequence[int],
                      looks: Sequence[int] = (1, 2, 4)) -> list[str]:
    """Other sequential designs replayed on the same trials: at most N turns x K looks.
    Trials that measured fewer pairs live than a design needs are left out (and counted)."""
    designs = {(n, plan(n, k, rule.alpha).looks): k for n in sorted(set(turns)) if n >= 2
               for k in sorted(set(looks), reverse=True)}  # merged looks: one row each
    return render(analyse_sequential(trials, rule, n, k) for (n, _), k in sorted(designs.items()))


def noise_summary(trials: Sequence[TrialRecord]) -> dict[str, float]:
    """How noisy the runner is: per-turn spread of base speed, and of the paired log ratio."""
    aa = [t for t in trials if t.slowdown == 0] or list(trials)
    within = [statistics.stdev(math.log(x) for x in t.base) for t in aa if len(t.base) > 1]
    pair_sd = [statistics.stdev(t.diffs) for t in aa if len(t.diffs) > 1]
    speeds = [math.log(statistics.median(t.base)) for t in trials]
    return {
        "base_turn_sd": statistics.median(within) if within else float("nan"),
        "pair_diff_sd": statistics.median(pair_sd) if pair_sd else float("nan"),
        "trial_speed_range": math.exp(max(speeds) - min(speeds)) if speeds else float("nan"),
    }


def probe_correlations(trials: Sequence[TrialRecord]) -> dict[str, float]:
    """Spearman correlation of each probe's rate with the base turn's slowness (log time).

    A probe that tracked the drift would correlate strongly; the guard can only drop
    windows it can see.
    """
    xs: dict[str, list[float]] = {}
    ys: list[float] = []
    for t in trials:
        if not t.probes:
            continue
        # the probes alternate in interleave order (ABBA): recover base turns' readings
        base_probe = [t.probes[2 * i] if i % 2 == 0 else t.probes[2 * i + 1]
                      for i in range(len(t.base))]
        med = statistics.median(math.log(x) for x in t.base)
        for p, x in zip(base_probe, t.base, strict=True):
            ys.append(math.log(x) - med)
            for k, v in p.items():
                xs.setdefault(k, []).append(v)
    out = {}
    for k, rates in xs.items():
        if len(rates) == len(ys) and len(set(rates)) > 1:
            out[k] = float(_stats().spearmanr(rates, ys).statistic)
    return out


__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "LOAD_CHANGE",
    "TICKS_PER_S",
    "Rate",
    "Report",
    "Row",
    "analyse",
    "analyse_history",
    "analyse_sequential",
    "conclusion",
    "estimator_evidence",
    "history_outcomes",
    "lever_table",
    "measured_slowdown",
    "meets_targets",
    "noise_summary",
    "outside_load",
    "paired_outcome",
    "probe_correlations",
    "render",
    "render_measured",
    "replay",
    "sequential_levers",
]
