"""How a counts verdict reads: the gate words its verdicts for throughput; a ``<name>.counts``
result is instructions per env-step, judged by the same gate (docs/design.md §10)."""

from __future__ import annotations

from dataclasses import replace

from pytest_perfgate.core.gate import Outcome
from pytest_perfgate.core.judged import Judged


def reword(j: Judged) -> Judged:
    """Say what a counts verdict is about: instructions, not wall time."""
    v = j.verdict
    if v is None:
        return j
    text = v.message.replace("throughput fell", "instructions per env-step grew by the "
                             "equivalent of a throughput drop of").replace(
        "throughput rose", "instructions per env-step fell: a throughput rise of").replace(
        "how much this machine's speed drifts between runs",
        "whether this workload's instruction counts vary between runs")
    if v.outcome is Outcome.INCONCLUSIVE and v.evidence is not None and not v.evidence.thin:
        text += (" For instruction counts this means the counts themselves vary between "
                 "runs: make the step deterministic (one thread, a held state, no "
                 "time-dependent work) so the threshold, not the noise, decides.")
    return replace(j, verdict=replace(v, message="instruction counts: " + text))


__all__ = ["reword"]
