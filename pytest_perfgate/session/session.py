"""One gating session: measure benchmarks, judge each against history, record the run.

Plain classes, no pytest: the plugin, the asv suite and a CLI drive the same objects.
:class:`PerfGate` is what a perf test holds (``perfgate.measure(step, transitions=N)``);
:class:`GateSession` owns the machine facts, the loaded history and the verdicts.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_perfgate.core.load import LoadProbe
from pytest_perfgate.core.gate import Outcome, Rule, Verdict, evaluate, no_baseline
from pytest_perfgate.core.measure import LoopSource, MeasureConfig, Measurement, Meter, Window, WindowSource
from pytest_perfgate.session.options import Options
from pytest_perfgate.core.results import BenchResult, PhaseSummary, RunRecord
from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock, PhaseRecorder

SPREAD_RUNS = 20  # runs the run-to-run spread is estimated from (the level: baseline_runs)
_NAME_OK = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class PerfgateUsageError(ValueError):
    """A perf test called the API wrongly; the message names the value and the fix."""


def check_name(name: str) -> str:
    """Benchmark names end up in asv file names: keep them to a safe alphabet."""
    if not isinstance(name, str) or not _NAME_OK.match(name) or ".." in name:
        raise PerfgateUsageError(
            f"name={name!r} is not a usable benchmark name: use letters, digits, '_', '.' "
            "and '-' (no '..', no '/'), e.g. name='humanoid_256'")
    return name


def derive_name(nodeid: str) -> str:
    """'perf/test_x.py::test_walk[256]' -> 'perf.test_x.test_walk_256_'."""
    path, _, rest = nodeid.partition("::")
    base = path[:-3] if path.endswith(".py") else path
    text = ".".join(p for p in [base.replace("/", "."), rest.replace("::", ".")] if p)
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text).strip(".") or "benchmark"


def summarize(name: str, m: Measurement, transitions: int, source: str = "perfgate",
              extra: Mapping[str, Any] | None = None) -> BenchResult:
    share = m.phase_share()
    phases = {n: PhaseSummary(st.ms_per_call, share.get(n, 0.0), st.cores)
              for n, st in m.phases.items()}
    return BenchResult(name=name, samples=tuple(m.samples), steps_per_s=m.steps_per_s,
                       cores=m.cores, steady=m.steady, warmup_s=m.warmup_s,
                       warmup_windows=m.warmup_windows, remeasured=m.remeasured,
                       polluted_kept=m.polluted_kept, transitions=transitions, phases=phases,
                       source=source, extra=dict(extra or {}))


@dataclass
class Judged:
    """A benchmark result with its verdict and what the verdict was based on."""

    result: BenchResult
    verdict: Verdict | None  # None in smoke mode
    rule: Rule
    test_id: str
    baseline_commits: list[str] = field(default_factory=list)
    baseline_steps_per_s: float | None = None
    baseline_phases: dict[str, float] = field(default_factory=dict)  # median ms per call


class GateSession:
    """Collects results of one session, judges them, records them as history."""

    def __init__(self, options: Options, rootdir: Path, clock: Clock = SYSTEM_CLOCK) -> None:
        self.options = options
        self.rootdir = Path(rootdir)
        self.clock = clock
        self.load_probe: LoadProbe | None = None  # None: /proc/stat (tests inject their own)
        self.smoke = not options.enabled
        self.judged: list[Judged] = []
        self.started_at = time.time()
        self.run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
        self._ctx: _HistoryContext | None = None
        self.record_path: Path | None = None
        self.record_error: str | None = None
        self.ab: ABSetup | None = None  # controller of an interleaved A/B run
        self.side_conn: Any = None  # this process is one side of an A/B run
        if os.environ.get("PERFGATE_SIDE_FD"):
            from pytest_perfgate.modes.ab import side_connection

            self.side_conn = side_connection()
            self.smoke = False  # a side measures for real; the controller judges and records

    def meter_config(self, windows: int | None = None,
                     window_time: float | None = None) -> MeasureConfig:
        if self.smoke:
            return MeasureConfig.smoke()
        o = self.options
        return MeasureConfig(windows=windows or o.windows, window_s=window_time or o.window_time,
                             warmup_max_s=o.warmup_max, load_limit=o.load_limit)

    def meter(self, **kw: Any) -> Meter:
        from pytest_perfgate.core.load import NullProbe

        probe = NullProbe() if self.smoke else self.load_probe
        return Meter(self.meter_config(**kw), clock=self.clock, load_probe=probe)

    def rule(self, threshold: float | None = None) -> Rule:
        o = self.options
        return Rule(threshold=threshold if threshold is not None else o.default_threshold(),
                    alpha=o.alpha, unstable=o.unstable, inconclusive=o.inconclusive)

    @property
    def history(self) -> _HistoryContext:
        if self._ctx is None:
            self._ctx = _HistoryContext(self.options, self.rootdir)
        return self._ctx

    def judge(self, result: BenchResult, test_id: str, threshold: float | None = None) -> Judged:
        rule = self.rule(threshold)
        if self.smoke:
            j = Judged(result, None, rule, test_id)
        else:
            j = self.history.judge(result, rule, test_id)
        self.judged.append(j)
        return j

    def finish(self) -> RunRecord | None:
        """Record this run (unless smoke, disabled, or empty). Returns what was written."""
        if self.smoke or not self.options.record or not self.judged:
            return None
        run, self.record_path = self.history.record(
            self.run_id, self.started_at, {j.result.name: j.result for j in self.judged})
        return run


@dataclass(frozen=True)
class ABSetup:
    """An A/B run's two sides: what to start for each test, and what base is."""

    base: Any  # ab.SideSpec
    head: Any
    base_commit: str
    base_label: str
    plugin_root: str


