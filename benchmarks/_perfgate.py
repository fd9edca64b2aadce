"""How the suite's benchmarks measure and name themselves (docs/design.md §6).

Each benchmark is an asv ``track_`` whose number comes from the plugin's own steady-state
Meter (warm-up until stable, 8 windows of 1 s, the outside-load guard), not from asv's
timing loop: the median window's seconds per env-step, the same summary the gate uses. Its
``benchmark_name`` is perfgate's gated series for the workload (``<name>.track_s_per_step``)
and its ``version`` the series version, so `asv run` and `pytest --perfgate` runs of one
workload land on one asv series, and perfgate reads asv's rows back as reduced runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.window import WindowSource

# Spelled out, not imported from pytest_perfgate.history.asv: asv measures older commits with
# this suite too, and their installed package may not have these names yet
# (tests/test_asv_suite.py checks they match the package's).
GATED_SUFFIX = "track_s_per_step"
SERIES_VERSION = "perfgate-2"


def perfgate_track(name: str, timeout: float = 300.0) -> Callable[[Callable[[], float]],
                                                                  Callable[[], float]]:
    """Mark a ``track_`` function as the asv side of perfgate benchmark ``name``."""
    def mark(func: Callable[[], float]) -> Callable[[], float]:
        f: Any = func
        f.benchmark_name = f"{name}.{GATED_SUFFIX}"  # asv_runner: last part must be track_*
        f.pretty_name = f"{name} (s per env-step)"
        f.unit = "seconds"
        f.version = SERIES_VERSION
        f.timeout = timeout
        return func
    return mark


def seconds_per_step(source: WindowSource) -> float:
    """The plugin's measurement of ``source``: its median window, in s per env-step."""
    return Meter(MeasureConfig()).measure(source).value / 1e6


def loop(step: Callable[[], object], transitions: int) -> LoopSource:
    return LoopSource(step, transitions)


def require_mujoco() -> None:
    """asv reads NotImplementedError as "skipped" (NaN), not as a failure."""
    from pytest_perfgate.sim.models import MujocoUnavailable
    from pytest_perfgate.sim.models import require_mujoco as require

    try:
        require()
    except MujocoUnavailable as exc:
        raise NotImplementedError(str(exc)) from None


def importable_in_workers() -> None:
    """Let spawn workers import ``benchmarks._workloads``: asv imports this package through
    an import hook the child does not inherit, but the child does inherit sys.path. Appended,
    never prepended: the project under test must come from asv's environment, not from the
    checkout the suite sits in."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.append(root)
