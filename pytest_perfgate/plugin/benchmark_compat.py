"""Adopt pytest-benchmark results: its per-round times become perfgate windows.

A team's existing ``benchmark`` tests gain history gating without a rewrite; one call of
the benchmarked function counts as one transition, so ops/s is the throughput.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pytest_perfgate.core.results import BenchResult

MAX_WINDOWS = 8


def result_from_rounds(name: str, round_seconds: Sequence[float]) -> BenchResult:
    """Group rounds into at most MAX_WINDOWS consecutive windows, median seconds per op each."""
    data = [float(x) for x in round_seconds if x > 0]
    if not data:
        raise ValueError(f"{name}: pytest-benchmark recorded no positive round times")
    k = min(MAX_WINDOWS, len(data))
    size, rem = divmod(len(data), k)
    windows, start = [], 0
    for i in range(k):
        stop = start + size + (1 if i < rem else 0)
        windows.append(statistics.median(data[start:stop]) * 1e6)
        start = stop
    return BenchResult(name=name, samples=tuple(windows),
                       steps_per_s=1e6 / statistics.median(windows), cores=0.0,
                       transitions=1, source="pytest-benchmark",
                       extra={"rounds": len(data)})
