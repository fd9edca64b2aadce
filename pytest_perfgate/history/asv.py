"""The asv-readable view of the history: benchmarks.json, machine.json and result files.

Layout under the results dir (asv's own, so ``asv compare``/``asv publish`` work)::

    benchmarks.json                      asv v2 benchmark descriptions (merged, never pruned)
    <machine>/machine.json               asv machine description
    <machine>/<commit[:8]>-<env>.json    asv v2 results, one file per commit

Our rows are derived from the sidecars (:mod:`pytest_perfgate.history.store`); rows that
``asv run`` wrote into the same files (the suite in benchmarks/) are kept as they are and
read back by :mod:`pytest_perfgate.history.asv_runs` (docs/design.md §6). Each file is
strict JSON written atomically.

Series per perfgate benchmark N (asv is lower-is-better throughout, docs/design.md §6):
``N.track_s_per_step`` seconds per env-step (the gated series; asv_runner discovers a
benchmark only when the last part of its name starts with ``track_``, so asv's own runs of
the suite land on the same name), ``N.phase.<phase>`` seconds per call of each phase,
``N.rss`` the workload process tree's peak resident memory in bytes, ``N.gpu_mem`` its GPU
peak memory in bytes where it used CUDA (docs/gpu.md). A
counts result ``N.counts`` has ``N.counts`` and ``N.counts.phase.<phase>`` (instructions
per env-step) and ``N.counts.est_cycles``.
Throughput (env-steps/s) is higher-is-better and asv 0.6.6 has no way to mark a series
display-only, so it is not exported; it stays in the sidecars and perfgate's reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import atomic_write
from pytest_perfgate.core.memory import GPU_SUFFIX, gpu_peak
from pytest_perfgate.core.metric import ENV_STEPS, INSTRUCTIONS, Metric, metric_for
from pytest_perfgate.core.results import LEGACY_COUNTS_SOURCE, BenchResult, RunRecord
from pytest_perfgate.history.asv_schema import (
    ASV_RESULT_COLUMNS,
    asv_result_problem,
    bench_entry_problem,
    benchmarks_json_problem,
    machine_field_problem,
    row_problem,
)
from pytest_perfgate.history.files import dump_json, keep_valid, read_object
from pytest_perfgate.history.machine_id import asv_machine_json

# The machine.json fields `asv run` puts into a result file's params: ours must be the same,
# or asv publish draws asv's runs and ours as two lines (docs/design.md §6).
ASV_PARAM_KEYS = ("machine", "os", "arch", "cpu", "num_cpu", "ram")
# Bump when the meaning of a stored series changes: asv hides results whose version differs
# from benchmarks.json, so old and new numbers are never drawn on one line. perfgate-1 held
# seconds per million env-steps under the bare benchmark name; perfgate-2 seconds per
# env-step under N.track_s_per_step (the suite in benchmarks/ sets the same version).
SERIES_VERSION = "perfgate-2"
SERIES_PREFIX = "perfgate-"  # every version we ever wrote starts so (old ones get rebuilt)
GATED_SUFFIX = ENV_STEPS.asv_suffix.lstrip(".")  # "track_s_per_step"
# asv names a virtualenv environment without a matrix "virtualenv-py<X.Y>" (its
# environment.get_env_name): our rows go into the same file, so a commit has one file.
ASV_ENV_TYPE = "virtualenv"
OLD_ENV_PREFIX = "perfgate-py"  # perfgate-1's own env name
# A result of the counts mode (modes/counts/counting.py) names itself by this source; its unit
# (instructions per env-step, core/metric.py) makes it a "track" series where lower is
# better as asv assumes, beside the estimated cycles from the cache simulation
# (docs/design.md §10).
COUNTS_SOURCE = LEGACY_COUNTS_SOURCE
COUNTS_UNIT = INSTRUCTIONS.asv_unit
CYCLES_UNIT = "est. cycles/env-step"
# extra key of a counts result: instructions per env-step of each perfgate.phase() and of
# "(other)" (outside any phase), adding up to the whole; series <name>.counts.phase.<phase>
COUNTS_PHASES_KEY = "phase_instructions_per_step"


def counts_phases(extra: Mapping[str, Any]) -> dict[str, float]:
    """A counts result's per-phase instructions per env-step; a sidecar may hold anything,
    so only finite numbers under string keys are kept."""
    value = extra.get(COUNTS_PHASES_KEY)
    if not isinstance(value, Mapping):
        return {}
    return {k: float(v) for k, v in value.items() if isinstance(k, str) and k
            and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def asv_name(name: str) -> str:
    """A benchmark name as asv will show it: pytest's "a/b.py::test[x]" -> "a.b.py.test[x]".

    Names only ever go inside JSON, but asv publish turns them into file names, so path
    separators and ".." are flattened and control characters (NUL...) refused.
    """
    if not isinstance(name, str) or not name or any(ord(c) < 32 or c == "\x7f" for c in name):
        raise ValueError(f"benchmark name {name!r} is empty or contains control characters "
                         "(NUL, newline...): give the benchmark a printable name")
    flat = re.sub(r"::|[/\\]", ".", name)
    flat = re.sub(r"\.{2,}", ".", flat).strip(". ")
    if not flat:
        raise ValueError(f"benchmark name {name!r} has no usable characters: give it a name")
    return flat


def asv_params_from_meta(meta: Mapping[str, Any]) -> dict[str, str]:
    """The graph dimensions asv publish will show: the machine fields `asv run` uses."""
    return {k: str(v) for k, v in asv_machine_json(meta).items() if k in ASV_PARAM_KEYS}


def gated_series(name: str, metric: Metric = ENV_STEPS) -> str:
    """The asv series of a benchmark's gated number: a rate's seconds per unit
    (``N.track_s_per_step``), a cost as it is (``N.counts``)."""
    return f"{asv_name(name)}{metric.asv_suffix}"


def phase_series(name: str, phase: str) -> str:
    """The asv series of one phase's seconds per call."""
    return f"{asv_name(name)}.phase.{asv_name(phase)}"


