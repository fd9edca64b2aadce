"""The data one run leaves behind: plain, JSON-ready records shared by recording and gating.

A *run* is one session of the suite on one machine at one commit; it holds one
:class:`BenchResult` per benchmark. The run, not the window, is the unit the gate
replicates over (docs/design.md §1).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

FORMAT_VERSION = 1


@dataclass(frozen=True)
class PhaseSummary:
    ms_per_call: float
    share: float  # of the measured wall time
    cores: float  # CPU time / wall time inside the phase


@dataclass(frozen=True)
class BenchResult:
    """One benchmark's outcome in one run."""

    name: str
    samples: tuple[float, ...]  # per-window seconds per million env-steps (lower is better)
    steps_per_s: float  # display: median-window env-steps/s
    cores: float = 0.0
    steady: bool = True
    warmup_s: float = 0.0
    warmup_windows: int = 0
    remeasured: int = 0
    polluted_kept: int = 0
    transitions: int = 0  # env-steps per call of the step
    phases: Mapping[str, PhaseSummary] = field(default_factory=dict)
    source: str = "perfgate"  # or "pytest-benchmark"
    extra: Mapping[str, Any] = field(default_factory=dict)  # workload metadata (placement...)
    # The gate's outcome for this run ("OK", "REGRESSION"...; None: not judged). A run
    # whose benchmark failed the gate serves no baseline until accepted (docs/design.md §2).
    verdict: str | None = None

    @property
    def value(self) -> float:
        """The run's summary statistic: median of its window samples."""
        return statistics.median(self.samples)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples"] = list(self.samples)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BenchResult:
        samples = tuple(float(x) for x in d["samples"])
        if not samples or not all(math.isfinite(x) and x > 0 for x in samples):
            raise ValueError(f"benchmark {d.get('name')!r}: samples must be positive numbers")
        phases = {k: PhaseSummary(**v) for k, v in dict(d.get("phases") or {}).items()}
        known = {f for f in cls.__dataclass_fields__} - {"samples", "phases"}
        kw = {k: v for k, v in d.items() if k in known}
        return cls(samples=samples, phases=phases, **kw)


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
    benchmarks: Mapping[str, BenchResult]

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
        if d.get("perfgate_format") != FORMAT_VERSION:
            raise ValueError(f"unknown perfgate_format {d.get('perfgate_format')!r} "
                             f"(this version reads {FORMAT_VERSION})")
        return cls(
            run_id=str(d["run_id"]), started_at=float(d["started_at"]),
            commit=str(d["commit"]), commit_date_ms=int(d["commit_date_ms"]),
            branch=d.get("branch"), dirty=bool(d["dirty"]), machine=str(d["machine"]),
            fingerprint=str(d["fingerprint"]), metadata=dict(d.get("metadata") or {}),
            benchmarks={k: BenchResult.from_json(v) for k, v in dict(d["benchmarks"]).items()},
        )
