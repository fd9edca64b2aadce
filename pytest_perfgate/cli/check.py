"""``perfgate check [RUN_ID]``: judge a recorded run against its history, for CI.

The plugin judges while it measures; ``check`` judges a run already recorded (the newest,
or a given id) with the same rules and verdicts (modes/recorded.py, core/gate.py), so a CI
step can gate separately from the step that measured. Exit statuses tell the cases apart:
0 pass, 1 regression (or a verdict the policy fails), 2 usage error, 3 infrastructure error
(no history, unreadable history): an infrastructure error is never a regression.
In CI it also gates the JSON report of a pytest run (``--report``, either mode) and prints
GitHub annotations and a step summary (:mod:`pytest_perfgate.cli._ci`).
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._ci import add_ci_arguments
from pytest_perfgate.cli._found import Judging, Where, add_rule_arguments, describe
from pytest_perfgate.cli._out import Reply, UsageError, add_json_argument, run_json
from pytest_perfgate.core.names import is_safe_name
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.session.options import argparse_type, parse_commit

if TYPE_CHECKING:
    from pytest_perfgate.report.github import GateResult
    from pytest_perfgate.report.series import MachineHistory

PROG = "perfgate check"


def run(run_id: str | None = None, *, where: Where | None = None,
        judging: Judging | None = None, baseline: str | None = None,
        report: str | Path | None = None, pytest_exit: int | None = None,
        no_baseline: str = "warn", github: bool | None = None,
        summary: str | Path | None = None, title: str | None = None,
        reply: Reply | None = None) -> int:
    """``perfgate check`` (the CI options: :func:`.add_ci_arguments`): the exit status;
    ``reply.body`` gets the --json fields. A usage error raises :class:`UsageError`, as in
    every command's ``run``."""
    from pytest_perfgate.cli._ci import emit, gate_report
    from pytest_perfgate.cli._out import verdict_json

    reply = reply or Reply(PROG)
    if report is not None:
        if run_id is not None or baseline is not None:
            raise UsageError("--report gates the verdicts in a pytest report: give no "
                             "RUN_ID and no --baseline with it")
        gate, judged_run = gate_report(report, pytest_exit), None
    elif pytest_exit is not None:
        raise UsageError("--pytest-exit goes with --report (the report that pytest run "
                         "wrote)")
    else:
        gate, judged_run = gate_history(run_id, where or Where(), judging or Judging(),
                                        baseline, reply)
    status = emit(gate, reply, report=report, no_baseline=no_baseline, github=github,
                  summary=summary, title=title)
    reply.body = {
        "headline": gate.headline, "passed": status == 0,
        "run": None if judged_run is None else run_json(judged_run),
        "report": None if report is None else str(report),
        "benchmarks": [verdict_json(j, None if judged_run is None else judged_run.run_id)
                       for j in gate.judged],
        "not_gated": list(gate.not_gated), "problems": list(gate.problems)}
    return status


