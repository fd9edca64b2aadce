"""One PNG per benchmark: its history, the run being reported, the gate's band, change points.

Sized for a CI job summary or an artifact listing (900 x 320 px at 100 dpi, 9-10 pt labels).
matplotlib is imported lazily with the Agg backend (no display on a runner; the plugin's
import stays cheap). The x axis is the run's position in the history, labelled by commit: runs
hours apart and runs minutes apart are one replicate each (docs/design.md §2).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_perfgate.core.gate import percent
from pytest_perfgate.core.metric import figure
from pytest_perfgate.report.changepoints import ChangePoint
from pytest_perfgate.report.series import GATED, Series

SIZE_IN = (9.0, 3.2)
DPI = 100
MAX_TICKS = 12


@dataclass(frozen=True)
class Band:
    """The gate's baseline: its level and the threshold either side, over the runs it used."""

    level: float  # display units (env-steps/s for the gated series)
    threshold: float  # fraction
    first: int  # index of the oldest baseline run in the series
    last: int  # index of the newest
    runs: tuple[int, ...] = ()  # every baseline run's index (default: first..last)

    @property
    def spans(self) -> list[tuple[int, int]]:
        """The baseline runs as runs of neighbours: the band is drawn over these only."""
        idx = sorted(self.runs or range(self.first, self.last + 1))
        out: list[tuple[int, int]] = []
        for i in idx:
            if out and i == out[-1][1] + 1:
                out[-1] = (out[-1][0], i)
            else:
                out.append((i, i))
        return out


FAILED = frozenset({"REGRESSION", "UNSTABLE"})  # = history.accept.FAILED_VERDICTS
ZOOM_BELOW = 0.2  # a y range under 20% of the top is drawn from near the data, said so


