"""What a comparison mode is: the strategy the ``perfgate`` fixture hands each measurement.

A perf test calls ``perfgate.measure(...)``; what happens next depends on how the session
runs, and the session picks that once (:meth:`GateSession` picks a mode):

- :class:`~pytest_perfgate.modes.history.HistoryMode` measures in-process and judges the
  result against recorded runs (or, without ``--perfgate``, only smoke-runs the step);
- :class:`~pytest_perfgate.modes.ab.controller.ABController` measures a base and a head
  side process in alternating turns and judges the paired ratio;
- :class:`~pytest_perfgate.modes.ab.side.ABSide` serves windows to a controller and judges
  nothing.

Each mode owns its verdict path: a mode that reaches a verdict hands it to the ``sink`` it
was built with (the session's one entry point for verdicts), and returns it to the test.
Plain code: no pytest, no session import (docs/design.md §8).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_perfgate.core.gate import Rule
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.measure import Meter, WindowSource

Sink = Callable[[Judged], None]  # where a mode delivers each verdict (GateSession.add)
MeterFactory = Callable[..., Meter]  # meter(windows=None, window_time=None) -> Meter


@dataclass(frozen=True)
class BenchCall:
    """One ``measure()`` call of a perf test: which benchmark, and how to judge it."""

    name: str  # the benchmark's name (checked: safe for asv file names)
    test_id: str  # the pytest node id
    transitions: int  # env-steps per call of the step
    rule: Rule  # threshold, alpha and policies for this benchmark
    windows: int | None = None  # per-call overrides of the session's window settings
    window_time: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # workload metadata to record
    counts: bool = False  # also count instructions under callgrind (docs/design.md §10)
    memory_threshold: float | None = None  # gate peak memory too (core/memory.py)
    unit: str = "env-steps/s"  # what one transition is, as a rate (core/metric.py)


class Mode(Protocol):
    """A comparison mode, as the fixture and the session see it."""

    @property
    def tag(self) -> str | None:
        """The run's ``mode`` metadata when this session records ("history", "ab"); None
        when it records nothing (smoke mode, an A/B side)."""

    @property
    def runs_step(self) -> bool:
        """False when the step is run elsewhere (the A/B controller's sides run it)."""

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        """Measure ``source`` for the benchmark ``call`` names; return its result."""

    def end_test(self, test_id: str) -> None:
        """Release what this mode holds for one test (the A/B sides); bounded."""
