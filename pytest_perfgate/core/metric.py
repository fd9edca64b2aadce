"""What a benchmark's number is: its unit, which way is better, and how verdicts word it.

The gate works on one scale for every metric: a sample is a cost per unit of work (seconds
per million env-steps, per million calls, or instructions per env-step), lower is better,
and the verdict's ratio is base cost / head cost. A :class:`Metric` says how a user reads
that: a rate (env-steps/s, calls/s, a unit the user names), higher is better, or a cost
read as such (instructions/env-step), lower is better; and the words its verdicts use. A
result names its metric by its unit (``BenchResult.unit``); :func:`metric_for` maps it back,
so the gate, the report and the asv export take one path for every metric
(docs/pytest-benchmark.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

RATE_SCALE = 1e6  # a rate's sample is seconds per million units


def figure(x: float | None, more: int = 0) -> str:
    """``x`` to 3 (+ ``more``) significant digits, trailing zeros kept, with a k/M/G suffix:
    '653k', '16.0k', '2.35M', '42.0', '0.0123'; '-' for None or a value that is not finite.
    The one way a figure is shown: the status line, the verdict table, the report, its
    plot's axes and the history view agree."""
    if x is None or not math.isfinite(x):
        return "-"
    digits = 3 + more
    if abs(x) < 1:
        return f"{x:.{digits}g}"
    r = abs(float(f"{x:.{digits}g}"))  # 999.96 rounds to 1000: the suffix follows
    div, suffix = next(d for d in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")) if r >= d[0])
    whole = int(math.log10(r / div)) + 1  # digits before the point
    return f"{x / div:.{max(0, digits - whole)}f}{suffix}"


@dataclass(frozen=True)
class Metric:
    """A metric's unit, direction and wording (the gate's sentences are built from these)."""

    unit: str  # as shown after a number: "env-steps/s", "calls/s", "instructions/env-step"
    higher_is_better: bool = True  # a rate; False: the sample itself is read (a cost)
    subject: str = ""  # prefixes every verdict message ("instruction counts: ")
    fell: str = "throughput fell"  # the head is worse by {drop}
    rose: str = "throughput rose"  # the head is better by {drop}
    drift: str = "how much this machine's speed drifts between runs"
    # ends a history INCONCLUSIVE whose cause is the run-to-run spread: the one thing to do
    noisy: str = ("use the interleaved A/B mode (--perfgate-ab BASE_REV) for a paired "
                  "comparison, or raise the threshold.")
    # how the result was measured, formatted with the result's fields (report/render.py)
    method: str = "warm-up {warmup_s:.1f}s, {windows} windows, cores used {cores:.2f}"
    asv_suffix: str = ".track_s_per_step"  # the gated asv series: name + suffix
    asv_unit: str = "seconds"  # its unit in benchmarks.json
    asv_scale: float = 1 / RATE_SCALE  # sample -> asv value (seconds per unit)

    def shown(self, rate: float | None) -> float | None:
        """The number a user reads, from a result's ``rate`` (RATE_SCALE / sample)."""
        if rate is None or rate <= 0:
            return None
        return rate if self.higher_is_better else RATE_SCALE / rate

    def say(self, message: str) -> str:
        """A verdict message about this metric."""
        return self.subject + message


ENV_STEPS = Metric("env-steps/s")
CALLS = Metric(
    "calls/s",
    noisy=("a cheap call's speed drifts between runs: compare in "
           "one run with the interleaved A/B mode (--perfgate-ab BASE_REV), or gate its "
           "instruction counts, which do not drift with the machine (--perfgate-counts), "
           "or raise the threshold."))
COUNTS_PREFIX = "instructions/"


def counts_metric(per: str) -> Metric:
    """Instructions per unit of work (``per``: "env-step", "call"), a cost: lower is better."""
    return Metric(
        f"{COUNTS_PREFIX}{per}", higher_is_better=False, subject="instruction counts: ",
        fell=f"instructions per {per} grew by the equivalent of a throughput drop of",
        rose=f"instructions per {per} fell: a throughput rise of",
        drift="whether this workload's instruction counts vary between runs",
        noisy=("the counts themselves vary between runs: "
               "make the step deterministic (one thread, a held state, no time-dependent "
               "work) so the threshold, not the noise, decides."),
        method="counted under callgrind, one call of the step after warm-up",
        asv_suffix="", asv_unit=f"{COUNTS_PREFIX}{per}", asv_scale=1.0)


INSTRUCTIONS = counts_metric("env-step")
_KNOWN = {m.unit: m for m in (ENV_STEPS, CALLS, INSTRUCTIONS)}
_UNIT = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


def counted_per(rate: str) -> str:
    """The unit a counts result is per, from its wall-time result's rate unit:
    "env-steps/s" -> "env-step", "calls/s" -> "call", "rows/s" -> "row"."""
    work = rate.removesuffix("/s")
    return work[:-1] if len(work) > 1 and work.endswith("s") else work
UNIT_RULE = "1-32 letters, digits, '_' or '-', starting with a letter"


def metric_for(unit: str) -> Metric:
    """The metric a result's unit names; any other ``<unit>/s`` is a rate worded like
    env-steps/s."""
    known = _KNOWN.get(unit)
    if known is not None:
        return known
    if unit.startswith(COUNTS_PREFIX):
        return counts_metric(unit.removeprefix(COUNTS_PREFIX))
    return Metric(unit)


def is_unit(text: object) -> bool:
    """A unit a result may carry: a built-in metric's or a user's ``<unit>/s``."""
    if not isinstance(text, str):
        return False
    if text.startswith(COUNTS_PREFIX):
        return _UNIT.fullmatch(text.removeprefix(COUNTS_PREFIX)) is not None
    return text in _KNOWN or (text.endswith("/s") and _UNIT.fullmatch(text[:-2]) is not None)


def rate_unit(unit: object, where: str, example: str) -> str:
    """A user's unit of work ("rows", "frames") as a rate unit ("rows/s"); ValueError names
    the value and the fix."""
    if not isinstance(unit, str) or not _UNIT.fullmatch(unit):
        raise ValueError(f"{where}{unit!r} is not a unit of work: use {UNIT_RULE}, the "
                         f"plural of what one call does, e.g. {example}")
    return f"{unit}/s"
