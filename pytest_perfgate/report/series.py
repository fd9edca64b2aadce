"""One benchmark's recorded series on one machine, read from the run sidecars.

The sidecars are the source of truth (docs/design.md §6); ``perfgate history`` and
``perfgate report`` read them through :class:`SeriesSource`, which turns a machine's runs into
one :class:`Series` per benchmark and series kind:

* ``gated``: the run medians of the gated samples (seconds per million env-steps, i.e.
  microseconds per env-step), shown as env-steps/s;
* ``counts``: the ``<name>.counts`` result of the counts mode (instructions per env-step);
* ``phase.NAME``: one phase's milliseconds per call;
* ``counts.est_cycles``: the counts mode's estimated cycles per env-step (not gated);
* ``counts.phase.NAME``: one phase's instructions per env-step (not gated).

Callers pass only history-mode runs (``history.context.is_history_run``, which this layer may
not import): an A/B run's samples are short turns taken between turns of another process, a
protocol whose level is not comparable (docs/design.md §3).
"""

from __future__ import annotations

import difflib
import re
import statistics
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_perfgate.core.results import BenchResult, RunRecord, is_sample
from pytest_perfgate.history.files import Unreadable

GATED = "gated"
COUNTS = "counts"
PHASE = "phase."
CYCLES = "counts.est_cycles"
COUNTS_PHASE = "counts.phase."
COUNTS_SUFFIX = ".counts"  # modes/counts/counting.py names a counts result so
STEPS_PER_SAMPLE_UNIT = 1e6  # BenchResult.samples are seconds per million env-steps


class SeriesError(ValueError):
    """A request the history cannot answer (unknown benchmark, series or run)."""


@dataclass(frozen=True)
class Point:
    """One run of the series: its summary value and what the run said about it."""

    run: RunRecord
    value: float  # the series' own unit (lower is better for every kind)
    spread: float | None  # (max - min) / median of the run's samples; None: one value
    verdict: str | None


@dataclass(frozen=True)
class Series:
    benchmark: str
    kind: str
    unit: str  # of Point.value
    points: tuple[Point, ...]

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    def display(self, value: float) -> float:
        """What a reader wants to see: throughput for the gated series, else the value."""
        return STEPS_PER_SAMPLE_UNIT / value if self.kind == GATED else value

    @property
    def display_unit(self) -> str:
        return "env-steps/s" if self.kind == GATED else self.unit


def cause(s: Series, index: int) -> str:
    """What else changed where a change point begins ("" when only the commit did): a new
    machine fingerprint, a new environment, or no new commit at all (the machine's speed
    moved, docs/design.md §1)."""
    from pytest_perfgate.history import environment

    prev, here = s.points[index - 1].run, s.points[index].run
    if prev.fingerprint != here.fingerprint:
        return (f"the machine's fingerprint changed here ({prev.fingerprint} -> "
                f"{here.fingerprint}): new hardware, not only new code")
    found = environment.changes(environment.of_run(prev.metadata),
                                environment.of_run(here.metadata))
    if found:
        return (f"the environment changed here ({environment.describe(found)}): the "
                "dependencies may have moved it, not only the code")
    if prev.commit == here.commit:
        return "the run before it measured the same commit: the machine's speed moved, not " \
               "the code"
    return ""


def parse_kind(text: str) -> str:
    """``gated``, ``counts``, ``phase.NAME``, ``counts.est_cycles`` or ``counts.phase.NAME``;
    ValueError names the value and the fix."""
    if text in (GATED, COUNTS, CYCLES) or any(
            text.startswith(pre) and len(text) > len(pre) for pre in (PHASE, COUNTS_PHASE)):
        return text
    raise ValueError(f"series {text!r} is not one of gated, counts, phase.NAME, "
                     "counts.est_cycles, counts.phase.NAME: use e.g. --series gated or "
                     "--series phase.physics")


def benchmark_names(runs: Sequence[RunRecord]) -> list[str]:
    """Every wall-time benchmark recorded in ``runs`` (counts results are their series)."""
    names = {n for r in runs for n, b in r.benchmarks.items() if not _is_counts(b)}
    return sorted(names)


