"""Judging a result against recorded runs: the one place a history verdict is decided.

Records and settings in, a :class:`~pytest_perfgate.core.judged.Judged` out: which runs
form the baseline (:mod:`.baseline`), the gate's verdict on them (core/gate.py), the
baseline figure the ratio divides by, and why there is no baseline when there is none. The
history mode judges what it measured here; ``perfgate check``, ``compare``, ``report`` and
``history`` judge recorded runs again here, so the plugin and the commands give the same
verdicts; the A/B mode and re-measuring take the baseline figure and the ring pair's bound
from here. The rule: docs/design.md §2.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_perfgate.core import bound
from pytest_perfgate.core.evidence import Evidence, history_evidence
from pytest_perfgate.core.gate import (
    Outcome,
    Rule,
    Verdict,
    decide,
    never_steady,
    no_baseline,
    unstable,
)
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.metric import RATE_SCALE, Metric, metric_for
from pytest_perfgate.core.results import BenchResult, RunRecord
from pytest_perfgate.core.settings import Settings
from pytest_perfgate.history.context import HistoryContext, is_history_run

SPREAD_RUNS = 20  # runs the run-to-run spread is estimated from (the level: baseline_runs)

FIRST_RUN_UNSTABLE = ("there is no baseline yet, so nothing to protect: a warning, not a "
                      "failure (it is recorded with its UNSTABLE mark and joins no baseline; "
                      "once a baseline exists, UNSTABLE fails as --perfgate-unstable says)")

Baseline = list[tuple[RunRecord, BenchResult]]


def baseline_figure(result: BenchResult, ratio: float | None, medians: Sequence[float] = ()
                    ) -> float | None:
    """The baseline as the report shows it, in ``result``'s units: the figure the verdict's
    ratio divides by (RATE_SCALE / the result's median / ratio, so the three agree: against
    recorded runs, the geometric mean of their medians), else, for a verdict without a
    ratio, the geometric mean of the baseline's ``medians``; None without either."""
    if ratio:
        return RATE_SCALE / result.value / ratio
    if medians:
        return RATE_SCALE / math.exp(statistics.fmean(math.log(m) for m in medians))
    return None


def bound_noted(verdict: Verdict, result: BenchResult, base_phases: Mapping[str, float],
                threshold: float) -> Verdict:
    """``verdict`` naming which process bounds a ring pair (core/bound.py), in both modes."""
    said = bound.note(result.extra, base_phases,
                      {n: p.ms_per_call for n, p in result.phases.items()}, threshold)
    return verdict if said is None else verdict.noted(said)