class _HistoryContext:
    """Machine facts, git facts and past runs, gathered once per session."""

    def __init__(self, options: Options, rootdir: Path) -> None:
        from pytest_perfgate.history import store as history
        from pytest_perfgate.history import machine
        from pytest_perfgate.history import vcs

        self.options = options
        self.rootdir = rootdir
        self.meta = machine.collect_metadata(options.machine)
        self.machine = self.meta["machine"]
        self.fingerprint = machine.fingerprint(self.meta)
        self.git = vcs.git_info(rootdir)
        self.results_dir = options.results_path(rootdir)
        self.store = history.History(self.results_dir, self.machine)
        self.runs = self.store.load_runs()
        self._ancestor_cache: dict[str, bool] = {}

    def is_ancestor(self, commits: set[str]) -> set[str]:
        from pytest_perfgate.history import vcs

        if not self.git.available:
            return set(commits)  # outside git every run of this machine counts; README says so
        todo = {c for c in commits if c not in self._ancestor_cache}
        if todo:
            yes = vcs.ancestors_filter(self.rootdir, self.git.commit, todo)
            self._ancestor_cache.update({c: c in yes for c in todo})
        return {c for c in commits if self._ancestor_cache[c]}

    def judge(self, result: BenchResult, rule: Rule, test_id: str) -> Judged:
        from pytest_perfgate.history import store as history

        n = self.options.baseline_runs
        wide = history.select_baseline(
            self.runs, result.name, fingerprint=self.fingerprint, head_commit=self.git.commit,
            is_ancestor=self.is_ancestor, n=max(n, SPREAD_RUNS),
            explicit_commit=self.options.baseline)
        wide.sort(key=lambda rb: rb[0].started_at, reverse=True)
        base = wide[:n]
        commits = [run.commit for run, _ in base]
        if not result.steady or base:
            verdict = evaluate(result.samples, [b.samples for _, b in base], rule,
                               steady=result.steady, spread=[b.samples for _, b in wide])
        else:
            verdict = no_baseline(self._why_no_baseline(result.name))
        base_sps, base_phases = None, {}
        if base:
            import statistics

            base_sps = statistics.median(b.steps_per_s for _, b in base)
            names = {p for _, b in base for p in b.phases}
            base_phases = {p: statistics.median(b.phases[p].ms_per_call for _, b in base
                                                if p in b.phases) for p in names}
        return Judged(result, verdict, rule, test_id, commits, base_sps, base_phases)

    def _why_no_baseline(self, name: str) -> str:
        from pytest_perfgate.history import store as history

        if self.options.baseline:
            return (f"no run of commit {self.options.baseline} on machine {self.machine!r} "
                    f"has {name}; recorded, nothing to compare with")
        other = history.describe_other_fingerprints(self.runs, self.fingerprint, name,
                                                    current_meta=self.meta)
        where = f"machine {self.machine!r}, fingerprint {self.fingerprint}"
        if other:
            return f"{other}; recorded as the first result of {where}"
        git = "" if self.git.available else f" (outside git: {self.git.reason})"
        return (f"no earlier run of {name} on {where} at an ancestor commit{git}; this "
                "result was recorded and becomes the baseline")

    def record(self, run_id: str, started_at: float,
               benches: Mapping[str, BenchResult]) -> tuple[RunRecord, Path]:
        g = self.git
        run = RunRecord(run_id=run_id, started_at=started_at, commit=g.commit,
                        commit_date_ms=g.commit_date_ms, branch=g.branch, dirty=g.dirty,
                        machine=self.machine, fingerprint=self.fingerprint,
                        metadata=self.meta, benchmarks=dict(benches))
        return run, self.store.record(run, {})


