"""The counting worker's mode: a pytest run of one perf test under callgrind.

The parent (:mod:`.runner`) starts it with ``PERFGATE_COUNTS_OUT`` naming a folder. When
the test reaches ``perfgate.measure(step, ...)`` this mode calls the step ``WARMUP_CALLS``
times uninstrumented (Python's caches and specialisation warm up at valgrind's fast speed),
then brackets each of ``COUNTED_CALLS`` calls exactly: zero, collect on, ``step()``,
collect off, dump (docs/design.md §10). No instrumented warm-up call for the simulated
caches: it cost as much as the counted call and moved the estimated cycles by 0.16%. It
writes which dumps belong to which benchmark and judges nothing; the parent reads them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.results import BenchResult
from pytest_perfgate.core.window import WindowSource
from pytest_perfgate.modes.counts import client
from pytest_perfgate.modes.counts.phases import PhaseCounts, enabled
from pytest_perfgate.modes.mode import BenchCall

ENV_OUT = "PERFGATE_COUNTS_OUT"  # the folder a counting worker writes to
WARMUP_CALLS = 2  # uninstrumented (fast): Python specialises, caches fill, buffers settle
COUNTED_CALLS = 1  # deterministic: one call is the figure (each instrumented call of the
# shipped humanoid step takes ~20 s under callgrind; docs/design.md §10)
NOT_A_LOOP = ("instruction counts need perfgate.measure(step, ...): a measure_source() "
              "workload runs its steps in other processes, which callgrind does not follow")


_taken: tuple[str | None, Path | None, str | None] | None = None  # (raw, folder, stray)


def _take() -> tuple[Path | None, str | None]:
    """Read ``PERFGATE_COUNTS_OUT`` (again only when it changed): (its folder when this
    process really is a counting worker: the folder exists and valgrind runs it, so a
    pytest the worker's test starts, which valgrind does not follow, is none; else the
    variable's value, for a warning). Left in the environment: a test may ask whether it
    runs in the worker."""
    global _taken
    raw = os.environ.get(ENV_OUT) or None
    if _taken is None or _taken[0] != raw:
        folder = Path(raw) if raw else None
        if folder is not None:
            try:
                real = folder.is_dir() and client.running_on_valgrind() == 1
            except (OSError, RuntimeError):
                real = False
            if not real:
                folder = None
        _taken = (raw, folder, raw if raw and folder is None else None)
    return _taken[1], _taken[2]


def is_counts_side() -> bool:
    """True when this process is a counting worker (started by the counts runner)."""
    return _take()[0] is not None


def stray_counts_variable() -> str | None:
    """The value of ``PERFGATE_COUNTS_OUT`` when this process inherited it but is no
    counting worker (a nested pytest, or set by hand), for a warning; else None. Said once:
    a later call (another session in this process) gets None."""
    global _taken
    folder, stray = _take()
    if _taken is not None:
        _taken = (_taken[0], folder, None)
    return stray


def label(name: str, i: int) -> str:
    """The dump trigger of counted call ``i`` of benchmark ``name``."""
    return f"perfgate-counts:{name}:{i}"


class CountsSide:
    """Count the step's instructions for the parent; record nothing, judge nothing."""

    tag: str | None = None
    runs_step = True

    def __init__(self, out: Path) -> None:
        self.out = out
        self.index = 0

    @classmethod
    def from_env(cls) -> CountsSide:
        folder = _take()[0]
        assert folder is not None, "not a counting worker"
        return cls(folder)

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        entry: dict[str, object] = {"name": call.name, "transitions": call.transitions}
        if not isinstance(source, LoopSource):
            entry["error"] = NOT_A_LOOP
        elif not client.running_on_valgrind():
            entry["error"] = "the counting worker is not running under valgrind"
        else:
            phases: dict[str, float] = {}
            entry["reached_at"] = time.time()  # start-up and the test's set-up end here
            entry["labels"] = count_calls(source, call.name, phases)
            entry["phases_s"] = phases  # where the worker's time goes (the study prints it)
        self.index += 1
        path = self.out / f"bench-{self.index:03d}.json"
        path.write_text(json.dumps(entry))
        result = BenchResult(name=call.name, samples=(1.0,), rate=0.0,
                             transitions=call.transitions, source="perfgate-counts")
        return Judged(result, None, call.rule, call.test_id)

    def end_test(self, test_id: str) -> None:
        """The test has measured everything: a counting worker exits here. The rest (the
        test's teardown, pytest's summary, interpreter exit) would run at valgrind's speed,
        2-4 s that count nothing; the parent runs the test itself and reports it."""
        if self.index and client.running_on_valgrind():
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def count_calls(source: LoopSource, name: str, phases: dict[str, float] | None = None
                ) -> list[str]:
    """Warm up, then bracket each counted call of the raw step; the dump labels in order.
    ``phases`` receives the seconds each part took."""
    step = source.step
    times = phases if phases is not None else {}
    counter = PhaseCounts(source.recorder, enabled())  # per-phase dumps (phases.py)
    t0 = time.monotonic()
    with counter.learning():
        for _ in range(WARMUP_CALLS):
            step()
    t1 = time.monotonic()
    client.start_instrumentation()  # a no-op when instrumentation started at launch
    labels: list[str] = []
    for i in range(COUNTED_CALLS):
        labels.append(label(name, i))
        with counter.call(labels[-1]):
            client.zero_stats()
            client.toggle_collect()
            step()
            client.toggle_collect()
            client.dump_stats_at(labels[-1])
    client.stop_instrumentation()  # the rest of the run at valgrind's uninstrumented speed
    times.update(warmup=t1 - t0, counted=time.monotonic() - t1)
    return labels