def gate_history(run_id: str | None, where: Where, judging: Judging, baseline: str | None,
                 reply: Reply) -> tuple[GateResult, RunRecord | None]:
    """Judge a recorded run (the plugin's rules) and print the verdicts; the gate's outcome
    and the run judged."""
    from pytest_perfgate.cli._found import judge_run, pick_run, read_history, warned
    from pytest_perfgate.core.judged import failing
    from pytest_perfgate.report import render
    from pytest_perfgate.report.github import GateResult, not_gated

    def stopped(status: int) -> GateResult:  # an infrastructure error, printed
        return GateResult(status, problems=[reply.infra_problem or ""])

    h = read_history(where, reply)
    if isinstance(h, int):
        return stopped(h), None
    if run_id is not None and not run_id.strip():
        raise UsageError("RUN_ID is empty: give an id printed as 'recorded run RUN_ID' "
                         "(or no RUN_ID: the machine's newest run)")
    if run_id is not None and not any(r.run_id == run_id for r in h.runs):
        others = sorted(p.parent.parent.name for p in h.results_dir.glob(
            f"*/perfgate/{glob.escape(run_id)}.pgrun") if p.parent.parent.name !=
            h.machine) if is_safe_name(run_id) else []
        raise UsageError(f"no run {run_id!r} of machine {h.machine!r} in {h.results_dir}: "
                         + (f"it is a run of machine {others[0]!r}: pass --machine "
                            f"{others[0]}" if others else
                            "give an id printed as 'recorded run RUN_ID'"))
    run = pick_run(h, judging.repo, run_id, "RUN_ID", reply)
    if isinstance(run, int):
        return stopped(run), None
    if baseline is not None:
        check_baseline(h, baseline, run)
    judged = warned(reply, lambda: judge_run(judging, h.results_dir, run, baseline, PROG))
    if not judged:  # the plugin never records such a run: nothing was gated
        return stopped(reply.infra(f"{describe(run)} holds no benchmark: nothing to judge; "
                                   "give the run to judge as RUN_ID")), run
    print(f"perfgate check: {describe(run)}")
    for line in render.table(judged) + render.notes(judged):
        print(line)
    bad = failing(judged)
    for j in bad:
        print()
        print(render.explain(j, run.run_id))
    return GateResult(1 if bad else 0, judged, not_gated=not_gated(judged)), run


def check_baseline(h: MachineHistory, baseline: str, run: RunRecord) -> None:
    """--baseline must name one recorded commit other than the judged run's: a typo would
    leave every benchmark NO BASELINE, which exits 0 and is not a pass."""
    from pytest_perfgate.history.context import is_history_run

    commits = {r.commit for r in h.runs if is_history_run(r) and r.commit.lower().startswith(
        baseline)}
    if not commits:
        raise UsageError(f"--baseline {baseline}: no history-mode run of machine "
                         f"{h.machine!r} is of that commit, so nothing would judge the run: "
                         "give a commit hash (prefix) of a recorded run")
    if len(commits) > 1:
        raise UsageError(f"--baseline {baseline} matches several recorded commits ("
                         f"{', '.join(sorted(c[:12] for c in commits))}): give more digits")
    if run.commit in commits:
        raise UsageError(f"--baseline {baseline} is the commit of the run judged "
                         f"({describe(run)}): a run is never judged by its own commit; "
                         "give an earlier commit")


class Check(Command):
    name = "check"
    help = "judge a recorded run against its history (exit 0 pass, 1 regression, 3 infra)"
    description = ("Judge the newest recorded run of a machine (or RUN_ID) against the runs "
                   "before it, with the plugin's rules: strict-ancestor commits (asked in "
                   "--repo), same fingerprint, failed runs only once accepted; or, with "
                   "--report, gate on the verdicts a pytest --perfgate run wrote (history or "
                   "A/B mode). Exit 0: pass; 1: a regression (or UNSTABLE/INCONCLUSIVE under "
                   "a fail policy); 2: usage error; 3: infrastructure error (no or unreadable "
                   "history or report, pytest stopped without verdicts; never a pass). "
                   "--github prints GitHub Actions annotations (default: when GITHUB_ACTIONS "
                   "is true), --summary appends a markdown section.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("run_id", nargs="?", metavar="RUN_ID",
                        help="the run to judge (default: the machine's newest history run)")
        add_rule_arguments(ap)
        ap.add_argument("--baseline", type=argparse_type(parse_commit), default=None,
                        help="compare with this commit's runs only")
        add_ci_arguments(ap)
        add_json_argument(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        reply = Reply(PROG, args.json)
        return reply.emit(lambda: run(
            args.run_id, where=Where.from_args(args), judging=Judging.from_args(args),
            baseline=args.baseline, report=args.report, pytest_exit=args.pytest_exit,
            no_baseline=args.no_baseline, github=args.github, summary=args.summary,
            title=args.title, reply=reply))