class HistoryJudge:
    """Judge results against the newest ancestor runs of this machine fingerprint.

    ``context`` opens the history (lazily: a session that never judges never reads it).
    Only history-mode runs serve as baseline and spread: an A/B run's samples are 0.1 s
    turns taken between turns of another process, a different protocol whose per-window
    noise and level are not comparable with sustained 1 s windows (docs/design.md §3).
    ``settings`` say how many runs set the level, which commit's runs alone may (a person
    chose it), and whether this run is recorded (the NO BASELINE wording says what becomes
    of it).
    """

    def __init__(self, context: Callable[[], HistoryContext], settings: Settings) -> None:
        self.context = context
        self.baseline_runs = settings.baseline_runs
        self.baseline = settings.baseline
        self.records = settings.records

    def runs(self, name: str, uses_gpu: bool = False) -> Baseline:
        """The runs that may judge ``name``, newest first (the level takes the first n); a
        benchmark that ran on the GPU only by runs on the same GPUs."""
        from pytest_perfgate.history.baseline import select_baseline
        from pytest_perfgate.history.machine_id import gpu_model

        ctx = self.context()
        wide = select_baseline(
            [r for r in ctx.runs if is_history_run(r)], name,
            fingerprint=ctx.fingerprint, head_commit=ctx.git.commit,
            is_ancestor=ctx.is_ancestor, n=max(self.baseline_runs, SPREAD_RUNS),
            explicit_commit=self.baseline, head_dirty=ctx.git.dirty, decisions=ctx.decisions,
            gpu=gpu_model(ctx.meta) if uses_gpu else None)
        wide.sort(key=lambda rb: rb[0].started_at, reverse=True)
        return wide

    def judge(self, result: BenchResult, test_id: str, rule: Rule) -> Judged:
        """``result``'s verdict against its baseline runs, and what it rests on."""
        ctx = self.context()
        wide = self.runs(result.name, bool(result.gpu))
        base = wide[:self.baseline_runs]
        metric = metric_for(result.unit)
        if not result.steady:
            verdict = unstable(never_steady(result.warmup_load, spoiled_after=(
                result.polluted_kept + result.remeasured)), metric)
        elif base:
            verdict = decide(_evidence(result, base, wide, metric), rule, metric)
        else:
            verdict = no_baseline(self._why_no_baseline(ctx, result.name, bool(result.gpu)),
                                  metric)
        if not result.steady and not base and rule.unstable == "fail":
            rule = replace(rule, unstable="warn")  # a first run: noise alone never fails it
            verdict = verdict.noted(FIRST_RUN_UNSTABLE)
        ev = verdict.evidence
        if ev is not None and ev.level_runs:  # the runs that set the level: no other figure
            base = [base[i] for i in ev.level_runs]
        base_phases: dict[str, float] = {}
        changed: tuple[dict[str, str | None], ...] = ()
        if base:
            names = {p for _, b in base for p in b.phases}
            base_phases = {p: statistics.median(b.phases[p].ms_per_call for _, b in base
                                                if p in b.phases) for p in names}
            verdict, changed = environment_note(verdict, [r.metadata for r, _ in base],
                                                ctx.meta)
        verdict = bound_noted(verdict, result, base_phases, rule.threshold)
        return Judged(result, verdict, rule, test_id, [run.commit for run, _ in base],
                      baseline_figure(result, verdict.ratio, [b.value for _, b in base]),
                      base_phases, environment_changes=changed)

    def noise(self, result: BenchResult) -> float | None:
        """The run-to-run spread the gate judges ``result`` with (its baseline's runs,
        spoiled ones left out, the noise inside runs as a floor); None where it judges it
        by none (no baseline, never steady)."""
        wide = self.runs(result.name, bool(result.gpu))
        base = wide[:self.baseline_runs]
        if not result.steady or not base:
            return None
        ev = _evidence(result, base, wide, metric_for(result.unit))
        if ev.between is None and ev.within is None:
            return None
        return max(ev.between or 0.0, ev.within or 0.0)

    def memory(self, result: BenchResult, test_id: str, rule: Rule) -> tuple[Judged, ...]:
        """The memory gate (core/memory.py) on ``result``'s peaks against the same baseline
        runs the wall-time verdict uses: host RSS as ``<name>.rss`` and, where the run read
        GPU memory, the GPU peak as ``<name>.gpu_mem`` (a learner's device memory growth is
        what makes a run fall over)."""
        from pytest_perfgate.core.memory import (
            decide_memory,
            gpu_figure,
            gpu_peak,
            host_figure,
            not_sampled,
        )

        host, gpu = host_figure(result), gpu_figure(result)
        base: Baseline = []
        if host is not None or gpu is not None:
            base = self.runs(result.name, bool(result.gpu))[:self.baseline_runs]
        commits = [run.commit for run, _ in base]
        if host is not None and host.peak is not None:
            verdict = decide_memory(host.peak, [float(b.memory.get("peak_rss", 0))
                                                for _, b in base], rule)
            out = [Judged(result, verdict, rule, test_id, commits, memory=host)]
        else:
            host, verdict = not_sampled()
            out = [Judged(result, verdict, rule, test_id, memory=host)]
        if gpu is not None and gpu.peak is not None:
            verdict = decide_memory(gpu.peak, [float(gpu_peak(b.memory) or 0) for _, b in base],
                                    rule, what="GPU peak memory")
            out.append(Judged(result, verdict, rule, test_id, commits, memory=gpu))
        return tuple(out)

    def _why_no_baseline(self, ctx: HistoryContext, name: str, uses_gpu: bool = False
                         ) -> str:
        from pytest_perfgate.history.baseline import describe_other_fingerprints

        kept = ("this run is recorded at the end of the session and becomes the baseline "
                "of later commits" if self.records else
                "nothing is recorded (--perfgate-record false)" if self.records is False else
                "this run is the baseline of later commits")
        if self.baseline:
            return (f"no run of commit {self.baseline} on machine {ctx.machine!r} "
                    f"has {name} (failed runs count once accepted); {kept}")
        runs = [r for r in ctx.runs if is_history_run(r)]
        other = describe_other_fingerprints(runs, ctx.fingerprint, name,
                                            current_meta=ctx.meta)
        where = f"machine {ctx.machine!r}, fingerprint {ctx.fingerprint}"
        if other:
            return f"{other}; {kept}"
        git = "" if ctx.git.available else f" (outside git: {ctx.git.reason})"
        ab = sum(1 for r in ctx.runs if not is_history_run(r) and name in r.benchmarks)
        skipped = (f" ({ab} A/B run(s) of it are not used as history baselines)"
                   if ab else "")
        mine = [r for r in runs if r.fingerprint == ctx.fingerprint and name in r.benchmarks]
        if uses_gpu and (elsewhere := _other_gpus(mine, ctx.meta)):
            return f"no earlier run of {name} on {where} ran on its GPUs: {elsewhere}; {kept}"
        held = _held_back(mine, name, ctx)
        return (f"no earlier run of {name} on {where} at an ancestor commit{git}{skipped}"
                f"{held}{_shallow(mine, ctx)}; {kept}")


