"""The asv-readable view of the history: benchmarks.json, machine.json and result files.

Layout under the results dir (asv's own, so ``asv compare``/``asv publish`` work)::

    benchmarks.json                      asv v2 benchmark descriptions (merged, never pruned)
    <machine>/machine.json               asv machine description
    <machine>/<commit[:8]>-<env>.json    asv v2 results, one file per commit

These files are derived from the sidecars (:mod:`pytest_perfgate.history.store`) and never
read by the gate (docs/design.md §6). Each is strict JSON written atomically.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.history.files import (atomic_write, describe, dump_json, keep_valid,
                                           read_object)
from pytest_perfgate.history.machine import asv_machine_json

ASV_RESULT_COLUMNS = ["result", "params", "version", "started_at", "duration",
                      "stats_ci_99_a", "stats_ci_99_b", "stats_q_25", "stats_q_75",
                      "stats_number", "stats_repeat", "samples", "profile"]
ASV_PARAM_KEYS = ("machine", "arch", "cpu", "num_cpu", "ram")  # stable machine.json fields
# Bump when the meaning of a stored series changes: asv hides results whose version differs
# from benchmarks.json, so old and new numbers are never drawn on one line.
SERIES_VERSION = "perfgate-1"
# A result of the counts mode (modes/counts/mode.py COUNTS_SOURCE): its samples are
# instructions per env-step, a "track" series where lower is better as asv assumes, beside
# the estimated cycles from the cache simulation (docs/design.md §10).
COUNTS_SOURCE = "perfgate-counts"
COUNTS_UNIT = "instructions/env-step"
CYCLES_UNIT = "est. cycles/env-step"


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
    """The graph dimensions asv publish will show: stable machine fields only."""
    return {k: str(v) for k, v in asv_machine_json(meta).items() if k in ASV_PARAM_KEYS}


def write_machine_json(machine_dir: Path, machine: str, meta: Mapping[str, Any]) -> None:
    """Update ``<machine>/machine.json``, keeping fields asv or a user added (strings only,
    as asv writes them); anything else is dropped with one warning."""
    path = machine_dir / "machine.json"
    data = keep_valid(path, read_object(path, "rewritten from this run's machine facts"),
                      _machine_field_problem, "fields")
    data.update(asv_machine_json({**meta, "machine": machine}))
    atomic_write(path, dump_json(data))


def _machine_field_problem(key: str, value: Any) -> str | None:
    if isinstance(value, str) or (key == "version" and value == 1):
        return None
    return f"{describe(value)}, expected a string"


def asv_entries(run: RunRecord, info: Mapping[str, Mapping[str, Any]]
                ) -> dict[str, dict[str, Any]]:
    """benchmarks.json entries for this run: the gated time series plus display tracks."""
    out: dict[str, dict[str, Any]] = {}
    for name, bench in run.benchmarks.items():
        extra = {k: v for k, v in dict(info.get(name) or {}).items()
                 if k not in ("name", "type", "unit", "params", "param_names")}
        base = asv_name(name)
        if bench.source == COUNTS_SOURCE:
            out[base] = _bench_entry(base, "track", COUNTS_UNIT, name, extra)
            out[f"{base}.est_cycles"] = _bench_entry(f"{base}.est_cycles", "track",
                                                     CYCLES_UNIT, name, extra)
            continue
        out[base] = _bench_entry(base, "time", "seconds", name, extra)
        out[f"{base}.steps_per_s"] = _bench_entry(f"{base}.steps_per_s", "track",
                                                  "env-steps/s", name, extra)
        for phase in bench.phases:
            pname = f"{base}.phase.{asv_name(phase)}_ms"
            out[pname] = _bench_entry(pname, "track", "ms", name, extra)
    return out


def merge_benchmarks_json(results_dir: Path, entries: Mapping[str, dict[str, Any]]) -> None:
    """Add ``entries`` to benchmarks.json; valid entries of other benchmarks are never pruned,
    invalid ones are dropped with one warning (asv would stop on them)."""
    path = results_dir / "benchmarks.json"
    data = read_object(path, "rewritten with this run's benchmarks; the others come back "
                       "when they next record", _benchmarks_json_problem)
    data.pop("version", None)
    data = keep_valid(path, data, _bench_entry_problem, "entries")
    data.update(entries)
    data["version"] = 2
    atomic_write(path, dump_json(data))


def _benchmarks_json_problem(data: Mapping[str, Any]) -> str | None:
    version = data.get("version")
    return None if version == 2 else f"version {version!r}, this writes asv's version 2"


_BENCH_TYPES = ("time", "track", "mem", "peakmem")  # what asv's benchmarks.json holds


def _bench_entry_problem(key: str, entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return f"{describe(entry)}, expected an object"
    if entry.get("name") != key:
        return f"its name is {entry.get('name')!r}"
    if entry.get("type") not in _BENCH_TYPES:
        return f"type {entry.get('type')!r} is not one of {', '.join(_BENCH_TYPES)}"
    for field, kind in (("unit", str), ("version", str), ("params", list),
                        ("param_names", list)):
        if not isinstance(entry.get(field), kind):
            return f"{field} is {describe(entry.get(field))}"
    return None


def write_asv_result(machine_dir: Path, machine: str, run: RunRecord,
                     same_commit: Iterable[RunRecord],
                     entries: Mapping[str, Mapping[str, Any]]) -> None:
    """Rewrite ``run``'s commit file from every run at that commit (``same_commit``)."""
    meta = run.metadata
    py = ".".join(str(meta.get("python") or "").split(".")[:2]) or "unknown"
    env_name = f"perfgate-py{py}"  # stable: one asv environment per Python minor
    path = machine_dir / f"{run.commit[:8]}-{env_name}.json"
    old = read_object(path, f"rebuilt from the sidecars of commit {run.commit[:12]}",
                      _asv_result_problem)
    rows: dict[str, list[Any]] = keep_valid(path, old.get("results") or {}, _row_problem,
                                            "rows")
    # Newest clean run per benchmark at this commit wins; dirty runs only fill gaps.
    same = [r for r in same_commit if r.commit == run.commit]
    if all(r.run_id != run.run_id for r in same):
        same.append(run)
    series: dict[str, Mapping[str, Any]] = {}
    for r in same:  # every benchmark measured at this commit, so a rebuilt file loses none
        series.update(asv_entries(r, {}))
    series.update(entries)
    for r in sorted(same, key=lambda r: (not r.dirty, r.started_at)):
        rows.update(_asv_rows(r, series))
    params = asv_params_from_meta({**meta, "machine": machine})
    data = {
        "commit_hash": run.commit, "env_name": env_name, "date": run.commit_date_ms,
        "params": {**params, "python": py}, "python": py, "requirements": {},
        "env_vars": {}, "result_columns": ASV_RESULT_COLUMNS, "results": rows,
        "durations": {}, "version": 2,
    }
    atomic_write(path, dump_json(data, compact=True))


