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
from pytest_perfgate.cli._out import add_json_argument, with_history_warnings
from pytest_perfgate.cli.check import add_rule_arguments, judge_run
from pytest_perfgate.cli.common_args import folder_problem
from pytest_perfgate.cli.history import load
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.report.series import COUNTS_SUFFIX, MachineHistory, Series, hidden_message

REPORT = "report.md"
SUMMARY = "summary.md"
PROG = "perfgate report"


def out_dir_problem(path: Path, shown: str) -> str | None:
    """Why ``path`` cannot be the report folder (None: it can; missing folders are made)."""
    return folder_problem(path, f"--out {shown}", "perfgate-report")


def png_name(bench: str, taken: set[str]) -> str:
    """A file name for ``bench``'s plot: its printable characters, unique in the folder."""
    import hashlib

    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in bench).strip("._")[:80]
    name = f"{stem or 'benchmark'}.png"
    if name.lower() in taken:
        name = f"{stem}-{hashlib.sha1(bench.encode()).hexdigest()[:6]}.png"
    taken.add(name.lower())
    return name


def pick(args: argparse.Namespace, h: MachineHistory) -> RunRecord:
    """The newest run, the run with id ``--run``, or the newest run of that commit prefix."""
    if args.run_id is None:
        return max(h.runs, key=lambda r: r.started_at)
    if not args.run_id.strip():
        args.parser.error("--run is empty: give a run id printed as 'recorded run RUN_ID' or "
                          "a commit prefix")
    found = [r for r in h.runs if r.run_id == args.run_id] or \
        [r for r in h.runs if r.commit.startswith(args.run_id.lower())]
    if not found:
        newest = ", ".join(r.run_id for r in sorted(h.runs, key=lambda r: -r.started_at)[:5])
        args.parser.error(f"--run {args.run_id!r}: no history-mode run of machine {h.machine!r} "
                          f"has that id or commit; newest runs: {newest}")
    commits = sorted({r.commit for r in found})
    if len(commits) > 1:
        args.parser.error(f"--run {args.run_id!r} matches several recorded commits ("
                          f"{', '.join(c[:12] for c in commits[:5])}): give more digits")
    return max(found, key=lambda r: r.started_at)


def band_of(j: Judged, s: Series, current: int | None) -> Any:
    """The gate's baseline as drawn: level ± threshold over the runs it used."""
    from pytest_perfgate.report.plots import Band

    if j.baseline_steps_per_s is None or not j.baseline_commits:
        return None
    end = current if current is not None else len(s.points)
    used = [i for i in range(end) if s.points[i].run.commit in set(j.baseline_commits)]
    used = used[-len(j.baseline_commits):]
    if not used:
        return None
    return Band(j.baseline_steps_per_s, j.rule.threshold, used[0], used[-1], tuple(used))


def entries(h: MachineHistory, run: RunRecord, judged: list[Judged], out: Path) -> list[Any]:
    """One :class:`~pytest_perfgate.report.markdown.Entry` per benchmark, plots drawn."""
    from pytest_perfgate.history.accept import load_decisions
    from pytest_perfgate.history.asv import COUNTS_SOURCE
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
        from pytest_perfgate.cli._out import run_with_json

        return run_with_json(args, lambda: cls.write(args))

    @classmethod
    def write(cls, args: argparse.Namespace) -> int:
        from pytest_perfgate.cli._out import infra, run_json, verdict_json
        from pytest_perfgate.cli.history import no_history_run
        from pytest_perfgate.core.files import atomic_write
        from pytest_perfgate.report import changepoints, markdown

        out = Path(args.out).expanduser()
        why = ("--out is empty: give a folder, e.g. perfgate-report" if not args.out.strip()
               else out_dir_problem(out, repr(args.out)))
        if why is not None:
            args.parser.error(why)
        for need in ("matplotlib", "ruptures"):
            try:
                __import__(need)
            except ImportError:
                fix = changepoints.INSTALL.replace("ruptures", need)
                return infra(args, f"{need} is not installed: {fix}")
        seen: set[str] = set()  # each bad file is named once, though read twice
        h = load(args, PROG, seen)
        if isinstance(h, int):
            return h
        where = f"machine {h.machine!r} in {h.results_dir}"
        if not h.runs:
            return infra(args, no_history_run(where, h.skipped))
        run = pick(args, h)
        hidden = h.hidden_newest(run) if args.run_id is None else None
        if hidden is not None:
            return infra(args, hidden_message(hidden, run))
        judged = with_history_warnings(
            PROG, lambda: judge_run(args, h.results_dir, run, None), seen)
        try:
            out.mkdir(parents=True, exist_ok=True)
            made = with_history_warnings(PROG, lambda: entries(h, run, judged, out), seen)
            atomic_write(out / SUMMARY, markdown.summary(run, made, where).encode())
            atomic_write(out / REPORT, markdown.report(run, made, where).encode())
            for f in (out / SUMMARY, out / REPORT):
                f.chmod(0o644)  # an artifact others read; atomic_write makes 0600 files
        except OSError as e:
            return infra(args, f"cannot write the report in {out}: {e}")
        pngs = len(made) + sum(1 for e in made if e.counts_series is not None)
        files = [out / REPORT, out / SUMMARY] + [out / e.png for e in made if e.png] + [
            out / e.counts_series.png for e in made if e.counts_series is not None]
        args.json_body = {"run": run_json(run), "out": str(out),
                          "files": [str(f) for f in files],
                          "benchmarks": [verdict_json(j, run.run_id) for j in judged]}
        print(f"{PROG}: run {run.run_id} ({run.commit[:10]}), {len(made)} benchmark(s): "
              f"wrote {out / REPORT}, {out / SUMMARY} and {pngs} PNG(s)")
        return 0


__all__ = ["REPORT", "SUMMARY", "Report", "out_dir_problem", "png_name"]