def _evidence(result: BenchResult, base: Baseline, wide: Baseline, metric: Metric
              ) -> Evidence:
    """The history evidence on ``result``: ``base`` sets the level, ``wide`` the spread."""
    return history_evidence(result.samples, [b.samples for _, b in base],
                            [b.samples for _, b in wide], polluted=result.polluted_kept,
                            baseline_polluted=[b.polluted_kept for _, b in base],
                            metric=metric, spread_polluted=[b.polluted_kept for _, b in wide])


def environment_note(verdict: Verdict, baseline: list[Mapping[str, Any]],
                     meta: Mapping[str, Any]
                     ) -> tuple[Verdict, tuple[dict[str, str | None], ...]]:
    """``verdict`` naming what changed in the environment since its baseline runs (a
    dependency bump is part of the change: it is judged, and named, never a new baseline),
    and the changes for the report's ``environment_changes``."""
    from pytest_perfgate.history import environment

    found = environment.since_baseline(baseline, environment.of_run(meta))
    if not found:
        return verdict, ()
    note = environment.sentence(found)
    if verdict.outcome is Outcome.REGRESSION:
        note += " (the drop may come with them: the gate fails it as any other)"
    return verdict.noted(note), tuple(c.to_json() for c in found)


def _shallow(runs: list[RunRecord], ctx: HistoryContext) -> str:
    """Runs of other commits exist, but this clone is shallow: git cannot say whether
    they are ancestors, so every later run would be NO BASELINE, silently."""
    from pytest_perfgate.history.vcs import SHALLOW_FIX, is_shallow

    others = {r.commit for r in runs if r.commit != ctx.git.commit}
    if not others or not ctx.git.available or not is_shallow(ctx.rootdir):
        return ""
    return (f". This clone is shallow, so the runs of {len(others)} other commit(s) cannot "
            f"be placed in its history: {SHALLOW_FIX}")


def _other_gpus(runs: list[RunRecord], meta: Mapping[str, Any]) -> str | None:
    """The runs of this machine that ran on other GPUs, which never judge a benchmark that
    used the GPU; None when there are none."""
    from pytest_perfgate.history.machine_id import gpu_model

    ours = gpu_model(meta)
    models: dict[str, int] = {}
    for r in runs:
        model = gpu_model(r.metadata)
        if model != ours:
            key = model or "no GPU"
            models[key] = models.get(key, 0) + 1
    if not models:
        return None
    listed = ", ".join(f"{n} on {m}" for m, n in models.items())
    return (f"{sum(models.values())} run(s) of it were on other GPUs ({listed}; this run: "
            f"{ours or 'no GPU'}), and a benchmark that used the GPU is compared only with "
            "runs on the same GPUs")


def _held_back(runs: list[RunRecord], name: str, ctx: HistoryContext) -> str:
    """Why runs that exist were not used: the commit under test, or failed and not accepted."""
    from pytest_perfgate.history.decisions import FAILED_VERDICTS

    same = sum(1 for r in runs if r.commit == ctx.git.commit and ctx.git.available)
    failed = [r.run_id for r in runs if r.benchmarks[name].verdict in FAILED_VERDICTS
              and r.run_id not in ctx.decisions.accepted]
    parts = []
    if same:
        parts.append(f"{same} run(s) of the commit under test never judge it (commit a "
                     "change, or edit the working tree, to compare with them)")
    if failed:
        parts.append(f"{len(failed)} run(s) that failed the gate wait to be accepted "
                     f"(perfgate accept {failed[-1]})")
    return f" ({'; '.join(parts)})" if parts else ""
