"""The report's markdown: ``report.md`` (tables, change points, the PNGs linked relatively,
for the artifact) and ``summary.md`` (the same without images, for a GitHub job summary,
which cannot show files from the job). Pure functions over :class:`Entry`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.metric import figure
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.report.changepoints import ChangePoint
from pytest_perfgate.report.plots import Band
from pytest_perfgate.report.render import worth_a_line
from pytest_perfgate.report.series import Series, cause


@dataclass(frozen=True)
class Counts:
    """The instruction-count series of a benchmark, beside its wall-time one."""

    series: Series
    current: int
    cps: tuple[ChangePoint, ...]
    png: str


@dataclass(frozen=True)
class Entry:
    """One benchmark of the reported run, with its history."""

    judged: Judged
    series: Series  # the gated series
    current: int | None  # index of the reported run in ``series``
    band: Band | None
    cps: tuple[ChangePoint, ...]
    counts: float | None  # instructions per env-step in the reported run
    png: str | None  # file name next to report.md; None: not drawn
    counts_series: Counts | None = None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def change(j: Judged) -> str:
    """'-3.1% [-5.0%, -1.2%]' (throughput, head vs baseline), '-' without a baseline."""
    v = j.verdict
    if v is None or v.ratio is None:
        return "-"
    out = f"{v.ratio - 1:+.1%}"
    if v.ci is not None:
        out += f" [{v.ci[0] - 1:+.1%}, {v.ci[1] - 1:+.1%}]"
    return out


def verdict_table(entries: Sequence[Entry]) -> list[str]:
    counts = any(e.counts is not None for e in entries)
    head = ["benchmark", "verdict", "change vs baseline [CI]", "steps/s", "baseline steps/s"]
    head += ["instructions/env-step"] if counts else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in entries:
        j, v = e.judged, e.judged.verdict
        row = [f"`{j.name}`", "SMOKE" if v is None else v.outcome.value, change(j),
               figure(j.result.rate), figure(j.baseline_rate)]
        row += [figure(e.counts)] if counts else []
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return lines


def change_points(entries: Sequence[Entry]) -> list[str]:
    out = []
    for e in entries:
        found = [(e.series, e.cps, e.current)]
        if e.counts_series is not None:
            k = e.counts_series
            found.append((k.series, k.cps, k.current))
        for s, cps, current in found:
            for c in cps:
                p = s.points[c.index]
                pct = s.display(c.after) / s.display(c.before) - 1
                here = " (starts at this run)" if c.index == current else ""
                why = cause(s, c.index)
                same = f" ({why})" if why else ""
                out.append(f"- `{s.benchmark}`: {pct:+.1%} {s.display_unit} "
                           f"({figure(s.display(c.before))} -> {figure(s.display(c.after))}) "
                           f"from commit `{p.run.commit[:10]}`, run `{p.run.run_id}`, "
                           f"{_date(p.run)}{here}{same}")
    return out or ["- none found"]


def notes(entries: Sequence[Entry]) -> list[str]:
    out = []
    for e in entries:
        v = e.judged.verdict
        if v is not None and v.message and worth_a_line(e.judged):
            out.append(f"- `{e.judged.name}`: {v.outcome.value}: {_cell(v.message)}")
        if len(e.series.points) < 4:
            out.append(f"- `{e.series.benchmark}`: {len(e.series.points)} run(s) in the "
                       "history: change points need at least 4")
    return out


def accept_line(run: RunRecord, entries: Sequence[Entry]) -> list[str]:
    """What pytest and ``perfgate check`` print under a failed run: how to accept it."""
    failed = [e.judged.name for e in entries
              if e.judged.verdict is not None and e.judged.verdict.fails(e.judged.rule)]
    if not failed:
        return []
    names = ", ".join(f"`{n}`" for n in failed)
    return [f"- this run failed the gate ({names}) and never serves as a baseline; if the "
            f"slowdown is intended, accept it: `perfgate accept {run.run_id}`"]


def _date(run: RunRecord) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(run.started_at))


def header(run: RunRecord, where: str) -> list[str]:
    dirty = " (dirty tree)" if run.dirty else ""
    return ["## perfgate report", "",
            f"Run `{run.run_id}` of {where}, commit `{run.commit[:10]}`{dirty}, "
            f"{_date(run)}.", ""]


def summary(run: RunRecord, entries: Sequence[Entry], where: str) -> str:
    """For ``cat summary.md >> "$GITHUB_STEP_SUMMARY"``: no images."""
    lines = header(run, where) + verdict_table(entries)
    extra = notes(entries) + accept_line(run, entries)
    lines += ["", *extra] if extra else []
    lines += ["", "### Change points", "", *change_points(entries), ""]
    return "\n".join(lines)


def report(run: RunRecord, entries: Sequence[Entry], where: str) -> str:
    """For the artifact: the summary, then one plot per benchmark (linked relatively)."""
    lines = [summary(run, entries, where), "### History", ""]
    for e in entries:
        if e.png is None:
            continue
        lines += [f"#### `{e.series.benchmark}`", "",
                  f"![{_cell(e.series.benchmark)}: history]({e.png})", ""]
        if e.counts_series is not None:
            lines += [f"![{_cell(e.series.benchmark)}: instruction counts]"
                      f"({e.counts_series.png})", ""]
    lines.append("Grey: each run's median (whiskers: its windows, min to max); red dot: "
                 "this run; red x: a run that failed the gate (never a baseline), green "
                 "square: one a person accepted; blue band: the gate's baseline level ± "
                 "threshold over the baseline runs only, and at this run the level it had to "
                 "stay above; orange: change points and each segment's level. The y axis "
                 "starts at 0 unless the title says it does not.")
    return "\n".join(lines) + "\n"