def plot(s: Series, path: Path, current: int | None, band: Band | None,
         cps: Sequence[ChangePoint], title: str, accepted: frozenset[str] = frozenset()
         ) -> Path:
    """Draw ``s`` into ``path`` (PNG); ``current`` is the index of the reported run,
    ``accepted`` the ids of runs a person accepted. Every mark has a legend entry."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    ys = [s.display(p.value) for p in s.points]
    xs = list(range(len(ys)))
    fig, ax = plt.subplots(figsize=SIZE_IN, dpi=DPI)
    try:
        ax.tick_params(labelsize=9)
        if band is not None:
            _band(ax, band, current)
        whiskers = False
        for p, x in zip(s.points, xs, strict=True):  # the run's own windows, min to max
            if p.spread is not None and s.kind == GATED:
                samples = p.run.benchmarks[s.benchmark].samples
                ax.vlines(x, s.display(max(samples)), s.display(min(samples)),
                          colors="0.75", lw=1, label="_nolegend_" if whiskers else
                          "its windows, min to max")
                whiskers = True
        ax.plot(xs, ys, "-", color="0.6", lw=0.8)
        ax.plot(xs, ys, "o", color="0.25", ms=3.5, label="run median")
        _verdict_marks(ax, s, ys, accepted)
        if current is not None:  # a ring under the verdict marks: a failed run shows both
            ax.plot([current], [ys[current]], "o", mfc="none", mec="tab:red", ms=11,
                    mew=1.8, zorder=3, label="this run")
        _change_points(ax, s, cps)
        if len(ys) < 2:
            ax.text(0.02, 0.88, "one run: no history to compare with yet", ha="left",
                    transform=ax.transAxes, fontsize=9, color="0.35")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _pos: figure(x)))
        ax.margins(x=0.02, y=0.15)
        zero = _y_range(ax, ys, band)
        ax.set_ylabel(s.display_unit + (" (higher is better)" if s.kind == GATED else
                                         " (lower is better)"), fontsize=9)
        _commit_ticks(ax, s)
        ax.set_title(title + ("" if zero else "  [y axis does not start at 0]"),
                     fontsize=10, loc="left")
        ax.grid(axis="y", color="0.9", lw=0.6)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  framealpha=0.85, borderaxespad=0)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path


def _band(ax: Any, band: Band, current: int | None) -> None:
    """The gate's level ± threshold over the baseline runs only, and at the reported run
    the limit it was held to."""
    lo, hi = band.level * (1 - band.threshold), band.level * (1 + band.threshold)
    for k, (a, b) in enumerate(band.spans):
        ax.fill_between([a - 0.4, b + 0.4], lo, hi, color="tab:blue", alpha=0.13, lw=0,
                        label=None if k else f"baseline runs ±{percent(band.threshold)}")
        ax.hlines(band.level, a - 0.4, b + 0.4, colors="tab:blue", linestyles="--", lw=1,
                  label=None if k else "baseline level (gate)")
    if current is not None:
        ax.hlines(lo, current - 0.45, current + 0.45, colors="tab:blue", lw=2,
                  label=f"fails below: level -{percent(band.threshold)}")


def _verdict_marks(ax: Any, s: Series, ys: Sequence[float], accepted: frozenset[str]) -> None:
    """Runs that failed the gate (never a baseline unless accepted) and accepted ones."""
    failed = [i for i, p in enumerate(s.points) if p.verdict in FAILED
              and p.run.run_id not in accepted]
    took = [i for i, p in enumerate(s.points) if p.verdict in FAILED
            and p.run.run_id in accepted]
    if failed:
        ax.plot(failed, [ys[i] for i in failed], "x", color="tab:red", ms=7, mew=1.6,
                zorder=6, label="failed the gate (not a baseline)")
    if took:
        ax.plot(took, [ys[i] for i in took], "s", mfc="none", mec="tab:green", ms=8,
                mew=1.4, zorder=6, label="failed, accepted (perfgate accept)")


def _y_range(ax: Any, ys: Sequence[float], band: Band | None) -> bool:
    """Start the y axis at 0 unless the values span less than ZOOM_BELOW of the top (then
    the title says so); True when it starts at 0."""
    top = max([*ys, *([band.level * (1 + band.threshold)] if band else [])])
    low = min([*ys, *([band.level * (1 - band.threshold)] if band else [])])
    if top <= 0 or (top - low) / top >= ZOOM_BELOW:
        ax.set_ylim(bottom=0, top=top * 1.12)
        return True
    return False


def _change_points(ax: Any, s: Series, cps: Sequence[ChangePoint]) -> None:
    n = len(s.points)
    bounds = [0, *(c.index for c in cps), n]
    for k, c in enumerate(cps):
        ax.axvline(c.index - 0.5, color="tab:orange", ls=":", lw=1.5,
                   label=None if k else "change point (commit, change)")
        change = s.display(c.after) / s.display(c.before) - 1
        right = c.index > 0.8 * n  # near the right edge: the label goes left of the line
        ax.annotate(f"{s.points[c.index].run.commit[:7]} {change:+.0%}", (c.index - 0.5, 1),
                    xycoords=("data", "axes fraction"), va="top",
                    xytext=(-3 if right else 3, -3 - 11 * (k % 2)),  # neighbours alternate
                    textcoords="offset points", ha="right" if right else "left",
                    fontsize=8, color="tab:orange")
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):  # each segment's level
        if cps and b > a:
            level = s.display(statistics.median(s.values[a:b]))
            ax.hlines(level, a - 0.4, b - 0.6, colors="tab:orange", lw=1.2, alpha=0.8,
                      label=None if k else "level between change points")


def tick_labels(commits: Sequence[str]) -> list[str]:
    """One label per run: its commit, with the run's number within that commit where the
    commit has several runs (runs of one commit all read alike otherwise)."""
    total = {c: commits.count(c) for c in set(commits)}
    seen: dict[str, int] = {}
    out = []
    for c in commits:
        seen[c] = seen.get(c, 0) + 1
        out.append(c[:7] + (f" #{seen[c]}" if total[c] > 1 else ""))
    return out


def _commit_ticks(ax: Any, s: Series) -> None:
    n = len(s.points)
    step = max(1, -(-n // MAX_TICKS))
    ticks = list(range(0, n, step))
    labels = tick_labels([p.run.commit for p in s.points])
    ax.set_xticks(ticks)
    ax.set_xticklabels([labels[i] for i in ticks], fontsize=8, rotation=30, ha="right")
    ax.set_xlabel(f"run (commit, #: its run of that commit), oldest to newest: {n} run(s)",
                  fontsize=9)