def resolve_benchmark(wanted: str, names: Sequence[str]) -> str:
    """The exact name, else the only name containing ``wanted``; SeriesError lists the near
    names (or all, when few) and the fix."""
    if not wanted.strip():
        raise SeriesError("the benchmark name is empty: give a benchmark name or part of it, "
                          "e.g. humanoid")
    if wanted in names:
        return wanted
    hits = [n for n in names if wanted.lower() in n.lower()]
    whole = [n for n in hits if _has_parts(n, wanted)]
    if len(whole) == 1:  # a whole name part wins: 'sync' names ..._sync_4, not ..._async_4
        return whole[0]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise SeriesError(f"benchmark {wanted!r} matches {len(hits)} benchmarks: "
                          f"{', '.join(hits[:10])}: give more of the name")
    hint = _series_name(wanted, names)
    if hint is not None:
        raise SeriesError(f"no benchmark {wanted!r}: that is the asv series name of benchmark "
                          f"{hint[0]!r}: give perfgate history {hint[0]} --series {hint[1]}")
    near = difflib.get_close_matches(wanted, names, n=5, cutoff=0.4)
    shown = near or list(names)[:10]
    if not names:
        raise SeriesError(f"no benchmark {wanted!r}: this history has no benchmark at all")
    label = "near names" if near else "recorded benchmarks"
    raise SeriesError(f"no benchmark {wanted!r} in this history; {label}: {', '.join(shown)}"
                      + (" ..." if not near and len(names) > 10 else ""))


def _parts(text: str) -> list[str]:
    """A name's parts: its runs of letters and digits ('test_walk[sync-4]' -> test, walk,
    sync, 4)."""
    return re.findall(r"[a-z0-9]+", text.lower())


def _has_parts(name: str, wanted: str) -> bool:
    """Whether ``wanted``'s parts are whole, consecutive parts of ``name``."""
    want, have = _parts(wanted), _parts(name)
    return bool(want) and any(have[i:i + len(want)] == want
                              for i in range(len(have) - len(want) + 1))


def _series_name(wanted: str, names: Sequence[str]) -> tuple[str, str] | None:
    """(benchmark, series kind) when ``wanted`` is one of the asv series names docs/history-asv.md's
    History section lists (``walk.track_s_per_step``, ``walk.phase.physics``,
    ``walk.counts``...) of a recorded benchmark."""
    from pytest_perfgate.history.asv import GATED_SUFFIX

    # (what follows the benchmark's name, the series kind; a kind ending in "." takes a name)
    for marker, kind in ((f".{GATED_SUFFIX}", GATED), (f"{COUNTS_SUFFIX}.est_cycles", CYCLES),
                         (f"{COUNTS_SUFFIX}.phase.", COUNTS_PHASE), (COUNTS_SUFFIX, COUNTS),
                         (".phase.", PHASE)):
        stem, sep, rest = wanted.rpartition(marker)
        if sep and stem in names and bool(rest) == kind.endswith("."):
            return stem, kind + rest
    return None


def _is_counts(b: BenchResult) -> bool:
    from pytest_perfgate.core.metric import COUNTS_PREFIX

    return b.unit.startswith(COUNTS_PREFIX)


def _spread(samples: Sequence[float]) -> float | None:
    if len(samples) < 2:
        return None
    return (max(samples) - min(samples)) / statistics.median(samples)


def series(runs: Sequence[RunRecord], benchmark: str, kind: str = GATED) -> Series:
    """The points of ``benchmark`` in ``runs``, oldest first."""
    from pytest_perfgate.history.asv import COUNTS_UNIT

    ordered = sorted(runs, key=lambda r: r.started_at)
    points: list[Point] = []
    unit = {GATED: "us/env-step", COUNTS: COUNTS_UNIT, CYCLES: "est. cycles/env-step"}.get(
        kind, COUNTS_UNIT if kind.startswith(COUNTS_PHASE) else "ms/call")
    for run in ordered:
        if kind.startswith(COUNTS):
            b = run.benchmarks.get(benchmark + COUNTS_SUFFIX)
            raw = None if b is None else _counts_value(b, kind)
        else:
            b = run.benchmarks.get(benchmark)
            if b is None or _is_counts(b):
                continue
            ph = b.phases.get(kind[len(PHASE):]) if kind != GATED else None
            raw = b.value if kind == GATED else None if ph is None else ph.ms_per_call
        if b is None or raw is None:
            continue  # not recorded in this run
        if not is_sample(raw):  # a sidecar may hold anything: 0, -5, 1e308
            _skip_point(run, kind, raw)
            continue
        spread = _spread(b.samples) if kind in (GATED, COUNTS) else None
        points.append(Point(run, float(raw), spread, b.verdict))
    if not points and kind != GATED:
        raise SeriesError(_no_such_series(ordered, benchmark, kind))
    return Series(benchmark, kind, unit, tuple(points))


