"""The gate's settings, resolved once per session or command: every Rule is built here.

A pytest session resolves them from its :class:`~pytest_perfgate.session.options.Options`
(``Options.settings``), a command that judges recorded runs again from its arguments
(cli/_found.py, through the same ``Options``), so the threshold's default is settled in one
place (``Options.default_threshold``). :meth:`Settings.rule` builds each benchmark's
:class:`~pytest_perfgate.core.gate.Rule` from them: its wall-time verdict's, its memory
verdict's, a verdict read back from a report's. The history judge
(history/judge.py) reads which runs form a baseline from them too.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_perfgate.core.gate import Rule


@dataclass(frozen=True)
class Settings:
    """What a gate judges by, beside each benchmark's own threshold."""

    threshold: float = Rule.threshold  # settled: the user's, else the mode's default
    alpha: float = Rule.alpha
    unstable: str = Rule.unstable  # UNSTABLE verdicts: "fail" or "warn"
    inconclusive: str = Rule.inconclusive  # INCONCLUSIVE verdicts likewise
    baseline_runs: int = 5  # the newest runs that set a baseline's level
    baseline: str | None = None  # only this commit's runs form the baseline (a prefix)
    # whether this run is recorded (the NO BASELINE wording says what becomes of it); None:
    # a command judging a recorded run again
    records: bool | None = True

    def rule(self, *asked: float | None) -> Rule:
        """The rule of one verdict: the first threshold ``asked`` (a command's --threshold,
        ``measure(threshold=)``, the test's marker, a benchmark's recorded threshold, a
        memory threshold; None where not asked), else the settled one, with this gate's
        alpha and policies."""
        threshold = next((t for t in asked if t is not None), self.threshold)
        return Rule(threshold=threshold, alpha=self.alpha, unstable=self.unstable,
                    inconclusive=self.inconclusive)
