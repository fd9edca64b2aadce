"""The evidence a verdict rests on: a log time ratio with its standard error.

Two models, both pure functions of the samples (docs/design.md §1-§3):

* history (:func:`history_evidence`): the current run against the newest runs of the same
  machine. The unit of replication is the run: each run is summarised by the median of its
  windows, and the spread between runs (which includes the machine's drift) sets the
  uncertainty; a run's own precision comes from how its two halves disagree, not from the
  window count.
* paired (:func:`paired_evidence`): base and head measured in alternating short turns; the
  per-turn log ratios are the replicates, summarised by a 20% trimmed mean (Yuen's t).

:mod:`pytest_perfgate.core.gate` turns an :class:`Evidence` into a verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_perfgate.core.metric import ENV_STEPS, Metric

PAIRED_TRIM = 0.2  # trimmed from each end of the paired per-turn log ratios (docs/design.md §3)
MIN_SPREAD_RUNS = 2  # earlier runs needed before the run-to-run spread is seen at all
SPLIT_MIN_WINDOWS = 4  # windows a run needs for its two halves to estimate its own noise


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
    slack: float = 0.0  # log units either way: how far kept polluted windows could move it
    polluted: int = 0  # polluted windows kept (current run and baseline runs)
    thin: str | None = None  # what is missing when the model cannot judge at all
    # paired, group-sequential (core/sequential.py): the look this evidence was judged at
    look: int = 0  # 1-based; 0: not a sequential look
    looks: int = 0  # planned looks
    max_turns: int = 0  # planned turns per side at the last look
    excluded: int = 0  # turn pairs left out: the outside load (or the GPU guard) changed
    # between their turns
    cut_short: bool = False  # re-measuring load-changed pairs ran out before the last look
    # history: indices into the baseline of the runs that set the level (spoiled runs are
    # left out): every figure shown as "the baseline" is of these runs
    level_runs: tuple[int, ...] = ()


def t_dist() -> Any:
    """Student's t from scipy, imported on first use: the plugin import stays cheap."""
    from scipy import stats  # type: ignore[import-untyped]

    return stats.t


def t_sf(t: float, df: float) -> float:
    return float(t_dist().sf(t, df))


def t_ppf(q: float, df: float) -> float:
    return float(t_dist().ppf(q, df))


