"""History mode with instruction counts beside steps/s (``--perfgate-counts``).

Each ``measure()`` is first measured and judged in wall time exactly as the history mode
does; then, for a test that counts, its counting worker (:mod:`.runner`) runs once per test
and each benchmark gets a second result ``<name>.counts``: samples are instructions per
env-step of the counted calls (lower is better, like the wall-time samples), judged by the
same gate against the same benchmark's earlier counts. Instructions per env-step of each
``perfgate.phase()`` (and ``(other)``) are recorded beside them for display, not gated.
Counts of a deterministic step do not vary, so the spread is ~0 and the threshold decides;
when they do vary, the spread the gate sees says so (docs/design.md §10).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.metric import ENV_STEPS, counted_per, counts_metric
from pytest_perfgate.core.results import BenchResult
from pytest_perfgate.core.window import WindowSource
from pytest_perfgate.history.asv import COUNTS_PHASES_KEY, COUNTS_SOURCE  # asv series
from pytest_perfgate.modes.counts import phases
from pytest_perfgate.modes.counts.runner import L1_MISS_CYCLES, LL_MISS_CYCLES, Counts, CountsError
from pytest_perfgate.modes.counts.worker import NOT_A_LOOP
from pytest_perfgate.modes.mode import BenchCall
from pytest_perfgate.modes.recorded import HistoryMode

SUFFIX = ".counts"
FORMULA = f"Ir + {L1_MISS_CYCLES}*(I1mr+D1mr+D1mw) + {LL_MISS_CYCLES}*(ILmr+DLmr+DLmw)"
Runner = Callable[[str, Path], dict[str, Counts]]  # (nodeid, cwd) -> counts per benchmark


def counts_result(c: Counts, name: str, rate: str = ENV_STEPS.unit) -> BenchResult:
    """The recorded result of one benchmark's counts: samples in instructions per env-step
    (per call for a pytest-benchmark test: the unit of ``rate``, its wall-time result's);
    ``rate`` holds env-steps per million instructions (the report's throughput
    column), so the report's baseline column reads the same way."""
    ipe = c.per_step()
    cyc = c.cycles_per_step()
    return BenchResult(
        name=name + SUFFIX, samples=tuple(float(x) for x in ipe),
        rate=1e6 / statistics.median(ipe), transitions=c.transitions,
        source=COUNTS_SOURCE, unit=counts_metric(counted_per(rate)).unit,
        extra={"instructions_per_step": statistics.median(ipe),
               "est_cycles_per_step": statistics.median(cyc),
               "est_cycles_samples": [float(x) for x in cyc], "est_cycles_formula": FORMULA,
               "counted_calls": len(ipe), "events_last_call": dict(c.events),
               **({COUNTS_PHASES_KEY: phases.per_step(c.phase_ir, c.transitions)}
                  if c.phase_ir else {})})



class CountsMode:
    """The history mode plus, per counting test, a callgrind worker and a counts verdict."""

    runs_step = True

    def __init__(self, history: HistoryMode, cwd: Path, runner: Runner | None = None) -> None:
        self.history = history
        self.cwd = cwd
        self.runner = runner
        self._counts: dict[str, dict[str, Counts]] = {}  # test id -> its counts

    @property
    def tag(self) -> str | None:
        return self.history.tag

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        counting = call.counts and not self.history.smoke
        if counting and not isinstance(source, LoopSource):  # before anything is measured
            raise CountsError(f"{call.name}: {NOT_A_LOOP}; mark the test "
                              "@pytest.mark.perfgate(counts=False) to keep its wall-time verdict")
        j = self.history.measure(source, call)
        if not counting:
            return j
        counts = self._counts.get(call.test_id)
        if counts is None:
            from pytest_perfgate.modes.counts.runner import run_counts

            run: Runner = self.runner or run_counts
            counts = self._counts[call.test_id] = run(call.test_id, self.cwd)
        c = counts.get(call.name)
        if c is None:
            raise CountsError(f"the counting worker of {call.test_id} measured "
                              f"{sorted(counts)}, not {call.name!r}: does the test measure "
                              "the same benchmarks each time it runs?")
        result = counts_result(c, call.name, call.unit)
        self.history.judge(result, call.test_id, call.rule)  # its unit words the verdict
        return j

    def end_test(self, test_id: str) -> None:
        self._counts.pop(test_id, None)
        self.history.end_test(test_id)
