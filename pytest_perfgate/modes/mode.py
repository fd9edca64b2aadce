"""What a comparison mode is: the strategy the ``perfgate`` fixture hands each measurement.

A perf test calls ``perfgate.measure(...)``; what happens next depends on how the session
runs, and the session picks that once (:meth:`GateSession` picks a mode):

- :class:`~pytest_perfgate.modes.recorded.HistoryMode` measures in-process and judges the
  result against recorded runs (or, without ``--perfgate``, only smoke-runs the step);
- :class:`~pytest_perfgate.modes.ab.controller.ABController` measures a base and a head
  side process in alternating turns and judges the paired ratio;
- :class:`~pytest_perfgate.modes.ab.side.ABSide` serves windows to a controller and judges
  nothing.

Data flows down: the session builds each mode with what it needs, a :class:`Meters`
(each measurement's meter), the history opener and a :class:`Verdicts` sink; a mode that
reaches a verdict hands it to that sink and returns it to the test. Nothing here calls back
into the session. Plain code: no pytest, no session import (docs/design.md §8).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pytest_perfgate.core.gate import Rule
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.load import LoadProbe
from pytest_perfgate.core.measure import MeasureConfig, Meter
from pytest_perfgate.core.progress import NULL_PROGRESS, Progress
from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock
from pytest_perfgate.core.window import WindowSource

Sink = Callable[[Judged], None]  # where a mode delivers each verdict (GateSession.add)


def discard(judged: Judged) -> None:
    """The sink of a verdict that is not delivered: a re-measurement's own A/B verdict,
    which its caller turns into the record's verdict."""
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
    memory_rule: Rule | None = None  # gate peak memory too, by this rule (core/memory.py)
    unit: str = "env-steps/s"  # what one transition is, as a rate (core/metric.py)
    # the test's file and what follows it in the node id ("::test_walk[8]"): a run of
    # another revision selects the test by these (a node id need not name its file)
    test_file: tuple[str, str] | None = None
    asked_threshold: float | None = None  # the threshold measure() was given (None: none)


def recorded_extra(source: WindowSource) -> dict[str, Any]:
    """What the process that ran ``source`` adds to its record's ``extra``: the source's own
    metadata (a worker group's placement; a ring pair's learner updates/s, ring statistics
    and placement) and the thread pools it, or a process it started, left larger than
    their CPUs (placement/unpinned.py). History mode asks its own source; an A/B side answers the
    controller with it (side.py), so both modes record the same keys."""
    from pytest_perfgate.placement import unpinned

    meta = getattr(source, "metadata", None)
    out = dict(meta()) if callable(meta) else {}
    found = unpinned.unpinned() + unpinned.in_processes(out)
    if found:
        out[unpinned.KEY] = found
    return out


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


class Meters:
    """Each measurement's :class:`Meter`: the session's settings, a call's overrides.

    ``config`` None is smoke mode (tiny windows, no load guard). The clock, load probe and
    progress are read when a meter is built, so a test may swap them after set-up."""

    def __init__(self, config: MeasureConfig | None, clock: Clock = SYSTEM_CLOCK,
                 load_probe: LoadProbe | None = None, progress: Progress = NULL_PROGRESS
                 ) -> None:
        self.config = config
        self.clock = clock
        self.load_probe = load_probe  # None: /proc/stat
        self.progress = progress

    def config_for(self, windows: int | None = None,
                   window_time: float | None = None) -> MeasureConfig:
        if self.config is None:
            return MeasureConfig.smoke()
        c = self.config
        return replace(c, windows=windows or c.windows, window_s=window_time or c.window_s)

    def __call__(self, windows: int | None = None, window_time: float | None = None) -> Meter:
        from pytest_perfgate.core.load import NullProbe

        probe = NullProbe() if self.config is None else self.load_probe
        return Meter(self.config_for(windows, window_time), clock=self.clock,
                     load_probe=probe, progress=self.progress)


class Verdicts:
    """The one verdict path: every mode hands each verdict here, once (the modes' sink).

    Stamps each result with its test's location (docs/design.md §12), keeps the session's
    verdicts in order and each test's own, and tells ``on_verdict`` (the plugin's hook)."""

    def __init__(self, on_verdict: Sink | None = None) -> None:
        self.all: list[Judged] = []
        self.by_test: dict[str, list[Judged]] = {}
        self.locations: dict[str, tuple[str, int]] = {}  # test id -> (file, line), for CI
        self.on_verdict = on_verdict

    def __call__(self, judged: Judged) -> None:
        if judged.where is None:
            judged.where = self.locations.get(judged.test_id)
        self.all.append(judged)
        self.by_test.setdefault(judged.test_id, []).append(judged)
        if self.on_verdict is not None:
            self.on_verdict(judged)