def rss_series(name: str) -> str:
    """The asv series of a benchmark's peak resident memory in bytes (lower is better)."""
    return f"{asv_name(name)}.rss"


def gpu_mem_series(name: str) -> str:
    """The asv series of a benchmark's GPU peak memory in bytes (core/memory.py gpu_peak)."""
    return f"{asv_name(name)}{GPU_SUFFIX}"


def asv_env_name(python: Any) -> str:
    """asv's name for a virtualenv of this Python minor: "virtualenv-py3.11"."""
    return f"{ASV_ENV_TYPE}-py{python_minor(python)}"


def python_minor(python: Any) -> str:
    return ".".join(str(python or "").split(".")[:2]) or "unknown"


def asv_written(row: Sequence[Any]) -> bool:
    """True for a row `asv run` wrote: asv always stores the benchmark's duration (column
    4), perfgate never does."""
    return len(row) > 4 and row[4] is not None


def write_machine_json(machine_dir: Path, machine: str, meta: Mapping[str, Any]) -> None:
    """Update ``<machine>/machine.json``, keeping fields asv or a user added (strings only,
    as asv writes them); anything else is dropped with one warning."""
    path = machine_dir / "machine.json"
    data = keep_valid(path, read_object(path, "rewritten from this run's machine facts"),
                      machine_field_problem, "fields")
    data.update(asv_machine_json({**meta, "machine": machine}))
    atomic_write(path, dump_json(data))


