"""Judging a calibration study: every estimator's verdict through the gate's own rule.

Split from :mod:`calibrate` (which measures): everything here is pure over saved
:class:`~pytest_perfgate.study.trials.TrialRecord` s, so ``perfgate calibrate --analyse``
re-judges a study offline at another threshold, estimator or turn count. Each estimator only
reads the paired turns into an :class:`~pytest_perfgate.core.gate.Evidence` (a log ratio,
its standard error and degrees of freedom); ``core.gate.decide`` turns every one of them
into a verdict, so the study judges exactly as the shipped gate does (docs/design.md §3).

The records it fills are in :mod:`.findings`; :mod:`.tables` renders them.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from typing import Any

from pytest_perfgate.core.evidence import PAIRED_TRIM, Evidence, history_evidence, paired_evidence
from pytest_perfgate.core.gate import Outcome, Rule, decide
from pytest_perfgate.core.sequential import Design, plan
from pytest_perfgate.core.window import Window
from pytest_perfgate.study.findings import Rate, Report, Row
from pytest_perfgate.study.trials import (
    ESTIMATORS,
    LOAD_CHANGE,
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
    from pytest_perfgate.modes.ab.abba import run_looks

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
