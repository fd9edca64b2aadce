"""``perfgate history BENCH``: one benchmark's recorded series, run by run, with change points.

Reads the run sidecars of one machine (the source of truth, docs/design.md §6) and prints a
row per history-mode run, oldest first: commit, date, run id, the run median, the spread of
its samples and the verdict the gate gave it; a row opens each change point, naming the
commit where the new level began (ruptures' PELT, docs/design.md §11), and under each the
``perfgate bisect`` command that finds the commit (docs/bisect.md). Exit 0, 2 usage
error, 3 infrastructure error (no or unreadable history, change-point library missing).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._found import Where, add_history_arguments
from pytest_perfgate.cli._out import Reply, UsageError, add_json_argument
from pytest_perfgate.core.metric import figure
from pytest_perfgate.report.series import GATED, MachineHistory, Series

if TYPE_CHECKING:
    from pytest_perfgate.core.results import RunRecord

PROG = "perfgate history"


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))


def table(s: Series, marks: dict[int, str]) -> Iterator[str]:
    """The rows of ``s``; ``marks[i]`` is printed above row i (a change point)."""
    head = ["commit", "date (UTC)", "run id", s.display_unit, s.unit, "spread", "verdict"]
    rows = []
    for p in s.points:
        r = p.run
        rows.append([r.commit[:10] + ("+" if r.dirty else ""), when(r.started_at), r.run_id,
                     figure(s.display(p.value), 1) if s.kind == GATED else "", figure(p.value, 1),
                     "-" if p.spread is None else f"{p.spread:.0%}", p.verdict or "-"])
    if s.kind != GATED:  # no second unit: drop the display column
        head, rows = head[:3] + head[4:], [r[:3] + r[4:] for r in rows]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    yield "   " + "  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()
    for i, row in enumerate(rows):
        if i in marks:
            yield f">> {marks[i]}"
        yield "   " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()


MAX_LISTED = 20  # benchmark names listed when BENCH is missing


class HistoryCommand(Command):
    name = "history"
    help = "one benchmark's recorded series run by run, with its change points"
    description = ("Print the series of benchmark BENCH (its exact name or an unambiguous "
                   "part of it) on one machine, one row per history-mode run, oldest first: "
                   "commit, date, run id, run median, spread of the run's samples, the "
                   "verdict it got. Change points (ruptures' PELT on the log run medians) "
                   "are marked with the commit where each new level began, each followed by "
                   "the perfgate bisect command that finds the commit. Exit 0; 2 usage "
                   "error; 3 infrastructure error (no or unreadable history).")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("benchmark", metavar="BENCH", nargs="?",
                        help="benchmark name, or a part of it that names one benchmark "
                        "(without it: the names recorded)")
        add_history_arguments(ap)
        ap.add_argument("--series", default=GATED, metavar="SERIES",
                        help="gated (run medians of the gated wall-time samples, default), "
                        "counts (instructions per env-step, --perfgate-counts), "
                        "phase.NAME (one phase's ms per call), counts.est_cycles (estimated "
                        "cycles per env-step) or counts.phase.NAME (one phase's "
                        "instructions per env-step)")
        add_json_argument(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        reply = Reply(PROG, args.json)
        return reply.emit(lambda: run(args.benchmark, where=Where.from_args(args),
                                      series=args.series, reply=reply))


def run(benchmark: str | None, *, where: Where | None = None, series: str = GATED,
        reply: Reply | None = None) -> int:
    """``perfgate history``: the exit status; ``reply.body`` gets the --json fields."""
    from pytest_perfgate.cli._found import no_history_run, read_history, warned
    from pytest_perfgate.report import changepoints
    from pytest_perfgate.report.series import (
        SeriesError,
        benchmark_names,
        parse_kind,
        resolve_benchmark,
    )
    from pytest_perfgate.report.series import series as series_of

    reply = reply or Reply(PROG)
    try:
        kind = parse_kind(series)
    except ValueError as e:
        raise UsageError(f"--series: {e}") from None
    found = read_history(where or Where(), reply, history_only=True)
    if isinstance(found, int):
        return found
    place = f"machine {found.machine!r} in {found.results_dir}"
    names = benchmark_names(found.runs)
    if not names:
        return reply.infra(no_history_run(place, found.skipped))
    if benchmark is None:
        shown = ", ".join(names[:MAX_LISTED]) + (
            f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")
        raise UsageError(f"name the benchmark to show (BENCH, or a part of its name): "
                         f"{place} has {shown}")
    try:
        bench = resolve_benchmark(benchmark, names)
        s = warned(reply, lambda: series_of(found.runs, bench, kind))
    except SeriesError as e:
        raise UsageError(f"{e} ({place})") from None
    try:
        cps = changepoints.detect(s.values)
    except changepoints.MissingLibrary as e:
        return reply.infra(str(e))
    noise = warned(reply, lambda: gate_noise(found, s, Path.cwd()))
    events = warned(reply, lambda: context_events(s, found.results_dir, found.machine))
    for line in render(s, cps, place, noise, events):
        print(line)
    reply.body = series_json(s, cps, found.machine, str(found.results_dir), noise, events)
    return 0


def context_events(s: Series, results_dir: Path, machine: str) -> dict[int, str]:
    """What changed at each run besides the code, by point index: the environment since the
    run before (a dependency bump), a new baseline a person started (perfgate rebaseline)."""
    from pytest_perfgate.history import environment
    from pytest_perfgate.history.decisions import load_decisions

    out: dict[int, list[str]] = {}
    for i in range(1, len(s.points)):
        found = environment.changes(environment.of_run(s.points[i - 1].run.metadata),
                                    environment.of_run(s.points[i].run.metadata))
        if found:
            out.setdefault(i, []).append(f"environment: {environment.describe(found)}")
    for mark in load_decisions(results_dir, machine).rebaselines:
        at = next((i for i, p in enumerate(s.points) if p.run.started_at >= mark.at), None)
        if at is not None:
            out.setdefault(at, []).append(f"new baseline from run {mark.run_id} "
                                          f"(perfgate rebaseline: {mark.reason})")
    return {i: "; ".join(words) for i, words in out.items()}


def series_json(s: Series, cps: list[Any], machine: str, results_dir: str,
                noise: float | None = None, events: dict[int, str] | None = None
                ) -> dict[str, Any]:
    """The --json document of ``perfgate history`` (schema: docs/cli.md)."""
    from pytest_perfgate.cli._out import number as num
    from pytest_perfgate.report.changepoints import MIN_POINTS

    enough = len(s.points) >= MIN_POINTS
    return {
        "benchmark": s.benchmark, "series": s.kind, "unit": s.unit,
        "display_unit": s.display_unit, "machine": machine, "results_dir": results_dir,
        "points": [{"run_id": p.run.run_id, "commit": p.run.commit, "dirty": p.run.dirty,
                    "started_at": num(p.run.started_at), "value": num(p.value),
                    "display": num(s.display(p.value)), "spread": p.spread,
                    "verdict": p.verdict} for p in s.points],
        "change_points": [{"index": cp.index, "commit": s.points[cp.index].run.commit,
                           "run_id": s.points[cp.index].run.run_id,
                           "before": num(cp.before), "after": num(cp.after),
                           "display_change": num(s.display(cp.after) / s.display(cp.before)
                                                 - 1),
                           "bisect": bisect_command(s, cp.index,
                                                    cps[k - 1].index if k else 0)}
                          for k, cp in enumerate(cps)],
        "noise": num(noise if noise is not None else gate_spread(s.values)[0]) if enough
        else None,
        "events": [{"index": i, "run_id": s.points[i].run.run_id, "what": text}
                   for i, text in sorted((events or {}).items())],
    }


def describe_change(s: Series, cp: Any) -> str:
    """'-31% env-steps/s (3.75k -> 2.59k), began at commit abc1234567 (run ...)'."""
    from pytest_perfgate.report.series import cause

    p = s.points[cp.index]
    a, b = s.display(cp.before), s.display(cp.after)
    why = cause(s, cp.index)
    return (f"change point: {b / a - 1:+.1%} {s.display_unit} ({figure(a, 1)} -> {figure(b, 1)}), "
            f"began at commit {p.run.commit[:10]} (run {p.run.run_id})"
            + (f"; {why}" if why else ""))


_COMMIT = re.compile(r"[0-9a-f]{7,64}")
# derive_name's marks of a name that is not the test's own: a parameter ('_256_') or a hash
_NOT_A_TEST_NAME = re.compile(r"(_|-[0-9a-f]{6})$")


Ancestry = Callable[[str, str], "bool | None"]  # is a an ancestor of b? None: cannot tell


def git_ancestry(cwd: Path) -> Ancestry:
    """Ancestry as the git checkout at ``cwd`` knows it (None for a commit it does not
    know: the history was recorded elsewhere)."""
    from pytest_perfgate.history.vcs import ancestors_filter, resolve_commit

    def known(c: str) -> bool:
        return resolve_commit(cwd, c) is not None

    def ancestor(a: str, b: str) -> bool | None:
        if not (known(a) and known(b)):
            return None
        return a in ancestors_filter(cwd, b, [a])

    return ancestor


def _usable(r: RunRecord) -> bool:
    return not r.dirty and bool(_COMMIT.fullmatch(r.commit)) and set(r.commit) != {"0"}


def bisect_range(s: Series, index: int, start: int, ancestor: Ancestry
                 ) -> tuple[RunRecord, RunRecord] | str | None:
    """GOOD and BAD for the change point at ``index``: its first run, and the newest run of
    the old level (from ``start``) whose commit is an ancestor of it, so that ``perfgate
    bisect`` accepts the range (runs of several branches lie side by side in time).
    A reason instead when git here cannot tell or no such run exists; None when there is
    no commit range at all (the same commit: the machine moved; dirty; outside git)."""
    if index < 1:
        return None
    after = s.points[index].run
    before = s.points[index - 1].run
    if not (_usable(after) and _usable(before)) or before.commit == after.commit:
        return None
    for p in reversed(s.points[start:index]):
        r = p.run
        if not _usable(r) or r.commit == after.commit:
            continue
        is_anc = ancestor(r.commit, after.commit)
        if is_anc is None:
            return (f"git here does not know commit {r.commit[:10]} or {after.commit[:10]}: "
                    "run perfgate history inside the repository the runs measured for the "
                    "bisect command")
        if is_anc:
            return r, after
    return (f"no run of the old level measured an ancestor of {after.commit[:10]} (the runs "
            "are of other branches): bisect from a commit of its own history")


def bisect_command(s: Series, index: int, start: int = 0, ancestor: Ancestry | None = None,
                   here: Path | None = None) -> str | None:
    """The ``perfgate bisect`` command for the change point at ``index`` (docs/bisect.md),
    to run in ``here`` (the test's file relative to it), or None (:func:`bisect_range`)."""
    from pytest_perfgate.history.vcs import toplevel
    from pytest_perfgate.report.series import COUNTS_SUFFIX

    here = here or Path.cwd()
    got = bisect_range(s, index, start, ancestor or git_ancestry(here))
    if not isinstance(got, tuple):
        return None
    before, after = got
    args = [before.commit[:12], after.commit[:12]]
    test_file = next((b.test_file for r in (after, before)
                      for b in (r.benchmarks.get(s.benchmark),
                                r.benchmarks.get(s.benchmark + COUNTS_SUFFIX))
                      if b is not None and b.test_file), None)
    if test_file:
        top = toplevel(here)  # the file is recorded relative to its checkout's top
        args.append(os.path.relpath(top / test_file, here) if top else test_file)
    if (last := _test_name(s.benchmark, test_file)) is not None:
        args += ["-k", last]
    return "perfgate bisect " + shlex.join(args)


def _test_name(benchmark: str, test_file: str | None) -> str | None:
    """The last part of ``benchmark`` when ``-k`` would select its test by it: not a
    parameter or hash (derive_name's), and, when the test's file is known, a name derived
    from that file's path (a name given to ``measure(name=...)`` is not the test's)."""
    module, _, last = benchmark.rpartition(".")
    if not last or _NOT_A_TEST_NAME.search(last):
        return None
    if test_file:
        path = test_file.removesuffix(".py").replace("/", ".")
        if not module or not (path == module or path.endswith("." + module)):
            return None
    return last


def gate_spread(values: Sequence[float]) -> tuple[float, int]:
    """The standard deviation of the log run medians of the newest SPREAD_RUNS runs, and
    how many: the figure shown where the gate has no judgement of the newest run to read."""
    from pytest_perfgate.history.judge import SPREAD_RUNS

    logs = [math.log(v) for v in values[-SPREAD_RUNS:] if v > 0 and math.isfinite(v)]
    return (statistics.stdev(logs) if len(logs) >= 2 else 0.0), len(logs)


def gate_noise(found: MachineHistory, s: Series, repo: Path) -> float | None:
    """The run-to-run spread the history gate uses for the series' newest run: that run
    judged again as ``perfgate check`` judges it (its baseline, spoiled runs left out, the
    noise inside runs as a floor). None for a series the gate does not judge, or a run
    with no baseline to judge it by."""
    from pytest_perfgate.history.context import HistoryContext
    from pytest_perfgate.history.judge import HistoryJudge
    from pytest_perfgate.session.options import Options

    if s.kind != GATED or not s.points:
        return None
    run = s.points[-1].run
    result = run.benchmarks.get(s.benchmark)
    if result is None:
        return None
    ctx = HistoryContext.for_run(found.results_dir, run, repo)
    return HistoryJudge(lambda: ctx, Options().settings(rejudging=True)).noise(result)


def render(s: Series, cps: list[Any], where: str, noise: float | None = None,
           events: dict[int, str] | None = None) -> list[str]:
    """The whole output: a header, the table (``events``: what changed besides the code,
    above the run it came with), the change points and what can be seen."""
    from pytest_perfgate.report.changepoints import MIN_POINTS

    n = len(s.points)
    out = [f"perfgate history: {s.benchmark}, {s.kind} series, {n} run(s) of {where}"]
    marks = dict(events or {})
    for cp in cps:
        marks[cp.index] = "; ".join(filter(None, (describe_change(s, cp),
                                                  marks.get(cp.index))))
    out += list(table(s, marks))
    if any(p.run.dirty for p in s.points):
        out.append("(+: measured on a checkout with uncommitted changes)")
    if n < MIN_POINTS:
        out.append(f"{n} run(s): change points need at least {MIN_POINTS} (two on each side "
                   "of a step)")
        return out
    if noise is not None:
        out.append(f"spread: {noise:.2%} run to run (the gate's, as it judges the newest run: "
                   f"its baseline's runs, spoiled ones left out); {len(cps)} change point(s)")
    else:
        spread, k = gate_spread(s.values)
        out.append(f"spread: {spread:.2%} run to run (the standard deviation of the log run "
                   f"medians of the newest {k} runs; the gate has no baseline for the newest "
                   f"run); {len(cps)} change point(s)")
    ancestor = git_ancestry(Path.cwd())
    for k, cp in enumerate(cps):
        out.append(f"  {describe_change(s, cp)}")
        start = cps[k - 1].index if k else 0
        got = bisect_range(s, cp.index, start, ancestor)
        if isinstance(got, tuple):
            out.append(f"    find the commit: {bisect_command(s, cp.index, start, ancestor)}")
        elif got is not None:
            out.append(f"    (no bisect command: {got})")
    return out