class PerfGate:
    """What a perf test holds: ``measure()`` a step, and ``phase()`` inside it."""

    def __init__(self, session: GateSession, test_id: str, default_name: str,
                 threshold: float | None = None,
                 on_result: Callable[[Judged], None] | None = None) -> None:
        self.session = session
        self.test_id = test_id
        self._default_name = default_name
        self._threshold = threshold
        self._on_result = on_result
        self.recorder = PhaseRecorder(session.clock)
        self.results: list[Judged] = []
        self._pair: Any = None  # ab.Pair, in A/B controller mode

    @property
    def smoke(self) -> bool:
        """True when perf tests run without --perfgate: tiny windows, no record, no gate."""
        return self.session.smoke

    @property
    def runs_step(self) -> bool:
        """False in the A/B controller, whose step is never called (the two sides run it):
        a test may skip expensive set-up then."""
        return self.session.ab is None

    def phase(self, name: str) -> Any:
        """``with perfgate.phase("physics"):`` attributes the block's time to a phase."""
        return self.recorder.phase(name)

    def measure(self, step: Callable[[], object], transitions: int, name: str | None = None,
                *, windows: int | None = None, window_time: float | None = None,
                threshold: float | None = None, extra: Mapping[str, Any] | None = None,
                ) -> Judged:
        """Measure ``step`` (advancing ``transitions`` env-steps per call) at steady state."""
        source = LoopSource(step, transitions, self.recorder, self.session.clock)
        return self.measure_source(source, transitions, name, windows=windows,
                                   window_time=window_time, threshold=threshold, extra=extra)

    def measure_source(self, source: WindowSource, transitions: int, name: str | None = None,
                       *, windows: int | None = None, window_time: float | None = None,
                       threshold: float | None = None, extra: Mapping[str, Any] | None = None,
                       ) -> Judged:
        """Measure any WindowSource (worker group, collector/learner pair) the same way."""
        bench = self._name(name)
        if threshold is not None:
            threshold = Rule(threshold=threshold).threshold  # validates
        threshold = threshold if threshold is not None else self._threshold
        if self.session.side_conn is not None:
            j = self._serve_as_side(source, bench, transitions)
        elif self.session.ab is not None:
            j = self._measure_ab(bench, transitions, threshold, extra)
        else:
            m = self.session.meter(windows=windows, window_time=window_time).measure(source)
            meta = getattr(source, "metadata", None)  # e.g. a worker group's placement
            if callable(meta):
                extra = {**meta(), **dict(extra or {})}
            result = summarize(bench, m, transitions, extra=extra)
            j = self.session.judge(result, self.test_id, threshold)
        self.results.append(j)
        if self._on_result is not None:
            self._on_result(j)
        return j

    def _serve_as_side(self, source: WindowSource, bench: str, transitions: int) -> Judged:
        from pytest_perfgate.modes.ab import Slowed, serve

        slowed = Slowed(source) if isinstance(source, LoopSource) else None
        windows = serve(self.session.side_conn, source, bench, transitions, slowed)
        m = Measurement(tuple(Window.of(w) for w in windows), True, 0.0, 0)
        j = Judged(summarize(bench, m, transitions), None, self.session.rule(), self.test_id)
        return j

    def _measure_ab(self, bench: str, transitions: int, threshold: float | None,
                    extra: Mapping[str, Any] | None) -> Judged:
        from pytest_perfgate.modes.ab import Pair, Side, measure_pair
        from pytest_perfgate.core.gate import decide, paired_evidence, unstable

        ab, o = self.session.ab, self.session.options
        assert ab is not None
        if self._pair is None:
            self._pair = Pair(Side(ab.base, self.test_id, ab.plugin_root),
                              Side(ab.head, self.test_id, ab.plugin_root))
        base_src, head_src = self._pair.next_bench(bench)
        mb, mh = measure_pair(base_src, head_src, self.session.meter(), o.ab_turns,
                              o.ab_turn_time)
        self._pair.done()
        rule = self.session.rule(threshold)
        info = {**dict(extra or {}), "ab_base": ab.base_label, "ab_base_commit": ab.base_commit,
                "ab_base_samples": mb.samples}
        result = summarize(bench, mh, transitions, extra=info)
        if not (mb.steady and mh.steady):
            side = "base" if not mb.steady else "head"
            verdict = unstable(f"the {side} side never reached steady state during warm-up")
        else:
            verdict = decide(paired_evidence(mb.samples, mh.samples), rule)
        base = summarize(bench, mb, transitions)
        j = Judged(result, verdict, rule, self.test_id, [ab.base_commit], base.steps_per_s,
                   {n: p.ms_per_call for n, p in base.phases.items()})
        self.session.judged.append(j)
        return j

    def close(self) -> None:
        """End this test's A/B sides, if any (bounded: terminate, then kill)."""
        if self._pair is not None:
            self._pair.close()
            self._pair = None

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


def failing(judged: list[Judged]) -> list[Judged]:
    return [j for j in judged if j.verdict is not None and j.verdict.fails(j.rule)]


__all__ = ["GateSession", "PerfGate", "Judged", "PerfgateUsageError", "check_name",
           "derive_name", "summarize", "failing", "Outcome"]