def _skip_point(run: RunRecord, kind: str, raw: object) -> None:
    from pytest_perfgate.history.files import HistoryWarning
    from pytest_perfgate.history.store import SIDECAR_DIR, SIDECAR_SUFFIX

    warnings.warn(HistoryWarning(
        f"not showing run {run.run_id} in the {kind} series: its value {raw!r} is not a "
        f"positive measurement (run file {run.machine}/{SIDECAR_DIR}/{run.run_id}"
        f"{SIDECAR_SUFFIX})"), stacklevel=3)


def _counts_value(b: BenchResult, kind: str) -> Any:
    """The value of a counts series in the counts result ``b``, as recorded (None: not
    recorded there)."""
    from pytest_perfgate.history.asv import COUNTS_PHASES_KEY

    if kind == COUNTS:
        return b.value
    if kind == CYCLES:
        return b.extra.get("est_cycles_per_step")
    phases = b.extra.get(COUNTS_PHASES_KEY)
    return phases.get(kind[len(COUNTS_PHASE):]) if isinstance(phases, Mapping) else None


def _no_such_series(runs: Sequence[RunRecord], benchmark: str, kind: str) -> str:
    from pytest_perfgate.history.asv import counts_phases

    phases = sorted({p for r in runs for p in getattr(r.benchmarks.get(benchmark), "phases",
                                                      {})})
    counted = [r.benchmarks[benchmark + COUNTS_SUFFIX] for r in runs
               if benchmark + COUNTS_SUFFIX in r.benchmarks]
    has_cycles = any(is_sample(_counts_value(b, CYCLES)) for b in counted)
    cphases = sorted({p for b in counted for p in counts_phases(b.extra)})
    have = ([GATED] + ([COUNTS] if counted else []) + [PHASE + p for p in phases]
            + ([CYCLES] if has_cycles else []) + [COUNTS_PHASE + p for p in cphases])
    fix = ("record counts with --perfgate-counts" if kind in (COUNTS, CYCLES) or (
        kind.startswith(COUNTS_PHASE) and not cphases) else "name a recorded phase")
    return (f"benchmark {benchmark!r} has no {kind!r} series in this history ({fix}); its "
            f"series: {', '.join(have)}")


@dataclass(frozen=True)
class MachineHistory:
    """The runs of one machine in one results dir, read once."""

    results_dir: Path
    machine: str
    runs: tuple[RunRecord, ...]

    skipped: int = 0  # runs ``keep`` refused (A/B runs)
    unreadable: tuple[Unreadable, ...] = ()  # run files skipped with a warning

    @classmethod
    def load(cls, results_dir: Path, machine: str | None,
             keep: Callable[[RunRecord], bool] = lambda r: True) -> MachineHistory:
        """Read the sidecars (a bad one is skipped with a HistoryWarning naming it) and keep
        the runs ``keep`` accepts; the machine is found by history/lookup.py, whose
        HistoryMissing / MachineAmbiguous say why there is no history to read."""
        from pytest_perfgate.history.lookup import machine_runs

        found = machine_runs(results_dir, machine)
        kept = tuple(r for r in found.runs if keep(r))
        return cls(found.results_dir, found.machine, kept, len(found.runs) - len(kept),
                   found.unreadable)

    def hidden_newest(self, run: RunRecord) -> Unreadable | None:
        """A skipped run file that may be newer than ``run`` (see :class:`Unreadable`)."""
        return hidden_newest(self.unreadable, run)


def hidden_newest(unreadable: Sequence[Unreadable], run: RunRecord) -> Unreadable | None:
    """The first of ``unreadable`` that may hold a run newer than ``run``, else None."""
    return next((u for u in unreadable if u.may_be_newer_than(run.run_id, run.started_at)),
                None)


def hidden_message(u: Unreadable, run: RunRecord) -> str:
    """Why the newest readable run is not judged in place of an unreadable newer one."""
    return (f"{u.path} cannot be read (see the warning) and may hold a run newer than "
            f"{run.run_id}, the newest readable one: judging that one instead could pass a "
            "regression; fix or move the file, or name the run to judge")
