"""The history mode: measure in this process, judge against recorded runs, record the run.

Without ``--perfgate`` the same mode smoke-runs the step (tiny windows, no verdict, nothing
recorded). :class:`HistoryContext` holds what a session gathers once (machine and git facts,
past runs) and writes the run at the end, whichever mode measured it. The gate and the
baseline rule: docs/design.md §2.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_perfgate.core.gate import Rule, evaluate, no_baseline
from pytest_perfgate.core.judged import Judged, summarize
from pytest_perfgate.core.measure import WindowSource
from pytest_perfgate.core.results import BenchResult, RunRecord
from pytest_perfgate.modes.base import BenchCall, MeterFactory, Sink

SPREAD_RUNS = 20  # runs the run-to-run spread is estimated from (the level: baseline_runs)
MODE_KEY = "mode"  # run metadata: which mode measured the run ("history" or "ab")
HISTORY = "history"


def is_history_run(run: RunRecord) -> bool:
    """Runs of the history mode's protocol (runs recorded before the tag existed count)."""
    return run.metadata.get(MODE_KEY, HISTORY) == HISTORY


class HistoryContext:
    """Machine facts, git facts and past runs, gathered once per session."""

    def __init__(self, rootdir: Path, results_dir: Path, machine_name: str | None,
                 machine_info: Callable[[dict[str, Any]], None] | None = None) -> None:
        from pytest_perfgate.history import machine, vcs
        from pytest_perfgate.history import store as history

        self.rootdir = rootdir
        self.meta = machine.collect_metadata(machine_name)
        if machine_info is not None:  # users add or change fields before the fingerprint
            machine_info(self.meta)
        self.machine = self.meta["machine"]
        self.fingerprint = machine.fingerprint(self.meta)
        self.git = vcs.git_info(rootdir)
        self.results_dir = results_dir
        self.store = history.History(results_dir, self.machine)
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

    def record(self, run_id: str, started_at: float, benches: Mapping[str, BenchResult],
               mode: str) -> tuple[RunRecord, Path]:
        """Write the run, tagged with the mode that measured it (``metadata["mode"]``)."""
        g = self.git
        run = RunRecord(run_id=run_id, started_at=started_at, commit=g.commit,
                        commit_date_ms=g.commit_date_ms, branch=g.branch, dirty=g.dirty,
                        machine=self.machine, fingerprint=self.fingerprint,
                        metadata={**self.meta, MODE_KEY: mode}, benchmarks=dict(benches))
        return run, self.store.record(run, {})


class HistoryMode:
    """Measure here; judge against the newest ancestor runs of this machine fingerprint.

    Only history-mode runs serve as baseline and spread: an A/B run's samples are 0.1 s
    turns taken between turns of another process, a different protocol whose per-window
    noise and level are not comparable with sustained 1 s windows (docs/design.md §3).
    """

    runs_step = True

    def __init__(self, smoke: bool, meter: MeterFactory, sink: Sink,
                 context: Callable[[], HistoryContext], baseline_runs: int = 5,
                 baseline: str | None = None) -> None:
        self.smoke = smoke
        self.meter = meter
        self.sink = sink
        self.context = context  # opened lazily: smoke mode never reads the history
        self.baseline_runs = baseline_runs
        self.baseline = baseline

    @property
    def tag(self) -> str | None:
        return None if self.smoke else HISTORY

    def measure(self, source: WindowSource, call: BenchCall) -> Judged:
        m = self.meter(windows=call.windows, window_time=call.window_time).measure(source)
        extra: Mapping[str, Any] = call.extra
        meta = getattr(source, "metadata", None)  # e.g. a worker group's placement
        if callable(meta):
            extra = {**meta(), **dict(extra)}
        return self.judge(summarize(call.name, m, call.transitions, extra=extra),
                          call.test_id, call.rule)

    def judge(self, result: BenchResult, test_id: str, rule: Rule) -> Judged:
        """Judge a finished result (also pytest-benchmark's) and deliver the verdict."""
        j = Judged(result, None, rule, test_id) if self.smoke else \
            self._judge(result, rule, test_id)
        self.sink(j)
        return j

    def end_test(self, test_id: str) -> None:
        pass

    def _judge(self, result: BenchResult, rule: Rule, test_id: str) -> Judged:
        from pytest_perfgate.history import store as history

        ctx = self.context()
        n = self.baseline_runs
        wide = history.select_baseline(
            [r for r in ctx.runs if is_history_run(r)], result.name,
            fingerprint=ctx.fingerprint, head_commit=ctx.git.commit,
            is_ancestor=ctx.is_ancestor, n=max(n, SPREAD_RUNS), explicit_commit=self.baseline)
        wide.sort(key=lambda rb: rb[0].started_at, reverse=True)
        base = wide[:n]
        commits = [run.commit for run, _ in base]
        if not result.steady or base:
            verdict = evaluate(result.samples, [b.samples for _, b in base], rule,
                               steady=result.steady, spread=[b.samples for _, b in wide])
        else:
            verdict = no_baseline(self._why_no_baseline(ctx, result.name))
        base_sps, base_phases = None, {}
        if base:
            base_sps = statistics.median(b.steps_per_s for _, b in base)
            names = {p for _, b in base for p in b.phases}
            base_phases = {p: statistics.median(b.phases[p].ms_per_call for _, b in base
                                                if p in b.phases) for p in names}
        return Judged(result, verdict, rule, test_id, commits, base_sps, base_phases)

    def _why_no_baseline(self, ctx: HistoryContext, name: str) -> str:
        from pytest_perfgate.history import store as history

        if self.baseline:
            return (f"no run of commit {self.baseline} on machine {ctx.machine!r} "
                    f"has {name}; recorded, nothing to compare with")
        runs = [r for r in ctx.runs if is_history_run(r)]
        other = history.describe_other_fingerprints(runs, ctx.fingerprint, name,
                                                    current_meta=ctx.meta)
        where = f"machine {ctx.machine!r}, fingerprint {ctx.fingerprint}"
        if other:
            return f"{other}; recorded as the first result of {where}"
        git = "" if ctx.git.available else f" (outside git: {ctx.git.reason})"
        ab = sum(1 for r in ctx.runs if not is_history_run(r) and name in r.benchmarks)
        skipped = (f" ({ab} A/B run(s) of it are not used as history baselines)"
                   if ab else "")
        return (f"no earlier run of {name} on {where} at an ancestor commit{git}{skipped}; "
                "this result was recorded and becomes the baseline")