def _run_noise(runs: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    """How precise one run's median is, from inside the runs: (variance in log units, df).

    Split each run's windows into halves: if the half medians m1, m2 scatter independently,
    var(log m1 - log m2) / 4 estimates the variance of the whole run's median. Windows next
    to each other share the machine's drift, so this is more honest than stdev/sqrt(K).
    Runs of fewer than 4 windows say nothing here: the variance *between* their windows is
    exactly the model docs/design.md §1 rejects (adjacent windows share the drift, so it
    understates the noise and overstates the df), and it once failed unchanged code.
    """
    split = [(math.log(statistics.median(r[:len(r) // 2]))
              - math.log(statistics.median(r[len(r) // 2:]))) ** 2 / 4
             for r in runs if len(r) >= SPLIT_MIN_WINDOWS]
    if split:
        return statistics.fmean(split), len(split)
    return None, 0


def median_slack(samples: Sequence[float], polluted: int) -> float:
    """How far (log units, either way) ``polluted`` unknown windows could move the median.

    The polluted windows are not marked individually, so any ``polluted`` of the samples may
    be wrong: the clean median lies between the order statistics ``polluted`` places either
    side of the middle. Half that range, added to the interval, is what they cost.
    """
    k = len(samples)
    p = max(0, min(int(polluted), k))
    if not p or k < 2:
        return 0.0
    s = sorted(samples)
    lo, hi = s[max((k - 1) // 2 - p, 0)], s[min(k // 2 + p, k - 1)]
    return (math.log(hi) - math.log(lo)) / 2


def spoiled(samples: Sequence[float], polluted: int) -> bool:
    """Outside load spoiled at least half of the run's kept windows: its median is one of
    them, and how far the load moved it is unknowable (docs/design.md §2)."""
    return polluted > 0 and 2 * polluted >= len(samples)


def history_evidence(current: Sequence[float], baseline: Sequence[Sequence[float]],
                     spread: Sequence[Sequence[float]] | None = None, *, polluted: int = 0,
                     baseline_polluted: Sequence[int] = (), metric: Metric = ENV_STEPS,
                     spread_polluted: Sequence[int] = ()) -> Evidence:
    """Compare one run's window samples with earlier runs' (all in time per env-step).

    ``baseline`` (the newest runs) sets the level; ``spread`` (a longer stretch of history,
    default the baseline itself) sets the run-to-run variance of run medians, which is
    floored by the run-noise estimate from inside every run of >= 4 windows (the halves):
    three runs can already catch a gross slowdown, and a drifting history widens the
    interval into INCONCLUSIVE. A spread run outside load mostly spoiled
    (``spread_polluted``) is left out of the spread as a baseline run is left out of the
    level: its median measures the other work. Fewer than 2 spread runs leave the run-to-run
    spread unseen:
    the evidence is marked ``thin`` and the verdict is INCONCLUSIVE.
    ``polluted`` (current run) and ``baseline_polluted`` (per baseline run) count windows
    kept although outside load spoiled them: they widen the interval by ``slack``. A
    :func:`spoiled` current run is ``thin`` (INCONCLUSIVE); spoiled baseline runs are left
    out of the level (all of them spoiled: ``thin``).
    """
    if not current:
        raise ValueError("the current run has no samples")
    counts = [*baseline_polluted][:len(baseline)]
    counts += [0] * (len(baseline) - len(counts))
    runs = [(i, r, int(p)) for i, (r, p) in enumerate(zip(baseline, counts, strict=True))
            if r]
    if not runs:
        raise ValueError("history_evidence needs at least one baseline run")
    # A run whose kept windows were mostly spoiled has a spoiled median: no slack bounds it
    # (the load shifts every window alike, so their spread does not show it).
    kept = [(i, r, p) for i, r, p in runs if not spoiled(r, p)] or runs
    base, bp = [r for _, r, _ in kept], [p for _, _, p in kept]
    y = [math.log(statistics.median(r)) for r in base]
    x = math.log(statistics.median(current))
    n = len(y)
    d = x - statistics.fmean(y)
    if spread:
        sp = [*spread_polluted][:len(spread)]
        sp += [0] * (len(spread) - len(sp))
        wide = [r for r, p in zip(spread, sp, strict=True) if r and not spoiled(r, p)] or base
    else:
        wide = base
    ys = [math.log(statistics.median(r)) for r in wide]
    k = len(ys)
    between = statistics.stdev(ys) if k >= 2 else None
    noise, _ = _run_noise([*wide, current])
    within = math.sqrt(noise) if noise is not None else None
    # A run median's variance is the drift between runs plus the noise inside one: the
    # spread of run medians estimates the sum, the split halves only the second part. So
    # the halves set a floor, never a pooled share (pooling let quiet windows shrink a
    # drifting machine's spread: 6% false alarms in a seeded A/A simulation, 1% without).
    s = max(between or 0.0, within or 0.0)
    df = k - 1
    # the level is the mean of n run medians: each moves by at most its own slack
    slack = median_slack(current, polluted) + sum(
        median_slack(r, p) for r, p in zip(base, bp, strict=True)) / n
    thin = None
    if spoiled(current, polluted):
        thin = (f"outside load spoiled {polluted} of this run's {len(current)} windows and "
                "re-measuring them ran out, so its median measures the other work on this "
                "machine, not the code: run again when the machine is quiet")
    elif all(spoiled(r, p) for _, r, p in runs):
        thin = ("outside load spoiled most windows of every baseline run, so the baseline "
                "level is unknown: record runs when the machine is quiet")
    elif k < MIN_SPREAD_RUNS:
        thin = (f"only {k} earlier run to learn the run-to-run spread from, and one run "
                f"cannot show {metric.drift}: record "
                f"at least {MIN_SPREAD_RUNS} runs of an earlier commit before gating")
    return Evidence(d, s * math.sqrt(1 + 1 / n), float(max(df, 1)), n, "history", between,
                    within, slack, int(polluted) + sum(bp), thin,
                    level_runs=tuple(i for i, _, _ in kept))


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