def asv_entries(run: RunRecord, info: Mapping[str, Mapping[str, Any]]
                ) -> dict[str, dict[str, Any]]:
    """benchmarks.json entries for this run: the gated series plus one per phase."""
    out: dict[str, dict[str, Any]] = {}
    for name, bench in run.benchmarks.items():
        extra = {k: v for k, v in dict(info.get(name) or {}).items()
                 if k not in ("name", "type", "unit", "params", "param_names")}
        metric = metric_for(bench.unit)
        gated = gated_series(name, metric)
        out[gated] = _bench_entry(gated, "track", metric.asv_unit, name, extra)
        if _cycles(bench) is not None:
            out[f"{gated}.est_cycles"] = _bench_entry(f"{gated}.est_cycles", "track",
                                                      CYCLES_UNIT, name, extra)
        for phase in bench.phases:  # seconds per call of a timed phase
            pname = phase_series(name, phase)
            out[pname] = _bench_entry(pname, "track", "seconds", name, extra)
        for phase in counts_phases(bench.extra):  # instructions per env-step of a phase
            pname = phase_series(name, phase)
            out[pname] = _bench_entry(pname, "track", metric.asv_unit, name, extra)
        if bench.memory.get("peak_rss"):
            rss = rss_series(name)
            out[rss] = _bench_entry(rss, "track", "bytes", name, extra)
        if gpu_peak(bench.memory) is not None:
            gpu = gpu_mem_series(name)
            out[gpu] = _bench_entry(gpu, "track", "bytes", name, extra)
    return out


def _cycles(bench: BenchResult) -> float | None:
    """The estimated cycles per env-step a counted result carries, else None."""
    cycles = bench.extra.get("est_cycles_per_step")
    if isinstance(cycles, (int, float)) and not isinstance(cycles, bool) and math.isfinite(
            cycles):
        return float(f"{cycles:.6g}")
    return None


def merge_benchmarks_json(results_dir: Path, entries: Mapping[str, dict[str, Any]],
                          fill: Mapping[str, dict[str, Any]] | None = None) -> None:
    """Add ``entries`` to benchmarks.json, and ``fill`` where an entry is missing (`asv run`
    rewrites the file with its own suite only). Valid entries of other benchmarks are never
    pruned; entries of an older perfgate series version are dropped (their rows are rebuilt
    from the sidecars), invalid ones with one warning (asv would stop on them). An entry
    asv's discovery wrote (with the benchmark's real code) for one of our series is kept."""
    path = results_dir / "benchmarks.json"
    data = read_object(path, "rewritten with this run's benchmarks; the others come back "
                       "when they next record", benchmarks_json_problem)
    data.pop("version", None)
    data = {k: v for k, v in keep_valid(path, data, bench_entry_problem, "entries").items()
            if current_entry(v)}
    for key, entry in (fill or {}).items():
        data.setdefault(key, entry)
    for key, entry in entries.items():
        old = data.get(key)
        if not (old and _discovered(old) and old.get("version") == entry.get("version")
                and old.get("unit") == entry.get("unit")):
            data[key] = entry
    data["version"] = 2
    atomic_write(path, dump_json(data))


def current_entry(entry: Mapping[str, Any]) -> bool:
    """False for a benchmarks.json entry of an older perfgate series version."""
    return current_row([None, None, entry.get("version")])


def _discovered(entry: Mapping[str, Any]) -> bool:
    return entry.get("recorded_by") != RECORDED_BY


RECORDED_BY = "pytest-perfgate"  # in our benchmarks.json entries (asv keeps unknown keys)


def write_asv_result(machine_dir: Path, machine: str, run: RunRecord,
                     same_commit: Iterable[RunRecord],
                     entries: Mapping[str, Mapping[str, Any]]) -> None:
    """Rewrite ``run``'s commit file from every run at that commit (``same_commit``).

    Rows `asv run` wrote stay as they are (:func:`asv_written`): at a commit asv measured,
    asv's number is what asv shows; ours is in the sidecar.
    """
    meta = run.metadata
    py = python_minor(meta.get("python"))
    env_name = asv_env_name(py)
    path = machine_dir / f"{run.commit[:8]}-{env_name}.json"
    old = read_object(path, f"rebuilt from the sidecars of commit {run.commit[:12]}",
                      asv_result_problem)
    rows: dict[str, list[Any]] = keep_valid(path, old.get("results") or {}, row_problem,
                                            "rows")
    rows = {k: v for k, v in rows.items() if current_row(v)}
    theirs = {k for k, v in rows.items() if asv_written(v)}
    # Newest clean run per benchmark at this commit wins; dirty runs only fill gaps.
    same = [r for r in same_commit if r.commit == run.commit]
    if all(r.run_id != run.run_id for r in same):
        same.append(run)
    series: dict[str, Mapping[str, Any]] = {}
    for r in same:  # every benchmark measured at this commit, so a rebuilt file loses none
        series.update(asv_entries(r, {}))
    series.update(entries)
    for r in sorted(same, key=lambda r: (not r.dirty, r.started_at)):
        rows.update({k: v for k, v in _asv_rows(r, series).items() if k not in theirs})
    params = asv_params_from_meta({**meta, "machine": machine})
    data = {
        "commit_hash": run.commit, "env_name": env_name, "date": run.commit_date_ms,
        "params": {**params, "python": py}, "python": py, "requirements": {},
        "env_vars": {}, "result_columns": ASV_RESULT_COLUMNS, "results": rows,
        "durations": {k: v for k, v in (old.get("durations") or {}).items()  # asv's
                      if isinstance(v, (int, float)) and math.isfinite(v)},
        "version": 2,
    }
    atomic_write(path, dump_json(data, compact=True))


