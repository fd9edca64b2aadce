"""The data one run leaves behind: plain, JSON-ready records shared by recording and gating.

A *run* is one session of the suite on one machine at one commit; it holds one
:class:`BenchRecord` per benchmark: the :class:`BenchResult` measured, and the verdict it
got. The run, not the window, is the unit the gate replicates over (docs/design.md §1).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field
from typing import Any, Self

from pytest_perfgate.core.metric import is_unit

FORMAT_VERSION = 1
# What a recorded number can be, however fast or slow the workload: a sample (seconds per
# million env-steps, or instructions per env-step) between 1e-9 (1e15 env-steps/s) and 1e15,
# a start time between 1970 and the year 9999. Wider values are garbage in a history file,
# and the gate's logs, squares and exps of them would overflow (a traceback, not a verdict).
SAMPLE_RANGE = (1e-9, 1e15)
TIME_RANGE = (0.0, 253402300799.0)  # epoch seconds: 1970-01-01 .. 9999-12-31 23:59:59


def is_sample(v: object) -> bool:
    """A number a sidecar or an asv row may hold as one measured sample."""
    return _is_num(v) and SAMPLE_RANGE[0] <= v <= SAMPLE_RANGE[1]  # type: ignore[operator]


def is_time(v: object) -> bool:
    """An epoch time a run may have started at (NaN, inf and bools are not)."""
    return _is_num(v) and TIME_RANGE[0] <= v <= TIME_RANGE[1]  # type: ignore[operator]


@dataclass(frozen=True)
class PhaseSummary:
    ms_per_call: float
    share: float  # of the measured wall time
    cores: float  # CPU time / wall time inside the phase
    gpu_ms: float | None = None  # GPU time per call from CUDA events (None: no CUDA)


@dataclass(frozen=True)
class BenchResult:
    """One benchmark's measurement in one run: what was measured, never what was decided
    about it (that is :class:`BenchRecord`'s, once the gate has judged it)."""

    name: str
    samples: tuple[float, ...]  # per-window seconds per million env-steps (lower is better)
    # RATE_SCALE / the median sample: units of work per second for a rate (env-steps/s,
    # calls/s, a user's unit), env-steps per million instructions for counts; a person reads
    # ``metric_for(unit).shown(rate)`` (core/metric.py). Its sidecar key is "steps_per_s".
    rate: float
    cores: float = 0.0
    steady: bool = True
    warmup_s: float = 0.0
    warmup_windows: int = 0
    remeasured: int = 0
    polluted_kept: int = 0
    transitions: int = 0  # env-steps per call of the step
    phases: Mapping[str, PhaseSummary] = field(default_factory=dict)
    source: str = "perfgate"  # or "pytest-benchmark"
    # what rate counts, and so how the gate words it and which way is better:
    # "env-steps/s", "calls/s", a user's "<unit>/s", "instructions/env-step" (core/metric.py)
    unit: str = "env-steps/s"
    extra: Mapping[str, Any] = field(default_factory=dict)  # workload metadata (placement...)
    # The workload process tree's memory in bytes (peak_rss, rss, uss, pss, processes;
    # core/tree.py); empty where it was not sampled (older records, pytest-benchmark's).
    memory: Mapping[str, int] = field(default_factory=dict)
    # How the GPU was timed and watched: {"sync": "edges" | "phases" | "events" (a ring
    # learner: CUDA events only), "spoiled": {reason:
    # windows}} (core/measure.py Measurement.gpu); empty, and not written, without CUDA.
    gpu: Mapping[str, Any] = field(default_factory=dict)
    # Busy cores of other work during warm-up, kept when above the load limit: an UNSTABLE
    # verdict names it as the cause (None: below it, unseen, or older records).
    warmup_load: float | None = None

    @property
    def value(self) -> float:
        """The run's summary statistic: median of its window samples."""
        return statistics.median(self.samples)

    def to_json(self) -> dict[str, Any]:
        d = {_FILE_KEYS.get(k, k): v for k, v in asdict(self).items()}
        d["samples"] = list(self.samples)
        if not self.gpu:  # a CPU-only run records no GPU field at all
            del d["gpu"]
        if self.warmup_load is None:
            del d["warmup_load"]
        for ph in d["phases"].values():
            if ph.get("gpu_ms") is None:
                del ph["gpu_ms"]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Self:
        """Read one benchmark of a sidecar, checking every field it carries (ValueError names
        the field). Unknown keys are ignored and absent optional fields take their defaults,
        so older and newer sidecars stay readable."""
        where = f"benchmark {d.get('name')!r}: " if isinstance(d, Mapping) else ""
        d = _obj(d, "benchmark", "")
        raw = _get(d, "samples", list, where)
        if not raw or not all(is_sample(x) for x in raw):
            raise ValueError(f"{where}samples must be a non-empty list of numbers between "
                             f"{SAMPLE_RANGE[0]:g} and {SAMPLE_RANGE[1]:g}, found "
                             f"{_shorten(raw)}")
        phases: dict[str, PhaseSummary] = {}
        for pname, ph in _get(d, "phases", dict, where, {}).items():
            ph, at = _obj(ph, f"phase {pname!r}", where), f"{where}phase {pname!r}: "
            gpu_ms = _get(ph, "gpu_ms", (float, None), at, None)
            phases[pname] = PhaseSummary(**{k: float(_get(ph, k, float, at))
                                            for k in ("ms_per_call", "share", "cores")},
                                         gpu_ms=None if gpu_ms is None else float(gpu_ms))
        kw: dict[str, Any] = {}
        for key, f in cls.__dataclass_fields__.items():
            required = f.default is MISSING and f.default_factory is MISSING
            at = _FILE_KEYS.get(key, key)
            if key in ("samples", "phases") or (at not in d and not required):
                continue  # absent optional fields take their defaults
            kind = _BENCH_KINDS.get(key)
            kw[key] = d[at] if kind is None else _get(d, at, kind, where)
        line = kw.get("test_line")
        if line is not None and line < 1:
            raise ValueError(f"{where}field 'test_line' is {line!r}, expected a line number >= 1")
        t = kw.get("threshold")
        if t is not None and not (math.isfinite(t) and 0 < t < 1):
            raise ValueError(f"{where}field 'threshold' is {t!r}, expected a fraction "
                             "between 0 and 1")
        memory = kw.get("memory") or {}
        for k, v in memory.items():
            if not (isinstance(k, str) and _is_kind(v, int) and 0 <= v < MEMORY_LIMIT):
                raise ValueError(f"{where}field 'memory' holds {k!r}: {_shorten(v)}, expected "
                                 f"a byte count between 0 and {MEMORY_LIMIT:g}")
        if memory:
            kw["memory"] = {k: int(v) for k, v in memory.items()}
        unit = kw.get("unit")
        if unit is not None and not is_unit(unit):
            raise ValueError(f"{where}field 'unit' is {_shorten(unit)}, expected "
                             "'instructions/env-step' or a rate such as 'calls/s'")
        if "unit" not in d and d.get("source") == LEGACY_COUNTS_SOURCE:
            kw["unit"] = "instructions/env-step"  # counts recorded before units were kept
        return cls(samples=tuple(float(x) for x in raw), phases=phases, **kw)


@dataclass(frozen=True)
class BenchRecord(BenchResult):
    """One benchmark as a run records it: its measurement, the verdict the gate gave it and
    where its test is. A sidecar holds these, flat, one per benchmark."""

    # The gate's outcome for this run ("OK", "REGRESSION"...; None: not judged). A run
    # whose benchmark failed the gate serves no baseline until accepted (docs/design.md §2).
    verdict: str | None = None
    # The threshold that verdict was reached at (the test's marker, else the session's
    # option): ``perfgate check``/``report`` judge the run again at it (None: older records).
    threshold: float | None = None
    # Where the test that measured it is defined: file relative to the git checkout's top
    # level (posix), 1-based line; None in records written before they were kept. CI
    # annotations point at it (docs/design.md §12).
    test_file: str | None = None
    test_line: int | None = None

    @classmethod
    def of(cls, result: BenchResult, verdict: str | None = None,
           threshold: float | None = None, where: tuple[str, int] | None = None
           ) -> BenchRecord:
        """The record of a measurement the gate judged (``verdict`` None: it did not)."""
        fields = {k: getattr(result, k) for k in BenchResult.__dataclass_fields__}
        return cls(**fields, verdict=verdict, threshold=threshold,
                   test_file=where[0] if where else None, test_line=where[1] if where else None)

    @property
    def where(self) -> tuple[str, int] | None:
        """(file, line) of the test that measured it, when the record kept it."""
        if self.test_file is None or self.test_line is None:
            return None
        return self.test_file, self.test_line


# The JSON type of each BenchResult field; a field missing here is passed through as read.
_BENCH_KINDS: dict[str, Any] = {
    "name": str, "rate": float, "cores": float, "steady": bool, "warmup_s": float,
    "warmup_windows": int, "remeasured": int, "polluted_kept": int, "transitions": int,
    "source": str, "extra": dict, "verdict": (str, None), "test_file": (str, None),
    "test_line": (int, None), "threshold": (float, None), "memory": dict, "unit": str,
    "gpu": dict, "warmup_load": (float, None)}
_FILE_KEYS = {"rate": "steps_per_s"}  # a field whose sidecar key is older than its name
MEMORY_LIMIT = 1e18  # bytes: a larger figure in a sidecar is garbage
LEGACY_COUNTS_SOURCE = "perfgate-counts"  # its results carry their unit since it was kept


@dataclass(frozen=True)
class RunRecord:
    """One session's results plus who/where/what produced them."""

    run_id: str
    started_at: float  # epoch seconds
    commit: str  # full hash; "0"*40 outside git
    commit_date_ms: int
    branch: str | None
    dirty: bool
    machine: str
    fingerprint: str
    metadata: Mapping[str, Any]
    benchmarks: Mapping[str, BenchRecord]

    def to_json(self) -> dict[str, Any]:
        return {
            "perfgate_format": FORMAT_VERSION,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "commit": self.commit,
            "commit_date_ms": self.commit_date_ms,
            "branch": self.branch,
            "dirty": self.dirty,
            "machine": self.machine,
            "fingerprint": self.fingerprint,
            "metadata": dict(self.metadata),
            "benchmarks": {k: b.to_json() for k, b in self.benchmarks.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunRecord:
        """Read a sidecar, checking it against the schema: a ValueError names the first field
        of the wrong type (a string where a number belongs...), missing or out of range."""
        d = _obj(d, "run record", "")
        if d.get("perfgate_format") != FORMAT_VERSION:
            raise ValueError(f"unknown perfgate_format {d.get('perfgate_format')!r} "
                             f"(this version reads {FORMAT_VERSION})")
        run_id = _get(d, "run_id", str, "")
        started = _get(d, "started_at", float, "")
        if not is_time(started):
            raise ValueError(f"field 'started_at' is {started!r}, expected a time in epoch "
                             "seconds between 1970 and the year 9999")
        commit = _get(d, "commit", str, "")
        if not re.fullmatch(r"[0-9a-fA-F]{4,64}", commit):
            raise ValueError(f"field 'commit' is {_shorten(commit)}, expected a hex commit hash")
        benches: dict[str, BenchRecord] = {}
        for name, b in _get(d, "benchmarks", dict, "").items():
            bench = BenchRecord.from_json(_obj(b, f"benchmark {name!r}", ""))
            if bench.name != name:
                raise ValueError(f"benchmark {name!r}: field 'name' is {bench.name!r}, expected "
                                 "the benchmark's key")
            benches[name] = bench
        return cls(
            run_id=run_id, started_at=float(started), commit=commit,
            commit_date_ms=_get(d, "commit_date_ms", int, ""),
            branch=_get(d, "branch", (str, None), "", None), dirty=_get(d, "dirty", bool, ""),
            machine=_get(d, "machine", str, ""), fingerprint=_get(d, "fingerprint", str, ""),
            metadata=dict(_get(d, "metadata", dict, "", {})), benchmarks=benches,
        )


_REQUIRED: Any = object()
_KIND_NAMES: dict[Any, str] = {str: "a string", float: "a number", int: "an integer",
                               bool: "true or false", dict: "an object", list: "a list",
                               None: "null"}


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_kind(v: object, kind: Any) -> bool:
    if isinstance(kind, tuple):
        return any(_is_kind(v, k) for k in kind)
    if kind is None:
        return v is None
    if kind is float:
        return _is_num(v)
    if kind is int:  # 256.0 is a count written by another tool, not garbage
        return isinstance(v, (int, float)) and not isinstance(v, bool) and (
            isinstance(v, int) or (math.isfinite(v) and v.is_integer()))
    return isinstance(v, kind)


def _describe(v: object) -> str:
    name = _KIND_NAMES.get(type(v), f"a {type(v).__name__}")
    return "null" if v is None else f"{name} ({_shorten(v)})"


def _shorten(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _get(d: Mapping[str, Any], key: str, kind: Any, where: str, default: Any = _REQUIRED
         ) -> Any:
    """``d[key]`` when it has the JSON type ``kind`` (a type, None or a tuple of them)."""
    if key not in d:
        if default is _REQUIRED:
            raise ValueError(f"{where}missing key {key!r}")
        return default
    v = d[key]
    if not _is_kind(v, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        expected = " or ".join(_KIND_NAMES.get(k, str(k)) for k in kinds)
        raise ValueError(f"{where}field {key!r} is {_describe(v)}, expected {expected}")
    return int(v) if kind is int or (isinstance(kind, tuple) and int in kind and _is_num(v)) \
        else v


def _obj(v: Any, what: str, where: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ValueError(f"{where}{what} is {_describe(v)}, expected an object")
    return v
