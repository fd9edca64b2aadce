"""One gating session: what every perf test of a run shares.

Plain classes, no pytest: the plugin, the asv suite and a CLI drive the same objects.
What a perf test holds is :class:`~pytest_perfgate.session.perfgate.PerfGate`.
:class:`GateSession` picks the mode once (history or smoke, A/B controller, A/B side;
see :mod:`pytest_perfgate.modes.mode`), builds it with what it needs (meters, the history,
the verdict sink), and records the run at the end.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.load import LoadProbe
from pytest_perfgate.core.measure import MeasureConfig
from pytest_perfgate.core.progress import Progress
from pytest_perfgate.core.results import BenchRecord, BenchResult, RunRecord
from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock
from pytest_perfgate.history.context import HistoryOpener
from pytest_perfgate.modes.mode import Meters, Mode, Verdicts
from pytest_perfgate.modes.recorded import HistoryMode
from pytest_perfgate.session.checks import (
    PerfgateUsageError,
    check_name,
)
from pytest_perfgate.session.naming import stable_root
from pytest_perfgate.session.options import Options

if TYPE_CHECKING:
    from pytest_perfgate.modes.ab.controller import ABSetup, Profiling
    from pytest_perfgate.modes.place import Place
    from pytest_perfgate.modes.remeasure import Remeasure



class GateSession:
    """Collects the verdicts of one session and records them as history.

    It composes the plain objects the modes are built with and hands them down: the
    :class:`~pytest_perfgate.modes.mode.Meters`, the history opener and the
    :class:`~pytest_perfgate.modes.mode.Verdicts` sink; no mode calls back into it.
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
        from pytest_perfgate.modes.counts.worker import is_counts_side

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
        self.history = HistoryOpener(self.rootdir, o.results_path, o.machine, machine_info,
                                     env_vars=o.env_vars or ())
        self.verdicts = Verdicts(on_verdict)
        # Judges in-process results in every mode (pytest-benchmark's too).
        self.remeasure: Remeasure | None = None
        if o.remeasure and not (self.smoke or side or self.counts_side or ab is not None):
            from pytest_perfgate.modes.remeasure import Remeasure, RemeasurePlan

            self.remeasure = Remeasure(place, self.meters, RemeasurePlan(
                o.ab_turns, o.ab_turn_time, o.ab_looks, o.ab_setup, o.remeasure_budget,
                o.ab_confirm, o.env_files),
                profile=self._profiling())
        self.settings = o.settings()  # what every verdict of this session is judged by
        self.history_mode = HistoryMode(self.smoke, self.meters, self.verdicts, self.history,
                                        self.settings, remeasure=self.remeasure,
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
            from pytest_perfgate.modes.counts.worker import CountsSide

            return CountsSide.from_env()
        if side:
            from pytest_perfgate.modes.ab.side import ABSide

            return ABSide.from_env()
        if ab is not None:
            from pytest_perfgate.modes.ab.controller import ABController

            o = self.options
            return ABController(ab, self.meters, self.verdicts, o.ab_turns, o.ab_turn_time,
                                o.ab_looks, self._profiling(), o.ab_confirm)
        return self.history_mode

    def _profiling(self) -> Profiling | None:
        """Profiles after two sides' verdicts, as --perfgate-profile asks; their flame
        graph files go to --perfgate-profile-dir, else beside the JSON report (profiles/,
        so a CI job's artifact holds them), else under the session's root,
        .perfgate/profiles/<run id>."""
        if self.options.profile == "off":
            return None
        from pytest_perfgate.modes.ab.controller import Profiling
        from pytest_perfgate.profile.interleaved import ProfilePlan

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
            from pytest_perfgate.modes.counts.counting import CountsMode

            self._counts_mode = CountsMode(self.history_mode, self.rootdir)
        return self._counts_mode

    def counts_unavailable(self, wanted: bool) -> str | None:
        """Why a test that wants instruction counts cannot have them here (its skip
        reason, naming the package), or None. Smoke mode and the A/B mode take no counts."""
        if self.mode_for(wanted) is self.mode:
            return None
        from pytest_perfgate.modes.counts.runner import unavailable

        return unavailable()

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
        return self.history_mode.judge(result, test_id, self.settings.rule(threshold))

    def finish(self) -> RunRecord | None:
        """Record this run (unless smoke, a side, disabled, or empty). Returns what was
        written; the run's metadata says which mode measured it."""
        tag = self.mode.tag
        if tag is None or not self.options.record or not self.judged:
            return None  # smoke mode, an A/B side (its controller records), or nothing
        # a memory verdict's figures are in its benchmark's own result (core/memory.py)
        benches = {j.result.name: BenchRecord.of(
            j.result, j.verdict.outcome.value if j.verdict is not None else None,
            j.rule.threshold if j.verdict is not None else None, j.where)
            for j in self.judged if j.memory is None}
        from pytest_perfgate.ring.stream import run_metadata  # {} unless rings were used

        run, self.record_path = self.history().record(
            self.run_id, self.started_at, benches, tag, run_metadata())
        return run