def _asv_result_problem(data: Mapping[str, Any]) -> str | None:
    """What makes a result file unusable as a whole (its rows are then not carried over)."""
    if data.get("version") != 2:
        return f"version {data.get('version')!r}, this writes asv's version 2"
    if data.get("result_columns") != ASV_RESULT_COLUMNS:
        return (f"unknown result_columns {data.get('result_columns')!r}, this writes "
                f"{ASV_RESULT_COLUMNS}")
    for key in ("results", "params"):
        if not isinstance(data.get(key, {}), dict):
            return f"{key!r} is {describe(data[key])}, expected an object"
    return None


def _num(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _nums(v: Any) -> bool:
    return isinstance(v, list) and all(_num(x) for x in v)


# One check per asv result column, in ASV_RESULT_COLUMNS order (asv's own row layout).
_COLUMN_CHECKS: list[Callable[[Any], bool]] = (
    [_nums,  # result
     lambda v: isinstance(v, list) and all(isinstance(x, list) for x in v),  # params
     lambda v: v is None or isinstance(v, str),  # version
     _num, _num]  # started_at, duration
    + [lambda v: v is None or _nums(v)] * 6  # stats_*
    + [lambda v: v is None or (isinstance(v, list)
                               and all(x is None or _nums(x) for x in v)),  # samples
       lambda v: v is None or isinstance(v, str)])  # profile


def _row_problem(key: str, row: Any) -> str | None:
    if not isinstance(row, list):
        return f"{describe(row)}, expected a list"
    if not 1 <= len(row) <= len(ASV_RESULT_COLUMNS):
        return f"{len(row)} columns, expected 1 to {len(ASV_RESULT_COLUMNS)}"
    for column, check, value in zip(ASV_RESULT_COLUMNS, _COLUMN_CHECKS, row, strict=False):
        if not check(value):
            return f"column {column!r} holds {value!r}"[:120]
    return None


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
    if kind == "time":  # what asv's own discovery writes for a time_ benchmark
        entry.update(min_run_count=1, number=1, repeat=0, rounds=1, sample_time=0.0,
                     warmup_time=0.0)
    entry.update(extra)
    entry["version"] = str(entry["version"])
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
        base = asv_name(name)
        value, stats = _asv_stats(bench.samples)
        put(base, value, stats, bench.samples)
        if bench.source == COUNTS_SOURCE:
            cycles = bench.extra.get("est_cycles_per_step")
            if isinstance(cycles, (int, float)) and not isinstance(cycles, bool):
                put(f"{base}.est_cycles", float(f"{cycles:.6g}"))
            continue
        # Display series: 6 significant digits keep asv's tables readable.
        put(f"{base}.steps_per_s", float(f"{bench.steps_per_s:.6g}"))
        for phase, summary in bench.phases.items():
            put(f"{base}.phase.{asv_name(phase)}_ms", float(f"{summary.ms_per_call:.6g}"))
    return rows


__all__ = ["COUNTS_SOURCE", "ASV_RESULT_COLUMNS", "ASV_PARAM_KEYS", "SERIES_VERSION", "asv_name",
           "asv_params_from_meta", "write_machine_json", "asv_entries",
           "merge_benchmarks_json", "write_asv_result"]
