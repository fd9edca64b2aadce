"""One gating session: the fixture object a perf test holds, and the session behind it.

Plain classes, no pytest: the plugin, the asv suite and a CLI drive the same objects.
:class:`PerfGate` is what a perf test holds (``perfgate.measure(step, transitions=N)``); it
names the benchmark, builds its rule and hands the measurement to the session's mode.
:class:`GateSession` picks that mode once (history or smoke, A/B controller, A/B side;
see :mod:`pytest_perfgate.modes.base`), builds it with what it needs (meters, the history,
the verdict sink), and records the run at the end.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_perfgate.core.gate import Rule
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.load import LoadProbe
from pytest_perfgate.core.measure import LoopSource, MeasureConfig, WindowSource
from pytest_perfgate.core.memory import MEMORY_SOURCE
from pytest_perfgate.core.progress import Progress, verdict_summary
from pytest_perfgate.core.results import BenchResult, RunRecord
from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock, PhaseRecorder
from pytest_perfgate.history.context import HistoryOpener
from pytest_perfgate.modes.base import BenchCall, Meters, Mode, Verdicts
from pytest_perfgate.modes.history import HistoryMode
from pytest_perfgate.session.checks import (
    RESERVED_EXTRA,
    PerfgateUsageError,
    check_extra,
    check_name,
    check_threshold,
    check_unit,
    check_windows,
)
from pytest_perfgate.session.naming import derive_name, find_repo_root, stable_nodeid, stable_root
from pytest_perfgate.session.options import Options

if TYPE_CHECKING:
    from pytest_perfgate.modes.ab.controller import ABSetup, Profiling
    from pytest_perfgate.modes.place import Place
    from pytest_perfgate.modes.remeasure import Remeasure



class GateSession:
    """Collects the verdicts of one session and records them as history.

    It composes the plain objects the modes are built with and hands them down: the
    :class:`~pytest_perfgate.modes.base.Meters`, the history opener and the
    :class:`~pytest_perfgate.modes.base.Verdicts` sink; no mode calls back into it.
    ``ab`` (from :func:`pytest_perfgate.modes.ab.start_ab`) makes this the controller of an
    interleaved A/B run; a process the controller started is a side whatever it is given.
    ``on_verdict`` sees every verdict once; ``machine_info`` may add or change machine
    metadata before it is fingerprinted.
    """

    def __init__(self, options: Options, rootdir: Path, clock: Clock = SYSTEM_CLOCK, *,
                 ab: ABSetup | None = None, on_verdict: Callable[[Judged], None] | None = None,
                 machine_info: Callable[[dict[str, Any]], None] | None = None,
                 place: Place | None = None) -> None:
        from pytest_perfgate.modes.ab.side import is_side_process
        from pytest_perfgate.modes.counts.side import is_counts_side

        self.options = options
        self.rootdir = Path(rootdir)
        self.started_at = time.time()
        self.run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
        self.record_path: Path | None = None
        self.record_error: str | None = None
        self.anchor: Path | None = None  # names, results paths and git start here
        self._names: dict[str, str] = {}  # benchmark name -> the test that measured it
        side = is_side_process()
        self.counts_side = is_counts_side()  # a counting worker holds the real state too
        self.smoke = not options.enabled and not side and not self.counts_side
        o = options
        self.meters = Meters(None if self.smoke else MeasureConfig(
            windows=o.windows, window_s=o.window_time, warmup_max_s=o.warmup_max,
            load_limit=o.load_limit), clock)
        self.history = HistoryOpener(self.rootdir, o.results_path, o.machine, machine_info)
        self.verdicts = Verdicts(on_verdict)
        # Judges in-process results in every mode (pytest-benchmark's too).
        self.remeasure: Remeasure | None = None
        if o.remeasure and not (self.smoke or side or self.counts_side or ab is not None):
            from pytest_perfgate.modes.remeasure import Remeasure, RemeasurePlan

            self.remeasure = Remeasure(place, self.meters, RemeasurePlan(
                o.ab_turns, o.ab_turn_time, o.ab_looks, o.ab_setup, o.remeasure_budget),
                profile=self._profiling())
        self.history_mode = HistoryMode(self.smoke, self.meters, self.verdicts, self.history,
                                        o.baseline_runs, o.baseline, records=o.record,
                                        remeasure=self.remeasure,
                                        profile=self._profiling() if o.profile == "always"
                                        and not self.smoke else None)
        self.mode: Mode = self._pick_mode(side, ab)
        self._counts_mode: Mode | None = None

    # what tests and the plugin set after set-up, kept where the meters read them
    @property
    def clock(self) -> Clock:
        return self.meters.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.meters.clock = clock

    @property
    def load_probe(self) -> LoadProbe | None:
        return self.meters.load_probe

    @load_probe.setter
    def load_probe(self, probe: LoadProbe | None) -> None:
        self.meters.load_probe = probe

    @property
    def progress(self) -> Progress:
        return self.meters.progress

    @progress.setter
    def progress(self, progress: Progress) -> None:
        self.meters.progress = progress

    @property
    def judged(self) -> list[Judged]:
        """Every verdict of this session, in order."""
        return self.verdicts.all

    def _pick_mode(self, side: bool, ab: ABSetup | None) -> Mode:
        if self.counts_side:
            from pytest_perfgate.modes.counts.side import CountsSide

            return CountsSide.from_env()
        if side:
            from pytest_perfgate.modes.ab.side import ABSide

            return ABSide.from_env()
        if ab is not None:
            from pytest_perfgate.modes.ab.controller import ABController

            o = self.options
            return ABController(ab, self.meters, self.verdicts, o.ab_turns, o.ab_turn_time,
                                o.ab_looks, self._profiling())
        return self.history_mode

    def _profiling(self) -> Profiling | None:
        """Profiles after two sides' verdicts, as --perfgate-profile asks; their flame
        graph files go to --perfgate-profile-dir, else beside the JSON report (profiles/,
        so a CI job's artifact holds them), else under the session's root,
        .perfgate/profiles/<run id>."""
        if self.options.profile == "off":
            return None
        from pytest_perfgate.modes.ab.controller import Profiling
        from pytest_perfgate.profile.turns import ProfilePlan

        def out_dir() -> Path:
            if self.options.profile_dir:
                return Path(self.options.profile_dir)
            if self.options.json:
                return Path(self.options.json).parent / "profiles"
            return self.stable_root / ".perfgate" / "profiles" / self.run_id

        return Profiling(ProfilePlan(self.options.profile), out_dir, lambda: self.stable_root)

    def mode_for(self, counts: bool) -> Mode:
        """The mode a test's measure() goes to: the session's, or for a test that counts
        (flag or marker) in the history mode, that mode plus a callgrind worker (§10)."""
        if not counts or self.smoke or self.mode is not self.history_mode:
            return self.mode
        if self._counts_mode is None:
            from pytest_perfgate.modes.counts.mode import CountsMode

            self._counts_mode = CountsMode(self.history_mode, self.rootdir)
        return self._counts_mode

    def counts_unavailable(self, wanted: bool) -> str | None:
        """Why a test that wants instruction counts cannot have them here (its skip
        reason, naming the package), or None. Smoke mode and the A/B mode take no counts."""
        if self.mode_for(wanted) is self.mode:
            return None
        from pytest_perfgate.modes.counts.runner import unavailable

        return unavailable()

    def rule(self, threshold: float | None = None) -> Rule:
        o = self.options
        return Rule(threshold=threshold if threshold is not None else o.default_threshold(),
                    alpha=o.alpha, unstable=o.unstable, inconclusive=o.inconclusive)

    def note_test_file(self, path: Path | None, has_ini: bool = False) -> Path:
        """The root this session names benchmarks from, resolves relative results paths
        and asks git in; the first perf test's file decides it (:func:`stable_root`):
        pytest's rootdir moves when an option's value is an existing path."""
        if self.anchor is None and path is not None:
            self.anchor = stable_root(Path(path), self.rootdir, has_ini)
            self.history.root = self.anchor
        return self.stable_root

    @property
    def stable_root(self) -> Path:
        """Where names, relative results paths and git lookups start (see above)."""
        return self.anchor or self.rootdir

    def claim_name(self, name: str, test_id: str) -> None:
        """One series per benchmark name per session: a second test measuring the same
        name would silently share (and corrupt) the first one's history."""
        first = self._names.setdefault(name, test_id)
        if first != test_id:
            raise PerfgateUsageError(
                f"benchmark name {name!r} is measured by two tests, {first} and {test_id}: "
                "both would record into one series and judge each other's numbers. Give "
                "one of them its own name (measure(..., name='...')).")

    @property
    def records(self) -> bool:
        """Whether this session judges and records (not smoke mode, not an A/B side)."""
        return self.mode.tag is not None

    @property
    def machine_meta(self) -> dict[str, Any]:
        """The machine metadata if this session gathered it, else {} (never gathers it)."""
        ctx = self.history.opened
        return ctx.meta if ctx is not None else {}

    def run_facts(self) -> dict[str, Any]:
        """Fingerprint, commit, branch and dirty flag, as far as this session gathered
        them (never gathers them itself)."""
        ctx = self.history.opened
        if ctx is None:
            return {}
        out: dict[str, Any] = {"fingerprint": ctx.fingerprint}
        g = ctx.git
        if g.available:
            out.update(commit=g.commit, branch=g.branch, dirty=g.dirty)
        return out

    def judge(self, result: BenchResult, test_id: str, threshold: float | None = None) -> Judged:
        """Judge a result measured elsewhere (an asv row, a tool's) against history."""
        check_name(result.name)
        self.claim_name(result.name, test_id)
        return self.history_mode.judge(result, test_id, self.rule(threshold))

    def finish(self) -> RunRecord | None:
        """Record this run (unless smoke, a side, disabled, or empty). Returns what was
        written; the run's metadata says which mode measured it."""
        tag = self.mode.tag
        if tag is None or not self.options.record or not self.judged:
            return None  # smoke mode, an A/B side (its controller records), or nothing
        # a memory verdict's figures are in its benchmark's own result (core/memory.py)
        benches = {j.result.name: replace(j.result, verdict=j.verdict.outcome.value,
                                          threshold=j.rule.threshold)
                   if j.verdict is not None else j.result for j in self.judged
                   if j.result.source != MEMORY_SOURCE}
        run, self.record_path = self.history().record(
            self.run_id, self.started_at, benches, tag)
        return run


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
        rule = self.session.rule(threshold if threshold is not None else self._threshold)
        return BenchCall(bench, self.test_id, transitions, rule, windows, window_time, extra,
                         counts=self.counts, memory_threshold=self.memory_threshold,
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
        progress.finished(call.name, verdict_summary(j.result.steps_per_s, j.verdict,
                                                     call.unit))
        self.results.extend(mine[before:] or [j])
        return j

    def close(self) -> None:
        """End what the mode holds for this test (the A/B sides: bounded, terminate, kill)."""
        self.session.mode_for(self.counts).end_test(self.test_id)

    def _name(self, name: str | None) -> str:
        taken = {j.result.name for j in self.results}
        if name is not None:
            check_name(name)
            if name in taken:
                raise PerfgateUsageError(f"name={name!r} was already measured in this test: "
                                         "give each measure() call its own name")
            return name
        base = self._default_name
        return base if base not in taken else f"{base}.{len(self.results) + 1}"


__all__ = [
    "RESERVED_EXTRA",
    "GateSession",
    "PerfGate",
    "PerfgateUsageError",
    "check_extra",
    "check_name",
    "check_threshold",
    "check_windows",
    "derive_name",
    "find_repo_root",
    "stable_nodeid",
    "stable_root",
]
