"""The history mode: measure in this process, judge against recorded runs, record the run.

Without ``--perfgate`` the same mode smoke-runs the step (tiny windows, no verdict, nothing
recorded). It measures with the meter it is given, has each result judged by the
:class:`~pytest_perfgate.history.judge.HistoryJudge` over the history it is given (a
:class:`~pytest_perfgate.history.context.HistoryContext` opener) and hands each verdict to
its sink. The gate and the baseline rule: docs/design.md §2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_perfgate.core.gate import Rule
from pytest_perfgate.core.judged import Judged, summarize
from pytest_perfgate.core.results import BenchResult
from pytest_perfgate.core.settings import Settings
from pytest_perfgate.core.window import WindowSource
from pytest_perfgate.history.context import HISTORY, HistoryContext
from pytest_perfgate.history.judge import HistoryJudge
from pytest_perfgate.modes.mode import BenchCall, MeterFactory, Sink, recorded_extra

if TYPE_CHECKING:
    from pytest_perfgate.modes.ab.controller import Profiling
    from pytest_perfgate.modes.remeasure import Remeasure


class HistoryMode:
    """Measure here; judge against the newest ancestor runs of this machine fingerprint."""

    runs_step = True

    def __init__(self, smoke: bool, meter: MeterFactory, sink: Sink,
                 context: Callable[[], HistoryContext], settings: Settings,
                 remeasure: Remeasure | None = None, profile: Profiling | None = None
                 ) -> None:
        self.smoke = smoke
        self.profile = profile  # --perfgate-profile: this run's profile, whatever its verdict
        # an INCONCLUSIVE verdict's baseline commit measured again beside this tree
        self.remeasure = remeasure
        self.meter = meter
        self.sink = sink
        # the history is opened lazily: smoke mode never reads it
        self.history_judge = HistoryJudge(context, settings)

    @property
    def tag(self) -> str | None:
        return None if self.smoke else HISTORY

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        m = self.meter(windows=call.windows, window_time=call.window_time).measure(source)
        extra: Mapping[str, Any] = {**recorded_extra(source), **dict(call.extra)}
        if self.profile is not None and self.profile.plan.when == "always" and not self.smoke:
            profile = self.profile.take_one(source, call.name, call.unit)
            extra = {**dict(extra), "profile": profile}
        result = summarize(call.name, m, call.transitions, extra=extra, unit=call.unit)
        if self.remeasure is None or self.smoke:
            j = self.judge(result, call.test_id, call.rule)
        else:
            j = self.remeasure.decide(self.history_judge.judge(result, call.test_id, call.rule),
                                      call)
            self.sink(j)
        if call.memory_rule is not None and not self.smoke:
            for mj in self.history_judge.memory(j.result, call.test_id, call.memory_rule):
                self.sink(mj)
        return j

    def judge(self, result: BenchResult, test_id: str, rule: Rule) -> Judged:
        """Judge a finished result (also pytest-benchmark's) and deliver the verdict."""
        j = Judged(result, None, rule, test_id) if self.smoke else \
            self.history_judge.judge(result, test_id, rule)
        self.sink(j)
        return j

    def end_test(self, test_id: str) -> None:
        pass
