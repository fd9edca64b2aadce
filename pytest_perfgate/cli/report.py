"""``perfgate report --out DIR [--run RUN_ID]``: a run's verdicts and every benchmark's history.

Writes ``DIR/report.md`` (verdict table, change points, one PNG per benchmark linked
relatively: upload DIR as an artifact) and ``DIR/summary.md`` (the same without images:
``cat DIR/summary.md >> "$GITHUB_STEP_SUMMARY"``). The run (the machine's newest history-mode
run, or ``--run``) is judged exactly as ``perfgate check`` judges it; the band drawn is that
verdict's baseline level ± threshold. Exit 0 (whatever the verdicts: gating is ``check``'s
job), 2 usage error, 3 infrastructure error (no or unreadable history, a library missing,
a file that could not be written).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._found import Judging, Where, add_rule_arguments
from pytest_perfgate.cli._out import Reply, UsageError, add_json_argument
from pytest_perfgate.cli.common_args import folder_problem
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.report.series import COUNTS_SUFFIX, MachineHistory, Series, hidden_message

REPORT = "report.md"
SUMMARY = "summary.md"
PROG = "perfgate report"


def png_name(bench: str, taken: set[str]) -> str:
    """A file name for ``bench``'s plot: its printable characters, unique in the folder."""
    import hashlib

    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in bench).strip("._")[:80]
    name = f"{stem or 'benchmark'}.png"
    if name.lower() in taken:
        name = f"{stem}-{hashlib.sha1(bench.encode()).hexdigest()[:6]}.png"
    taken.add(name.lower())
    return name


def pick(run_id: str | None, h: MachineHistory) -> RunRecord:
    """The newest run, the run with id ``--run``, or the newest run of that commit prefix."""
    if run_id is None:
        return max(h.runs, key=lambda r: r.started_at)
    if not run_id.strip():
        raise UsageError("--run is empty: give a run id printed as 'recorded run RUN_ID' or "
                         "a commit prefix")
    found = [r for r in h.runs if r.run_id == run_id] or \
        [r for r in h.runs if r.commit.startswith(run_id.lower())]
    if not found:
        newest = ", ".join(r.run_id for r in sorted(h.runs, key=lambda r: -r.started_at)[:5])
        raise UsageError(f"--run {run_id!r}: no history-mode run of machine {h.machine!r} "
                         f"has that id or commit; newest runs: {newest}")
    commits = sorted({r.commit for r in found})
    if len(commits) > 1:
        raise UsageError(f"--run {run_id!r} matches several recorded commits ("
                         f"{', '.join(c[:12] for c in commits[:5])}): give more digits")
    return max(found, key=lambda r: r.started_at)


def band_of(j: Judged, s: Series, current: int | None) -> Any:
    """The gate's baseline as drawn: level ± threshold over the runs it used."""
    from pytest_perfgate.report.plots import Band

    if j.baseline_rate is None or not j.baseline_commits:
        return None
    end = current if current is not None else len(s.points)
    used = [i for i in range(end) if s.points[i].run.commit in set(j.baseline_commits)]
    used = used[-len(j.baseline_commits):]
    if not used:
        return None
    return Band(j.baseline_rate, j.rule.threshold, used[0], used[-1], tuple(used))


def entries(h: MachineHistory, run: RunRecord, judged: list[Judged], out: Path) -> list[Any]:
    """One :class:`~pytest_perfgate.report.markdown.Entry` per benchmark, plots drawn."""
    from pytest_perfgate.history.asv import COUNTS_SOURCE
    from pytest_perfgate.history.decisions import load_decisions
    from pytest_perfgate.report import changepoints, plots
    from pytest_perfgate.report.markdown import Counts, Entry
    from pytest_perfgate.report.series import COUNTS, series

    made, taken = [], set[str]()
    accepted = load_decisions(h.results_dir, h.machine).accepted
    for j in judged:
        name = j.result.name
        if j.result.source == COUNTS_SOURCE:
            continue  # a counts result: a column of its benchmark's row
        s = series(h.runs, name)
        current = next((i for i, p in enumerate(s.points) if p.run.run_id == run.run_id), None)
        band = band_of(j, s, current)
        cps = tuple(changepoints.detect(s.values))
        png = png_name(name, taken)
        verdict = "SMOKE" if j.verdict is None else j.verdict.outcome.value
        plots.plot(s, out / png, current, band, cps,
                   f"{name}: {verdict}, run {run.run_id} ({run.commit[:7]})", accepted)
        c = run.benchmarks.get(name + COUNTS_SUFFIX)
        counts: Any = None
        if c is not None:  # instructions per env-step: where small steps show (§11)
            cs = series(h.runs, name, COUNTS)
            now = next(i for i, p in enumerate(cs.points) if p.run.run_id == run.run_id)
            ccps = tuple(changepoints.detect(cs.values))
            cpng = png_name(f"{name}-counts", taken)
            plots.plot(cs, out / cpng, now, None, ccps,
                       f"{name}: instructions per env-step (--perfgate-counts)")
            counts = Counts(cs, now, ccps, cpng)
        made.append(Entry(j, s, current, band, cps, None if c is None else c.value, png,
                          counts))
    return made


