"""The memory gate: a run's peak resident memory against its baseline runs' (opt-in).

Asked for per test by ``@pytest.mark.perfgate(memory_threshold=0.10)``. Peak memory of a
deterministic workload barely moves between runs, unlike its speed (docs/design.md §1), so
the rule is a plain ratio: REGRESSION when this run's peak exceeds the median of the
baseline runs' peaks by more than the threshold, IMPROVEMENT when it is below it by as
much, else OK; NO BASELINE when no baseline run recorded memory (never a pass in
disguise). The verdict is delivered as its own verdict ``<benchmark>.rss`` beside the
wall-time one, on the same measurement, with the figure it judged (:class:`MemoryFigure`);
the figures themselves are recorded with that measurement (``BenchResult.memory``) whether
or not they are gated.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytest_perfgate.core.gate import Outcome, Rule, Verdict
from pytest_perfgate.core.results import BenchRecord, BenchResult

MEMORY_SOURCE = "perfgate-memory"  # the source of a memory verdict's entry in a JSON report
SUFFIX = ".rss"  # as the asv series of the figure: <benchmark>.rss


@dataclass(frozen=True)
class MemoryFigure:
    """What a memory verdict is about: one peak of its measurement, the series
    ``<benchmark><suffix>``, and the figures the report shows beside it."""

    suffix: str  # SUFFIX (host RSS) or GPU_SUFFIX
    peak: float | None  # bytes; None: the workload's memory was not sampled
    figures: Mapping[str, int] = field(default_factory=dict)  # what memory_line shows


def mib(n: float) -> str:
    """Bytes as the report shows them."""
    return f"{n / 2**20:.0f} MiB" if n >= 10 * 2**20 else f"{n / 2**20:.1f} MiB"


def memory_line(memory: Mapping[str, int]) -> str | None:
    """The report's one line on a result's memory, or None when none was sampled."""
    peak = memory.get("peak_rss")
    gpu = gpu_memory_line(memory)
    if not peak:
        return gpu
    parts = [f"peak memory {mib(peak)}"]
    n = memory.get("processes")
    if n:
        parts.append(f"over {n} process{'es' if n != 1 else ''}")
    shared = [f"{k} {mib(memory[k])}" for k in ("uss", "pss") if memory.get(k)]
    if shared:
        parts.append(f"(at the end: {', '.join(shared)})")
    return " ".join(parts) + (f"; {gpu}" if gpu else "")


GPU_WORDS = (("gpu_peak_allocated", "allocated"), ("gpu_peak_reserved", "reserved"),
             ("gpu_used", "device used"))


def gpu_memory_line(memory: Mapping[str, int]) -> str | None:
    """GPU memory in words: torch's peak allocated and reserved, NVML's device memory used
    (the whole device's, other processes' included); None when none was read."""
    parts = [f"{word} {mib(memory[k])}" for k, word in GPU_WORDS if k in memory]
    return f"GPU peak memory: {', '.join(parts)}" if parts else None


def gpu_peak(memory: Mapping[str, int]) -> int | None:
    """The figure the GPU memory gate compares: torch's peak reserved (what the process
    holds on the device), else NVML's device memory used."""
    for key in ("gpu_peak_reserved", "gpu_used"):
        if memory.get(key):
            return int(memory[key])
    return None


GPU_SUFFIX = ".gpu_mem"  # the asv series and the verdict's name: <benchmark>.gpu_mem


def gpu_figure(result: BenchResult) -> MemoryFigure | None:
    """The GPU peak a memory verdict judges (None when no GPU memory was read)."""
    peak = gpu_peak(result.memory)
    if peak is None:
        return None
    return MemoryFigure(GPU_SUFFIX, float(peak),
                        {k: v for k, v in result.memory.items() if k.startswith("gpu_")})


def host_figure(result: BenchResult) -> MemoryFigure | None:
    """The host peak a memory verdict judges (None when the run sampled no memory)."""
    peak = result.memory.get("peak_rss")
    return MemoryFigure(SUFFIX, float(peak), dict(result.memory)) if peak else None


def not_sampled() -> tuple[MemoryFigure, Verdict]:
    """The memory verdict of a workload whose memory was not sampled (a ring pair): named,
    never a silent pass."""
    return MemoryFigure(SUFFIX, None), Verdict(
        Outcome.NO_BASELINE, "this workload's memory was not sampled (only perfgate.measure "
        "steps and worker groups report it), so memory_threshold= cannot gate it")


def as_record(name: str, figure: MemoryFigure, transitions: int) -> BenchResult:
    """A memory verdict's entry in a JSON report, as the report has always held it: the
    peak as its one sample (1.0 when none was sampled), rate 0, :data:`MEMORY_SOURCE`."""
    return BenchResult(name=name, samples=(figure.peak or 1.0,), rate=0.0,
                       transitions=transitions, source=MEMORY_SOURCE,
                       memory=dict(figure.figures))


def from_record(record: BenchRecord) -> tuple[str, MemoryFigure] | None:
    """A JSON report's memory entry read back: its benchmark's name and the figure judged;
    None for any other entry."""
    if record.source != MEMORY_SOURCE:
        return None
    suffix = GPU_SUFFIX if record.name.endswith(GPU_SUFFIX) else SUFFIX
    peak = record.samples[0] if record.memory else None
    return record.name.removesuffix(suffix), MemoryFigure(suffix, peak, dict(record.memory))


def decide_memory(peak: float, baseline: Sequence[float], rule: Rule,
                  what: str = "peak memory") -> Verdict:
    """The verdict on ``peak`` bytes against the baseline runs' peaks at ``rule.threshold``
    (``what``: "GPU peak memory" for the GPU gate)."""
    base = [b for b in baseline if b > 0]
    t = rule.threshold
    if not base:
        return Verdict(Outcome.NO_BASELINE,
                       f"no baseline run recorded {what} (runs before this version did "
                       "not); this run's is recorded and becomes the baseline of later commits")
    ref = statistics.median(base)
    change = peak / ref - 1.0
    figures = (f"{mib(peak)} now vs {mib(ref)}, the median of {len(base)} baseline run(s)' "
               f"peaks")
    if change > t:
        return Verdict(Outcome.REGRESSION, f"{what} rose {change:.1%} ({figures}), more "
                       f"than the {t:.0%} memory threshold", ratio=ref / peak)
    if change < -t:
        return Verdict(Outcome.IMPROVEMENT, f"{what} fell {-change:.1%} ({figures})",
                       ratio=ref / peak)
    return Verdict(Outcome.OK, f"{what} within {t:.0%} ({change:+.1%}: {figures})",
                   ratio=ref / peak)
