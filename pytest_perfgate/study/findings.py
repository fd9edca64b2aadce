"""What a calibration study found at one setting: detection rates with their exact
intervals, one row per injected slowdown, and the report that holds them.

Plain records shared by the judging (:mod:`.analysis`), the tables (:mod:`.tables`) and
the study tools, which quote :class:`Rate` for their own trials.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_perfgate.core.gate import Rule


@dataclass(frozen=True)
class Rate:
    """k of n, with its exact (Clopper-Pearson) 95% confidence interval."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else float("nan")

    @property
    def ci(self) -> tuple[float, float]:
        if not self.n:
            return (float("nan"), float("nan"))
        from scipy.stats import binomtest  # type: ignore[import-untyped]

        ci = binomtest(self.k, self.n).proportion_ci(0.95, method="exact")
        return (float(ci.low), float(ci.high))

    def __str__(self) -> str:
        if not self.n:
            return "-"
        lo, hi = self.ci
        return f"{self.value:.0%} [{lo:.0%}-{hi:.0%}] ({self.k}/{self.n})"


@dataclass(frozen=True)
class Row:
    """One injected slowdown's figures in one mode."""

    slowdown: float
    called: Rate  # REGRESSION (or a failing UNSTABLE) verdicts
    inconclusive: Rate
    measured: tuple[float, float, float] | None  # slowdown measured: pooled, 95% CI
    unstable: int = 0  # of the called: UNSTABLE warm-ups (they fail CI by default)


@dataclass(frozen=True)
class Report:
    """Everything the study found at one setting (mode x estimator x turns x threshold)."""

    mode: str  # "A/B" or "history"
    estimator: str
    turns: int
    rule: Rule
    rows: tuple[Row, ...]  # first row: slowdown 0 (A/A)
    seconds: float  # measurement seconds per side per verdict (warm-up included)
    pairs: float = 0.0  # sequential: turn pairs measured per verdict, on average
    wall: float = 0.0  # sequential: wall seconds per verdict (both sides, warm-up included)
    left_out: int = 0  # sequential: trials that stopped sooner live than this design

    def row(self, slowdown: float) -> Row | None:
        return next((r for r in self.rows if abs(r.slowdown - slowdown) < 1e-9), None)

    @property
    def false_alarms(self) -> Rate:
        r = self.row(0.0)
        return r.called if r else Rate(0, 0)

    def smallest_detected(self, power: float = 0.95, max_false: float = 0.01) -> float | None:
        """The smallest injected slowdown caught >= power, if false alarms are <= max_false."""
        fa = self.false_alarms
        if not fa.n or fa.value > max_false:
            return None
        hits = [r.slowdown for r in self.rows if r.slowdown > 0 and r.called.n
                and r.called.value >= power]
        return min(hits) if hits else None
