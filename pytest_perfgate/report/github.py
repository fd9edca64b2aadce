"""GitHub Actions output for a gate: workflow-command annotations and a step-summary section.

An annotation (``::error file=F,line=N,title=T::message``) puts the verdict on the perf
test's line in the pull request's diff; the summary section heads the job's page. Both say
which of three things happened, never blurring them (docs/design.md §12): a verdict that
fails (REGRESSION, or UNSTABLE/INCONCLUSIVE under a fail policy), a result that was not
gated (NO BASELINE: not a pass), or an infrastructure error (no verdict at all).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_perfgate.core.gate import Outcome
from pytest_perfgate.core.judged import Judged

PASS, REGRESSION, USAGE, INFRA = 0, 1, 2, 3  # `perfgate check` exit statuses (docs/cli.md)


def escape_data(text: str) -> str:
    """A workflow command's message: GitHub decodes %25, %0D and %0A (actions/toolkit)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (file, title): also ':' and ',', which end a property."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, *, file: str | None = None, line: int | None = None,
               title: str | None = None) -> str:
    """``::error file=...,line=...,title=...::message``; ``level``: error, warning, notice."""
    props = [f"file={escape_property(file)}"] if file else []
    if file and line:
        props.append(f"line={int(line)}")
    if title:
        props.append(f"title={escape_property(title)}")
    return f"::{level}{' ' + ','.join(props) if props else ''}::{escape_data(message)}"


@dataclass
class GateResult:
    """What a gate step found: its exit status, why, and the verdicts it judged."""

    status: int
    judged: list[Judged] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # infrastructure errors, in words
    not_gated: list[str] = field(default_factory=list)  # benchmarks without a baseline

    @property
    def headline(self) -> str:
        failed = [j for j in self.judged if j.verdict is not None and j.verdict.fails(j.rule)]
        if self.status == REGRESSION:
            names = ", ".join(sorted({j.verdict.outcome.value for j in failed if j.verdict}))
            return f"FAILED: {len(failed)} benchmark(s) {names}"
        if self.status == INFRA:
            return "INFRASTRUCTURE ERROR: not judged (this is not a regression and not a pass)"
        if self.status == USAGE:
            return "USAGE ERROR: not judged"
        open_ = [j.name for j in self.judged if j.verdict is not None
                 and j.verdict.outcome is Outcome.INCONCLUSIVE]
        judged = len(self.judged) - len(self.not_gated) - len(open_)
        # what passed first; the benchmarks left undecided after it, never as a count of 0
        parts = ([f"{judged} of {len(self.judged)} benchmark(s) OK or better"]
                 if judged else []) + \
            ([f"{len(self.not_gated)} NOT GATED (no baseline: not a pass for those)"]
             if self.not_gated else []) + \
            ([f"{len(open_)} INCONCLUSIVE, not a failure (undecided: its reason above "
              "says what to do)"] if open_ else [])
        return "passed, nothing failed: " + "; ".join(parts)


def annotation_lines(outcome: GateResult, context: str = "") -> list[str]:
    """One ``::error`` per failing verdict at its test's file and line, a ``::warning`` per
    benchmark that passed without being gated, one ``::error`` per infrastructure problem."""
    lines = []
    where = f" ({context})" if context else ""
    for j in outcome.judged:
        v = j.verdict
        if v is None:
            continue
        if v.fails(j.rule):
            level = "error"
        elif v.outcome in (Outcome.NO_BASELINE, Outcome.INCONCLUSIVE):
            level = "warning"
        else:
            continue
        lines.append(annotation(level, f"{j.name}: {v.outcome.value}: {v.message}",
                                file=j.where[0] if j.where else None,
                                line=j.where[1] if j.where else None,
                                title=f"perfgate {v.outcome.value}{where}"))
    for text in outcome.problems:
        lines.append(annotation("error", text, title=f"perfgate infrastructure error{where}"))
    return lines


def summary(outcome: GateResult, title: str) -> str:
    """The step-summary section: headline, problems, the verdict table (report/render.py)."""
    from pytest_perfgate.report import render

    out = [f"## perfgate: {title}: {outcome.headline}", ""]
    out += [f"- **infrastructure error:** {p}" for p in outcome.problems]
    out += [f"- **not gated** (no baseline): {n}" for n in outcome.not_gated]
    if outcome.problems or outcome.not_gated:
        out.append("")
    if outcome.judged:
        table = render.markdown(outcome.judged).splitlines()
        out += table[2:] if table[:1] == ["### perfgate"] else table
    return "\n".join(out).rstrip("\n") + "\n\n"


def not_gated(judged: Sequence[Judged]) -> list[str]:
    return [j.name for j in judged
            if j.verdict is not None and j.verdict.outcome is Outcome.NO_BASELINE]
