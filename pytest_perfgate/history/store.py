"""Results history on disk: our full records plus an asv-readable view of them.

Layout under the results dir (asv's own layout, so ``asv compare``/``asv publish`` work)::

    benchmarks.json                      asv v2 benchmark descriptions (merged, never pruned)
    <machine>/machine.json               asv machine description
    <machine>/<commit[:8]>-<env>.json    asv v2 results, one file per commit
    <machine>/perfgate/<run_id>.pgrun    our full RunRecord, one per run (the source of truth)

Sidecars end in ``.pgrun`` because asv parses every ``*.json`` below a machine folder.
The gate reads only sidecars; the asv files are a derived view (FIELD-NOTES 2).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from pytest_perfgate.history.machine import asv_machine_json, describe_mismatch, fingerprint_fields
from pytest_perfgate.core.results import BenchResult, RunRecord

ASV_RESULT_COLUMNS = ["result", "params", "version", "started_at", "duration",
                      "stats_ci_99_a", "stats_ci_99_b", "stats_q_25", "stats_q_75",
                      "stats_number", "stats_repeat", "samples", "profile"]
ASV_PARAM_KEYS = ("machine", "arch", "cpu", "num_cpu", "ram")  # stable machine.json fields
SIDECAR_DIR = "perfgate"
SIDECAR_SUFFIX = ".pgrun"
TMP_SUFFIX = ".perfgate-tmp"  # not ".json": asv must never see a half-written file
STALE_TMP_S = 3600.0
DEFAULT_RESULTS = Path(".perfgate") / "results"
# Bump when the meaning of a stored series changes: asv hides results whose version differs
# from benchmarks.json, so old and new numbers are never drawn on one line.
SERIES_VERSION = "perfgate-1"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@-]{0,127}")


class HistoryWarning(UserWarning):
    """A history file was skipped or could not be written; the run itself carries on."""


def validate_path_name(value: str, what: str = "machine name", kind: str = "folder") -> str:
    """Return ``value`` if it is safe as one folder/file name, else raise ValueError."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value) or ".." in value:
        raise ValueError(
            f"{what} {value!r} cannot be used as a {kind} name under the results dir: use "
            "1-128 letters, digits, '.', '_', '+', '@' or '-', starting with a letter or digit "
            "(e.g. 'ci-runner-4core')")
    return value


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


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either the old or the new content, never a mix.

    Temp file in the same folder + fsync + os.replace + folder fsync: a writer killed
    mid-write corrupted plain json.dump files 20/20 times and this 0/20 (FIELD-NOTES 5).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _dump(obj: Any, compact: bool = False, strict: bool = True) -> bytes:
    """asv files are strict JSON; sidecars (read only by us) may hold NaN and odd types."""
    kw: dict[str, Any] = {"allow_nan": not strict, "default": None if strict else str}
    text = (json.dumps(obj, separators=(",", ":"), **kw) if compact
            else json.dumps(obj, indent=4, sort_keys=True, **kw) + "\n")
    return text.encode("utf-8")


def sweep_stale_temps(folder: Path, now: float | None = None,
                      max_age_s: float = STALE_TMP_S) -> int:
    """Delete our temp files older than ``max_age_s`` (left by killed writers)."""
    now = time.time() if now is None else now
    removed = 0
    with contextlib.suppress(OSError):
        for p in folder.glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > max_age_s:
                    p.unlink()
                    removed += 1
    return removed


def default_results_dir(rootdir: str | os.PathLike[str]) -> Path:
    """asv.conf.json's ``results_dir`` (relative to that file) when present, else a local one.

    Like asv, a config without ``results_dir`` means "results" next to it; // comments and
    trailing commas are accepted because asv accepts them (json5).
    """
    root = Path(rootdir)
    for conf in (root / "asv.conf.json", root / "asv.conf.jsonc"):
        if conf.is_file():
            data = _load_jsonc(conf)
            value = data.get("results_dir", "results") if isinstance(data, dict) else None
            if not isinstance(value, str) or not value:
                raise ValueError(f"{conf}: results_dir {value!r} is not a folder name; set "
                                 "\"results_dir\": \"results\" or remove the key")
            return (conf.parent / os.path.expanduser(value)).resolve()
    return root / DEFAULT_RESULTS


