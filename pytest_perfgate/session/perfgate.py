"""What a perf test holds: ``perfgate.measure(step, transitions=N)`` and ``phase()``.

It names the benchmark, checks the call's arguments before anything is measured, builds
the rule the call is judged by, and hands the measurement to the session's mode. Plain
Python: the plugin's fixture, the pytest-benchmark path and the asv suite hold the same
object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.progress import verdict_summary
from pytest_perfgate.core.timing import PhaseRecorder
from pytest_perfgate.core.window import WindowSource
from pytest_perfgate.modes.mode import BenchCall
from pytest_perfgate.session.checks import (
    PerfgateUsageError,
    check_extra,
    check_name,
    check_threshold,
    check_unit,
    check_windows,
)
from pytest_perfgate.session.gating import GateSession


class PerfGate:
    """What a perf test holds: ``measure()`` a step, and ``phase()`` inside it."""

    def __init__(self, session: GateSession, test_id: str, default_name: str,
                 threshold: float | None = None, counts: bool | None = None,
                 memory_threshold: float | None = None, unit: str | None = None,
                 test_file: tuple[str, str] | None = None) -> None:
        self.session = session
        self.test_file = test_file  # (file, "::rest of the node id"), for A/B sides
        self.memory_threshold = memory_threshold  # the marker's: gate peak memory too
        self.unit = unit  # the unit of work of its measure() calls (None: env-steps)
        # instruction counts for this test: the marker's counts=, else --perfgate-counts
        self.counts = bool(session.options.counts) if counts is None else counts
        self.test_id = test_id
        self._default_name = default_name
        self._threshold = threshold
        self.recorder = PhaseRecorder(session.clock)
        self.results: list[Judged] = []

    @property
    def smoke(self) -> bool:
        """True when perf tests run without --perfgate: tiny windows, no record, no gate."""
        return self.session.smoke

    @property
    def runs_step(self) -> bool:
        """False in the A/B controller, whose step is never called (the two sides run it):
        a test may skip expensive set-up then."""
        return self.session.mode.runs_step

    def phase(self, name: str) -> Any:
        """``with perfgate.phase("physics"):`` attributes the block's time to a phase."""
        return self.recorder.phase(name)

    def measure(self, step: Callable[[], object], transitions: int, name: str | None = None,
                *, windows: int | None = None, window_time: float | None = None,
                threshold: float | None = None, extra: Mapping[str, Any] | None = None,
                unit: str | None = None) -> Judged:
        """Measure ``step`` (advancing ``transitions`` env-steps per call) at steady state;
        ``unit`` names what a transition is when it is not an env-step ("frames")."""
        source = LoopSource(step, transitions, self.recorder, self.session.clock)
        return self.measure_source(source, transitions, name, windows=windows,
                                   window_time=window_time, threshold=threshold, extra=extra,
                                   unit=unit)

    def measure_vector_env(self, envs: Any, policy: Callable[[Any], Any], name: str | None = None,
                           *, seed: int | None = None, windows: int | None = None,
                           window_time: float | None = None, threshold: float | None = None,
                           extra: Mapping[str, Any] | None = None) -> Judged:
        """Measure a gymnasium VectorEnv (or a stable-baselines3 VecEnv) stepped by
        ``policy(obs) -> actions``: num_envs
        env-steps per call, phases ``policy`` and ``env_step`` (sim/vector_env.py). The env
        and the policy are checked first, before anything is measured."""
        from pytest_perfgate.sim.vector_env import VectorEnvError, VectorEnvStep

        check_windows(windows, window_time)
        check_threshold(threshold)
        user = check_extra(extra, frozenset({"vector_env"}))
        if name is not None:
            check_name(name)
        try:
            step = VectorEnvStep(envs, policy, seed=seed)
        except VectorEnvError as e:
            raise PerfgateUsageError(str(e)) from e.__cause__
        return self.measure(step, step.transitions, name, windows=windows,
                            window_time=window_time, threshold=threshold,
                            extra={**step.metadata(), **user})

    def measure_source(self, source: WindowSource, transitions: int, name: str | None = None,
                       *, windows: int | None = None, window_time: float | None = None,
                       threshold: float | None = None, extra: Mapping[str, Any] | None = None,
                       unit: str | None = None) -> Judged:
        """Measure any WindowSource (worker group, collector/learner pair) the same way.

        Every argument is checked here, before anything is measured."""
        check_windows(windows, window_time)
        rate = check_unit(unit if unit is not None else self.unit)
        threshold = check_threshold(threshold)
        meta = getattr(source, "metadata", None)  # keys the source records itself
        extra = check_extra(extra, frozenset(meta()) if callable(meta) else frozenset())
        call = self.call(name, transitions, threshold, extra, rate, windows, window_time)
        mode = self.session.mode_for(self.counts)
        return self.deliver(call, lambda c: mode.measure(source, c))

    def call(self, name: str | None, transitions: int, threshold: float | None,
             extra: Mapping[str, Any], unit: str, windows: int | None = None,
             window_time: float | None = None) -> BenchCall:
        """The benchmark a ``measure()`` call names, with its rule; its name claimed."""
        bench = self._name(name)
        self.session.claim_name(bench, self.test_id)
        settings = self.session.settings
        memory = self.memory_threshold
        return BenchCall(bench, self.test_id, transitions,
                         settings.rule(threshold, self._threshold), windows, window_time, extra,
                         counts=self.counts,
                         memory_rule=None if memory is None else settings.rule(memory),
                         unit=unit, test_file=self.test_file, asked_threshold=threshold)

    def deliver(self, call: BenchCall, measure: Callable[[BenchCall], Judged]) -> Judged:
        """``measure(call)`` with its progress shown; every verdict it delivered for this
        test (--perfgate-counts adds <name>.counts to the wall-time one) is kept so each can
        fail the test; a mode that delivers none (smoke mode delivers its result; an A/B
        side none): what it returned."""
        mine = self.session.verdicts.by_test.setdefault(self.test_id, [])
        before = len(mine)
        progress = self.session.progress
        progress.started(call.name)
        try:
            j = measure(call)
        except BaseException as e:
            progress.finished(call.name, f"stopped by {type(e).__name__}")
            raise
        progress.finished(call.name, verdict_summary(j.result.rate, j.verdict,
                                                     call.unit))
        self.results.extend(mine[before:] or [j])
        return j

    def close(self) -> None:
        """End what the mode holds for this test (the A/B sides: bounded, terminate, kill)."""
        self.session.mode_for(self.counts).end_test(self.test_id)

    def _name(self, name: str | None) -> str:
        taken = {j.name for j in self.results}
        if name is not None:
            check_name(name)
            if name in taken:
                raise PerfgateUsageError(f"name={name!r} was already measured in this test: "
                                         "give each measure() call its own name")
            return name
        base = self._default_name
        return base if base not in taken else f"{base}.{len(self.results) + 1}"