def current_row(row: Sequence[Any]) -> bool:
    """False for a row of an older perfgate series version (rebuilt from the sidecars)."""
    version = row[2] if len(row) > 2 else None
    return not (isinstance(version, str) and version.startswith(SERIES_PREFIX)
                and version != SERIES_VERSION)


def _asv_stats(samples: Sequence[float]) -> tuple[float, dict[str, float | int | None]]:
    """Median and the stats asv stores, computed by asv's own code (asv_runner comes with
    asv). An infinite CI (a single sample) is stored as null."""
    from asv_runner.statistics import compute_stats  # type: ignore[import-untyped]
    value, stats = compute_stats(list(samples), 1)
    clean = {k: (v if isinstance(v, int) or (v is not None and math.isfinite(v)) else None)
             for k, v in stats.items()}
    return float(value), clean


def _bench_entry(name: str, kind: str, unit: str, source: str, extra: Mapping[str, Any]
                 ) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "code": f"# recorded by pytest-perfgate from {source}", "name": name,
        "param_names": [], "params": [], "pretty_name": name, "timeout": 60.0,
        "type": kind, "unit": unit, "version": SERIES_VERSION,
    }
    entry.update(extra)
    entry["version"] = str(entry["version"])
    entry["recorded_by"] = RECORDED_BY
    return entry


def _asv_rows(run: RunRecord, entries: Mapping[str, Mapping[str, Any]]
              ) -> dict[str, list[Any]]:
    """One asv result row per series; trailing nulls dropped like asv's own writer."""
    started = int(run.started_at * 1000)
    rows: dict[str, list[Any]] = {}

    def put(name: str, value: float | None, stats: Mapping[str, Any] | None = None,
            samples: Sequence[float] | None = None) -> None:
        if name not in entries or value is None or not math.isfinite(value):
            return
        version = entries[name]["version"]
        s = stats or {}
        row: list[Any] = [[value], [], version, started, None]
        for key in ("ci_99_a", "ci_99_b", "q_25", "q_75", "number", "repeat"):
            row.append([s[key]] if s.get(key) is not None else None)
        row.append([list(samples)] if samples else None)
        row.append(None)  # profile
        while row and row[-1] is None:
            row.pop()
        rows[name] = row

    for name, bench in run.benchmarks.items():
        metric = metric_for(bench.unit)
        gated = gated_series(name, metric)
        per_unit = [s * metric.asv_scale for s in bench.samples]  # a rate: s per unit
        value, stats = _asv_stats(per_unit)
        put(gated, value, stats, per_unit)
        put(f"{gated}.est_cycles", _cycles(bench))
        for phase, summary in bench.phases.items():  # 6 significant digits: readable tables
            put(phase_series(name, phase), float(f"{summary.ms_per_call / 1e3:.6g}"))
        for phase, ipe in counts_phases(bench.extra).items():
            put(phase_series(name, phase), float(f"{ipe:.6g}"))
        peak = bench.memory.get("peak_rss")
        if peak:
            put(rss_series(name), float(peak))
        gpu = gpu_peak(bench.memory)
        if gpu is not None:
            put(gpu_mem_series(name), float(gpu))
    return rows
