"""Runs that `asv run` recorded, read back as reduced run records for the gate.

The asv suite in benchmarks/ writes rows named like perfgate's gated series
(``N.track_s_per_step``, seconds per env-step, version SERIES_VERSION) into asv's result
files. Each result file with such rows becomes one :class:`RunRecord` whose benchmarks carry
those numbers (docs/design.md §6). They are *reduced* and marked as such:

- ``metadata["recorded_by"] == "asv"``, the run id starts with ``asv-``, each benchmark's
  ``source`` is ``"asv"``;
- asv keeps only machine.json fields (machine, cpu, num_cpu...) and the Python version, not
  the CPU affinity, cgroup quota or NUMA nodes perfgate fingerprints on.
  So the fingerprint is computed from what asv kept, with the rest unknown: asv-run records
  serve as each other's baseline, never as a baseline of perfgate's own runs (nor the
  reverse), and a NO BASELINE names what differs;
- one sample per asv process (asv keeps the track's return value, the median of perfgate's
  windows), no phases, no warm-up facts; asv writes no commit of a dirty tree.

The benchmark's name is the series name without ``.track_s_per_step``: a perfgate name that
:func:`asv_name` flattens (a pytest id with ``/`` or ``::``) comes back flattened.

Rows perfgate itself wrote are not read here (they come from the sidecars); asv marks its
own rows with a duration, perfgate never writes one (:func:`asv_written`).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import load_json
from pytest_perfgate.core.results import SAMPLE_RANGE, BenchRecord, RunRecord, is_sample, is_time
from pytest_perfgate.history.asv import GATED_SUFFIX, SERIES_VERSION, asv_written, python_minor
from pytest_perfgate.history.files import Unreadable, describe, read_json, warn_history
from pytest_perfgate.history.machine_id import fingerprint

ASV_SOURCE = "asv"
ASV_RUN_PREFIX = "asv-"


def asv_recorded_runs(machine_dir: Path, machine: str, warn: bool = True,
                      unreadable: list[Unreadable] | None = None) -> list[RunRecord]:
    """Every asv result file under ``machine_dir`` holding asv-written rows of our gated
    series, as reduced run records. A file that is not a usable asv result is skipped, and
    rows of our series that hold garbage are dropped (with one warning per file when
    ``warn``): asv owns these files and may hold anything there. A dropped row whose start
    time could be read is added to ``unreadable``."""
    machine_json = read_json(machine_dir / "machine.json")
    mj = machine_json if isinstance(machine_json, dict) else {}
    runs = []
    for path in sorted(machine_dir.glob("*.json")):
        if path.name == "machine.json":
            continue
        bad: list[tuple[str, float | None]] = []
        try:
            run = _read_run(path, machine, mj, bad)
        except ValueError as exc:
            if warn:
                warn_history(path, str(exc), "not reading asv-run results from",
                             "asv's own files: move it out of the machine folder if it is "
                             "not one")
            continue
        if bad and warn:
            why = [b for b, _ in bad]
            warn_history(path, "; ".join(why[:3]) + (f"; and {len(why) - 3} more"
                                                      if len(why) > 3 else ""),
                         "skipping rows of", "the other rows are read")
        times = [t for _, t in bad if t is not None]
        if times and unreadable is not None:
            unreadable.append(Unreadable(path, started_at=max(times)))
        if run is not None:
            runs.append(run)
    return runs


def _read_run(path: Path, machine: str, mj: Mapping[str, Any],
              bad: list[tuple[str, float | None]]) -> RunRecord | None:
    try:
        data = load_json(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, found {describe(data)}")
    rows = data.get("results")
    commit = data.get("commit_hash")
    if not isinstance(rows, dict) or not isinstance(commit, str) \
            or not re.fullmatch(r"[0-9a-fA-F]{4,64}", commit):
        raise ValueError("no 'results' object or no hex 'commit_hash': not an asv result file")
    ours = {}
    for key, row in rows.items():
        got = _ours(key, row)
        if isinstance(got, str):
            t = row[3] / 1000 if isinstance(row, list) and len(row) > 3 and _is_number(
                row[3]) else None
            bad.append((got, t if is_time(t) else None))
        elif got:
            ours[key] = row
    benches = dict(_benches(ours))
    if not benches:
        return None
    params: dict[str, Any] = data["params"] if isinstance(data.get("params"), dict) else {}
    env = str(data.get("env_name") or "unknown")
    started = min(float(r[3]) for r in ours.values()) / 1000
    date = data.get("date")
    python = data.get("python") if isinstance(data.get("python"), str) else params.get("python")
    meta = {
        "recorded_by": ASV_SOURCE, "asv_file": path.name, "asv_env_name": env,
        "asv_params": _strings(params),
        "machine": machine, "cpu_model": str(mj.get("cpu") or params.get("cpu") or "") or None,
        "cpu_logical": _int(mj.get("num_cpu") or params.get("num_cpu")),
        "python": python_minor(python if isinstance(python, str) else None),
        "arch": str(mj.get("arch") or params.get("arch") or "") or None,
        "versions": _strings(data.get("requirements")),
    }
    return RunRecord(
        run_id=f"{ASV_RUN_PREFIX}{commit[:12]}-{re.sub(r'[^A-Za-z0-9_.-]', '_', env)}",
        started_at=started, commit=commit,
        commit_date_ms=int(date) if isinstance(date, (int, float)) and not isinstance(
            date, bool) and is_time(date / 1000) else 0,
        branch=None, dirty=False, machine=machine, fingerprint=fingerprint(meta),
        metadata=meta, benchmarks=benches)


def _ours(key: str, row: Any) -> bool | str:
    """True for an asv-written row of one of our gated series, of this series version, that
    holds a time per env-step and a start time; False for other rows and for results asv
    itself marks failed (null) or skipped (NaN); what is wrong with a row of ours that
    holds garbage."""
    if not key.endswith(f".{GATED_SUFFIX}"):
        return False
    if not isinstance(row, list):
        return f"row {key!r} is {describe(row)}, not an asv result row (a list)"
    if not asv_written(row) or row[2] != SERIES_VERSION:
        return False  # another series version, or a row perfgate derived from a sidecar
    if not isinstance(row[0], list) or len(row[0]) != 1:
        return f"row {key!r}: result {_short(row[0])} is not a list of one value"
    value = row[0][0]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if not (_is_number(value) and is_sample(value * 1e6)):
        return (f"row {key!r}: result {_short(value)} is not seconds per env-step between "
                f"{SAMPLE_RANGE[0] / 1e6:g} and {SAMPLE_RANGE[1] / 1e6:g}")
    if not (_is_number(row[3]) and is_time(row[3] / 1000)):
        return f"row {key!r}: started_at {_short(row[3])} is not a time in epoch milliseconds"
    return True


def _benches(rows: Mapping[str, Any]) -> Iterator[tuple[str, BenchRecord]]:
    for key, row in rows.items():
        name = key[:-len(GATED_SUFFIX) - 1]
        raw = row[11][0] if len(row) > 11 and isinstance(row[11], list) and row[11] else None
        per_step = [float(x) for x in raw if _is_number(x) and is_sample(x * 1e6)] \
            if isinstance(raw, list) else []
        per_step = per_step or [float(row[0][0])]
        samples = tuple(x * 1e6 for x in per_step)  # sidecar unit: s per million env-steps
        yield name, BenchRecord(name=name, samples=samples,
                                rate=1e6 / statistics.median(samples),
                                source=ASV_SOURCE, extra={"asv_series": key})


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _strings(v: Any) -> dict[str, str]:
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}


def _int(v: Any) -> int | None:
    try:
        return int(str(v))
    except ValueError:
        return None


def is_asv_run(run: RunRecord) -> bool:
    """True for a reduced record read from asv's files (not a perfgate sidecar)."""
    return run.metadata.get("recorded_by") == ASV_SOURCE
