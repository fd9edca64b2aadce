"""Change points of a recorded series: where its level stepped, found by ruptures.

Why ruptures' PELT (exact segmentation, l2 cost on the log values) and not E-Divisive or
Otava: tools/study_changepoints.py, docs/design.md §11. The penalty is a BIC-like
``PENALTY_BETA * sigma^2 * log(n)`` where sigma is the series' own point-to-point noise,
estimated robustly from successive differences (a step moves one difference, the machine's
drift moves them all, docs/design.md §1): a series only shows the steps its own noise lets
it resolve, so wall time finds large steps and instruction counts small ones.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PENALTY_BETA = 4.0  # chosen by the study: false change points < 0.1 per 40-run A/A series
MIN_SEGMENT = 2  # runs on each side of a change point: one odd run is not a step
MIN_POINTS = 2 * MIN_SEGMENT
# Relative sigma never assumed below 0.01%: instruction counts repeat exactly, apart from
# one-off 1e-5 blips (the first worker writing the bytecode cache, docs/design.md §10) that
# are no change of the code; steps of ~0.05% and more still show.
NOISE_FLOOR = 1e-4
INSTALL = "pip install 'pytest-perfgate[report]'  (or: pip install ruptures)"


class MissingLibrary(RuntimeError):
    """The change-point library is not installed; the message names the install command."""


@dataclass(frozen=True)
class ChangePoint:
    """The series' level stepped between ``index - 1`` and ``index``."""

    index: int  # first point of the new segment
    before: float  # median of the segment before (series units)
    after: float  # median of the segment after

    @property
    def ratio(self) -> float:
        """after / before (a time series: > 1 is slower)."""
        return self.after / self.before


def noise(values: Sequence[float]) -> float:
    """Robust sigma of the log values: 1.4826 x MAD of successive differences / sqrt(2)."""
    logs = [math.log(v) for v in values]
    diffs = [b - a for a, b in itertools.pairwise(logs)]
    if not diffs:
        return NOISE_FLOOR
    med = statistics.median(diffs)
    mad = statistics.median(abs(d - med) for d in diffs)
    return max(1.4826 * mad / math.sqrt(2), NOISE_FLOOR)


def require() -> None:
    """Raise MissingLibrary unless ruptures can be imported."""
    try:
        import ruptures  # noqa: F401
    except ImportError:
        raise MissingLibrary("change points need the ruptures library, which is not "
                             f"installed: {INSTALL}") from None


def detect(values: Sequence[float], beta: float = PENALTY_BETA) -> list[ChangePoint]:
    """Change points of a positive series (oldest first); [] when it is too short to have
    one (fewer than two runs on each side)."""
    if len(values) < MIN_POINTS:
        return []
    if any(not (math.isfinite(v) and v > 0) for v in values):
        raise ValueError("change points need positive finite values, found "
                         f"{[v for v in values if not (math.isfinite(v) and v > 0)][:3]}")
    require()
    import numpy as np
    import ruptures

    logs = np.log(np.asarray(values, dtype=float))
    sigma = noise(values)
    pen = beta * sigma ** 2 * math.log(len(values))
    # KernelCPD with the linear kernel is PELT on the l2 cost (the same segmentation as
    # ruptures.Pelt(model="l2")), in C: 3000 runs in 0.03 s instead of 50 s.
    algo = ruptures.KernelCPD(kernel="linear", min_size=MIN_SEGMENT, jump=1).fit(
        logs.reshape(-1, 1))
    ends = [int(e) for e in algo.predict(pen=pen)][:-1]  # the last "end" is len(values)
    bounds = [0, *ends, len(values)]
    # PELT keeps MIN_SEGMENT runs after a step, so a step at the newest run comes out one
    # run early: each change point moves to the best split between its neighbours, and is
    # dropped when that leaves it too few runs on a side.
    for i in range(1, len(bounds) - 1):
        bounds[i] = _refine(logs, bounds[i - 1], bounds[i + 1])
    # A refined split that leaves fewer than MIN_SEGMENT runs on a side (a step at the
    # newest run, one run old) is not a change point yet: it needs its runs on each side.
    kept = [0]
    for b in bounds[1:-1]:
        if b - kept[-1] >= MIN_SEGMENT:
            kept.append(b)
    while len(kept) > 1 and len(values) - kept[-1] < MIN_SEGMENT:
        kept.pop()
    bounds = [*kept, len(values)]
    ends = bounds[1:-1]
    out = []
    for i, idx in enumerate(ends):
        before = statistics.median(values[bounds[i]:idx])
        after = statistics.median(values[idx:bounds[i + 2]])
        out.append(ChangePoint(idx, before, after))
    return out


def _refine(logs: Any, lo: int, hi: int) -> int:
    """The split of ``logs[lo:hi]`` into two parts with the least squared error."""
    def cost(a: int, b: int) -> float:
        seg = logs[a:b]
        return float(((seg - seg.mean()) ** 2).sum())

    return min(range(lo + 1, hi), key=lambda k: cost(lo, k) + cost(k, hi))