class Report(Command):
    name = "report"
    help = "markdown report + one PNG per benchmark (history, baseline band, change points)"
    description = ("Judge a recorded run (the machine's newest history-mode run, or --run) "
                   "as `perfgate check` does and write OUT/report.md (verdict table, change "
                   "points, one PNG per benchmark linked relatively) and OUT/summary.md (no "
                   "images; for `cat OUT/summary.md >> \"$GITHUB_STEP_SUMMARY\"`). Exit 0 "
                   "whatever the verdicts; 2 usage error; 3 infrastructure error.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("--out", required=True, metavar="DIR",
                        help="folder for report.md, summary.md and the PNGs (made if missing)")
        ap.add_argument("--run", dest="run_id", default=None, metavar="RUN_ID",
                        help="the run to report: an id printed as 'recorded run RUN_ID' or a "
                        "commit prefix (default: the machine's newest history-mode run)")
        add_rule_arguments(ap)
        add_json_argument(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        reply = Reply(PROG, args.json)
        return reply.emit(lambda: run(args.out, run_id=args.run_id, where=Where.from_args(args),
                                      judging=Judging.from_args(args), reply=reply))


def run(out: str | Path, *, run_id: str | None = None, where: Where | None = None,
        judging: Judging | None = None, reply: Reply | None = None) -> int:
    """``perfgate report``: the exit status; ``reply.body`` gets the --json fields."""
    from pytest_perfgate.cli._found import judge_run, no_history_run, read_history, warned
    from pytest_perfgate.cli._out import run_json, verdict_json
    from pytest_perfgate.core.atomic import atomic_write
    from pytest_perfgate.report import changepoints, markdown

    reply, text = reply or Reply(PROG), str(out)
    folder = Path(text).expanduser()
    why = ("--out is empty: give a folder, e.g. perfgate-report" if not text.strip()
           else folder_problem(folder, f"--out {text!r}", "perfgate-report"))
    if why is not None:
        raise UsageError(why)
    for need in ("matplotlib", "ruptures"):
        try:
            __import__(need)
        except ImportError:
            fix = changepoints.INSTALL.replace("ruptures", need)
            return reply.infra(f"{need} is not installed: {fix}")
    h = read_history(where or Where(), reply, history_only=True)
    if isinstance(h, int):
        return h
    place = f"machine {h.machine!r} in {h.results_dir}"
    if not h.runs:
        return reply.infra(no_history_run(place, h.skipped))
    run = pick(run_id, h)
    hidden = h.hidden_newest(run) if run_id is None else None
    if hidden is not None:
        return reply.infra(hidden_message(hidden, run))
    judged = warned(reply, lambda: judge_run(judging or Judging(), h.results_dir, run, None,
                                             PROG))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        made = warned(reply, lambda: entries(h, run, judged, folder))
        atomic_write(folder / SUMMARY, markdown.summary(run, made, place).encode())
        atomic_write(folder / REPORT, markdown.report(run, made, place).encode())
        for f in (folder / SUMMARY, folder / REPORT):
            f.chmod(0o644)  # an artifact others read; atomic_write makes 0600 files
    except OSError as e:
        return reply.infra(f"cannot write the report in {folder}: {e}")
    pngs = len(made) + sum(1 for e in made if e.counts_series is not None)
    files = [folder / REPORT, folder / SUMMARY] + [folder / e.png for e in made if e.png] + [
        folder / e.counts_series.png for e in made if e.counts_series is not None]
    reply.body = {"run": run_json(run), "out": str(folder), "files": [str(f) for f in files],
                  "benchmarks": [verdict_json(j, run.run_id) for j in judged]}
    print(f"{PROG}: run {run.run_id} ({run.commit[:10]}), {len(made)} benchmark(s): "
          f"wrote {folder / REPORT}, {folder / SUMMARY} and {pngs} PNG(s)")
    return 0