def _load_jsonc(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        import json5  # asv's own dependency for its config loader
        return json5.loads(text)
    except ImportError:
        return json.loads(_strip_comments(text))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON (asv would refuse it too): {exc}") from exc


def _strip_comments(text: str) -> str:
    """Remove // and /* */ comments outside strings (fallback when json5 is missing)."""
    pattern = r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/'
    return re.sub(pattern, lambda m: m.group(1) or "", text, flags=re.S)


def _asv_stats(samples: Sequence[float]) -> tuple[float, dict[str, float | int | None]]:
    """Median and the stats asv stores, computed by asv's own code (asv_runner comes with
    asv). An infinite CI (a single sample) is stored as null."""
    from asv_runner.statistics import compute_stats
    value, stats = compute_stats(list(samples), 1)
    clean = {k: (v if isinstance(v, int) or (v is not None and math.isfinite(v)) else None)
             for k, v in stats.items()}
    return float(value), clean


class History:
    """One machine's history in one results dir (the gate's input, asv's view of it)."""

    def __init__(self, results_dir: str | os.PathLike[str], machine: str) -> None:
        self.results_dir = Path(results_dir)
        self.machine = validate_path_name(machine)
        self.machine_dir = self.results_dir / self.machine
        self.sidecar_dir = self.machine_dir / SIDECAR_DIR

    def record(self, run: RunRecord, benchmark_info: Mapping[str, Mapping[str, Any]]
               | None = None) -> Path:
        """Store ``run``; return its sidecar path.

        Every run keeps its own sidecar. asv holds one result file per commit, so a later
        run at the same commit replaces that commit's asv rows benchmark by benchmark; a
        dirty-tree run never replaces a clean run's numbers. Runs outside git (commit all
        zeros) get no asv result file: asv publish needs a real commit to place them.
        ``benchmark_info`` adds asv descriptions per benchmark ("code", "pretty_name",
        "version"...).
        """
        if run.machine != self.machine:
            raise ValueError(f"run {run.run_id!r} was measured on machine {run.machine!r} but "
                             f"this history is for {self.machine!r}: open History(results_dir, "
                             f"{run.machine!r}) instead")
        validate_path_name(run.run_id, "run id", "file")
        for name in run.benchmarks:
            asv_name(name)  # refuse NUL & co. before anything is written
        for folder in (self.results_dir, self.machine_dir, self.sidecar_dir):
            sweep_stale_temps(folder)
        sidecar = self.sidecar_dir / f"{run.run_id}{SIDECAR_SUFFIX}"
        atomic_write(sidecar, _dump(run.to_json(), strict=False))  # first: what the gate reads
        self._write_machine_json(run.metadata)
        entries = self._asv_entries(run, dict(benchmark_info or {}))
        self._merge_benchmarks_json(entries)
        if any(c != "0" for c in run.commit):
            self._write_asv_result(run, entries)
        return sidecar

    def _write_machine_json(self, meta: Mapping[str, Any]) -> None:
        path = self.machine_dir / "machine.json"
        data = dict(_read_json(path) or {})
        data.update(asv_machine_json({**meta, "machine": self.machine}))
        atomic_write(path, _dump(data))

    def _asv_entries(self, run: RunRecord, info: Mapping[str, Mapping[str, Any]]
                     ) -> dict[str, dict[str, Any]]:
        """benchmarks.json entries for this run: the gated time series plus display tracks."""
        out: dict[str, dict[str, Any]] = {}
        for name, bench in run.benchmarks.items():
            extra = {k: v for k, v in dict(info.get(name) or {}).items()
                     if k not in ("name", "type", "unit", "params", "param_names")}
            base = asv_name(name)
            out[base] = _bench_entry(base, "time", "seconds", name, extra)
            out[f"{base}.steps_per_s"] = _bench_entry(f"{base}.steps_per_s", "track",
                                                      "env-steps/s", name, extra)
            for phase in bench.phases:
                pname = f"{base}.phase.{asv_name(phase)}_ms"
                out[pname] = _bench_entry(pname, "track", "ms", name, extra)
        return out

    def _merge_benchmarks_json(self, entries: Mapping[str, dict[str, Any]]) -> None:
        path = self.results_dir / "benchmarks.json"
        data = _read_json(path, warn=True)
        if not isinstance(data, dict) or data.get("version") != 2:
            data = {}
        data.update(entries)
        data["version"] = 2
        atomic_write(path, _dump(data))

    def _write_asv_result(self, run: RunRecord, entries: Mapping[str, Mapping[str, Any]]
                          ) -> None:
        meta = run.metadata
        py = ".".join(str(meta.get("python") or "").split(".")[:2]) or "unknown"
        env_name = f"perfgate-py{py}"  # stable: one asv environment per Python minor
        path = self.machine_dir / f"{run.commit[:8]}-{env_name}.json"
        old = _read_json(path)
        rows: dict[str, list[Any]] = {}
        if isinstance(old, dict) and old.get("result_columns") == ASV_RESULT_COLUMNS:
            rows.update(old.get("results") or {})
        # Newest clean run per benchmark at this commit wins; dirty runs only fill gaps.
        same = [r for r in self._iter_runs(warn=False) if r.commit == run.commit]
        if all(r.run_id != run.run_id for r in same):
            same.append(run)
        for r in sorted(same, key=lambda r: (not r.dirty, r.started_at)):
            rows.update(_asv_rows(r, entries))
        machine = asv_params_from_meta({**meta, "machine": self.machine})
        data = {
            "commit_hash": run.commit, "env_name": env_name, "date": run.commit_date_ms,
            "params": {**machine, "python": py}, "python": py, "requirements": {},
            "env_vars": {}, "result_columns": ASV_RESULT_COLUMNS, "results": rows,
            "durations": {}, "version": 2,
        }
        atomic_write(path, _dump(data, compact=True))

    # ---- reading ----------------------------------------------------------------------

    def load_runs(self) -> list[RunRecord]:
        """All runs recorded for this machine, oldest first. Unreadable files are skipped
        with one HistoryWarning each, naming the file; everything else is kept."""
        return sorted(self._iter_runs(warn=True), key=lambda r: r.started_at)

    def _iter_runs(self, warn: bool) -> Iterator[RunRecord]:
        for path in sorted(self.sidecar_dir.glob(f"*{SIDECAR_SUFFIX}")):  # [] when missing
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if not isinstance(data, dict):
                    raise ValueError(f"expected a JSON object, found {type(data).__name__}")
                yield RunRecord.from_json(data)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                if warn:
                    what = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
                    warnings.warn(HistoryWarning(
                        f"skipping history file {path}: {what} (delete or move it to silence "
                        "this warning)"), stacklevel=3)


def _read_json(path: Path, warn: bool = False) -> Any:
    """A JSON file we are about to rewrite; None when missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if warn and not isinstance(exc, FileNotFoundError):
            warnings.warn(HistoryWarning(f"rewriting unreadable history file {path}: {exc}"))
        return None


def asv_params_from_meta(meta: Mapping[str, Any]) -> dict[str, str]:
    """The graph dimensions asv publish will show: stable machine fields only."""
    return {k: str(v) for k, v in asv_machine_json(meta).items() if k in ASV_PARAM_KEYS}


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


def _asv_rows(run: RunRecord, entries: Mapping[str, Mapping[str, Any]]) -> dict[str, list]:
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
        # Display series: 6 significant digits keep asv's tables readable.
        put(f"{base}.steps_per_s", float(f"{bench.steps_per_s:.6g}"))
        for phase, summary in bench.phases.items():
            put(f"{base}.phase.{asv_name(phase)}_ms", float(f"{summary.ms_per_call:.6g}"))
    return rows


# ---- baseline selection -------------------------------------------------------------------

def select_baseline(runs: Sequence[RunRecord], bench_name: str, *, fingerprint: str,
                    head_commit: str, is_ancestor: Callable[[set[str]], set[str]], n: int = 5,
                    explicit_commit: str | None = None, exclude_run_id: str | None = None,
                    include_dirty: bool = True) -> list[tuple[RunRecord, BenchResult]]:
    """The newest ``n`` runs (by started_at) that may serve as ``bench_name``'s baseline.

    Only runs on the same machine fingerprint that measured the benchmark count. By default
    their commit must be HEAD or one of its ancestors (``is_ancestor`` is asked once, with
    every distinct candidate commit), so one pull request's runs never become another's
    baseline. With ``explicit_commit`` (full hash or prefix) only that commit's runs count.
    """
    if n < 1:
        raise ValueError(f"baseline size n={n} must be at least 1: use the default 5")
    pool = [r for r in runs if r.fingerprint == fingerprint and bench_name in r.benchmarks
            and r.run_id != exclude_run_id and (include_dirty or not r.dirty)]
    if explicit_commit is not None:
        want = explicit_commit.strip().lower()
        if not want:
            raise ValueError("explicit baseline commit is empty: give a commit hash or prefix")
        matched = {r.commit for r in pool if r.commit.lower().startswith(want)}
        if len(matched) > 1:
            raise ValueError(f"baseline commit prefix {explicit_commit!r} matches several "
                             f"recorded commits ({', '.join(sorted(c[:12] for c in matched))})"
                             ": give more digits")
        chosen = [r for r in pool if r.commit in matched]
    else:
        others = {r.commit for r in pool if r.commit != head_commit and set(r.commit) != {"0"}}
        ok = (is_ancestor(others) & others) if others else set()
        chosen = [r for r in pool if r.commit == head_commit or r.commit in ok]
    chosen.sort(key=lambda r: r.started_at, reverse=True)
    return [(r, r.benchmarks[bench_name]) for r in chosen[:n]]


def describe_other_fingerprints(runs: Sequence[RunRecord], fingerprint: str, bench: str, *,
                                current_meta: Mapping[str, Any] | None = None) -> str | None:
    """Explain an empty baseline: which other fingerprints hold ``bench`` and how they
    differ from ours. None when no other fingerprint has it either."""
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        if r.fingerprint != fingerprint and bench in r.benchmarks:
            groups.setdefault(r.fingerprint, []).append(r)
    if not groups:
        return None
    ours = fingerprint_fields(current_meta) if current_meta is not None else None
    parts = []
    for fp, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        part = f"{len(rs)} {'run exists' if len(rs) == 1 else 'runs exist'} on fingerprint {fp}"
        if ours is not None:
            theirs = fingerprint_fields(max(rs, key=lambda r: r.started_at).metadata)
            part += f" which differs in: {describe_mismatch(theirs, ours)}"
        parts.append(part)
    return (f"no results for {bench} on this machine fingerprint ({fingerprint}); "
            + "; ".join(parts))
