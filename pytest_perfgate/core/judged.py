"""A benchmark result with its verdict: what every mode hands the session and the report.

Kept in the core, below the session and the modes, so that rendering (report/), the modes
(modes/) and the session share one data type without importing each other (docs/design.md
§8). :func:`summarize` turns a :class:`Measurement` into the recorded
:class:`BenchResult`; :func:`failing` picks the verdicts that fail a test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_perfgate.core.gate import Rule, Verdict
from pytest_perfgate.core.measure import Measurement
from pytest_perfgate.core.memory import MemoryFigure
from pytest_perfgate.core.results import BenchResult, PhaseSummary


@dataclass
class Judged:
    """A benchmark result with its verdict and what the verdict was based on.

    ``result`` is only the measurement; what was decided about it, and on what evidence, is
    here: the pairs of side processes that measured it, whether its baseline commit was
    measured again, the memory figure a memory verdict judged."""

    result: BenchResult  # the measurement (a memory verdict's too: its peak was read there)
    verdict: Verdict | None  # None in smoke mode (and on an A/B side, which only serves)
    rule: Rule
    test_id: str
    baseline_commits: list[str] = field(default_factory=list)
    baseline_rate: float | None = None  # the baseline's level, as BenchResult.rate
    baseline_phases: dict[str, float] = field(default_factory=dict)  # median ms per call
    where: tuple[str, int] | None = None  # the test's file and line, for CI annotations
    # what differs in the environment since the baseline runs ({name, before, after}),
    # history/environment.py; empty when nothing did or nothing is known
    environment_changes: tuple[Mapping[str, str | None], ...] = ()
    # each pair of side processes' own verdict, in order, when fresh pairs measured a
    # change one pair called (modes/ab/confirm.py); () for one pair
    pairs: tuple[Verdict, ...] = ()
    # the verdict is a re-measurement's: the baseline commit measured again, in A/B turns
    # with this tree, because the record could not decide (modes/remeasure.py)
    remeasured: bool = False
    memory: MemoryFigure | None = None  # a memory verdict: the figure it judged

    @property
    def name(self) -> str:
        """The benchmark the verdict is about: the measurement's, or the series of the
        memory figure a memory verdict judged (``<benchmark>.rss``)."""
        return self.result.name + (self.memory.suffix if self.memory is not None else "")


def summarize(name: str, m: Measurement, transitions: int,
              extra: Mapping[str, Any] | None = None, unit: str = "env-steps/s"
              ) -> BenchResult:
    """One benchmark's recorded result from its measured windows."""
    share = m.phase_share()
    phases = {n: PhaseSummary(st.ms_per_call, share.get(n, 0.0), st.cores, st.gpu_ms_per_call)
              for n, st in m.phases.items()}
    return BenchResult(name=name, samples=tuple(m.samples), rate=m.steps_per_s,
                       cores=m.cores, steady=m.steady, warmup_s=m.warmup_s,
                       warmup_windows=m.warmup_windows, remeasured=m.remeasured,
                       polluted_kept=m.polluted_kept, transitions=transitions, phases=phases,
                       extra=dict(extra or {}), memory=m.memory, gpu=m.gpu,
                       unit=unit, warmup_load=m.warmup_load)


def failing(judged: Sequence[Judged]) -> list[Judged]:
    """The verdicts that fail their test under their rule (smoke results never do)."""
    return [j for j in judged if j.verdict is not None and j.verdict.fails(j.rule)]
