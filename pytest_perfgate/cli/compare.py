"""``perfgate compare BASE [HEAD]``: two commits' recorded runs, side by side.

The head (a commit, a run id, or by default the machine's newest run) is judged against the
runs of the base commit with the gate's own rules (``--perfgate-baseline BASE``): ratio,
interval, p-value and verdict per benchmark, then every phase now vs then. Unlike
``check``, the base need not be an ancestor or older: it is the comparison asked for.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._found import Judging, Where, add_rule_arguments, describe
from pytest_perfgate.cli._out import Reply, UsageError, add_json_argument
from pytest_perfgate.core.judged import Judged
from pytest_perfgate.core.results import RunRecord
from pytest_perfgate.report.series import MachineHistory

PROG = "perfgate compare"


def failed_base_runs(h: MachineHistory, base: RunRecord) -> dict[str, list[str]]:
    """{benchmark: ids of the base commit's runs that failed the gate and wait to be
    accepted}: such runs never serve as a baseline (docs/design.md §2)."""
    from pytest_perfgate.history.context import is_history_run
    from pytest_perfgate.history.decisions import FAILED_VERDICTS, load_decisions

    decisions = load_decisions(h.results_dir, base.machine)
    out: dict[str, list[str]] = {}
    for r in h.runs:
        if r.commit != base.commit or not is_history_run(r) or r.run_id in decisions.accepted:
            continue
        for name, b in r.benchmarks.items():
            if b.verdict in FAILED_VERDICTS and r.run_id not in decisions.forgotten:
                out.setdefault(name, []).append(r.run_id)
    return out


def explain_failed_base(j: Judged, base: RunRecord, failed: list[str],
                        base_runs: list[RunRecord]) -> Judged:
    """NO BASELINE because the base's runs failed, or never measured the benchmark: say
    so, and the ways to compare (``base_runs``: the base commit's history-mode runs)."""
    from pytest_perfgate.core.gate import Outcome

    v = j.verdict
    if v is None or v.outcome is not Outcome.NO_BASELINE:
        return j
    if not failed and not any(j.result.name in r.benchmarks for r in base_runs):
        message = (f"BASE commit {base.commit[:10]} has no history-mode run of "
                   f"{j.result.name} on machine {base.machine!r}: compare with a commit that "
                   "measured it (perfgate history BENCH lists them); compare records nothing")
        return dataclasses.replace(j, verdict=dataclasses.replace(v, message=message))
    if not failed:
        return j
    message = (f"the run(s) of BASE commit {base.commit[:10]} with {j.result.name} failed "
               f"the gate themselves ({', '.join(failed)}) and were never accepted, so they "
               "serve no baseline; to compare against them anyway, add --failed-base (this "
               "comparison only, nothing is recorded), or accept them if that slowdown was "
               f"intended: perfgate accept {failed[-1]}")
    return dataclasses.replace(j, verdict=dataclasses.replace(v, message=message))


class Compare(Command):
    name = "compare"
    help = "two recorded commits (or a commit and the newest run) side by side"
    description = ("Judge HEAD's newest run (a run id, a commit hash prefix, or a git "
                   "revision such as HEAD~1, a branch or a tag, resolved in --repo; default: "
                   "the machine's newest run) against the runs of BASE (the same forms) with "
                   "the gate's rules, and print ratios, intervals, p-values, verdicts and "
                   "every phase side by side. Records nothing. Exit 0 (whatever the "
                   "verdicts), 2 usage error, 3 infrastructure error.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("base", metavar="BASE", help="the base: a commit (hash or prefix), a "
                        "git revision (HEAD~1, a branch, a tag) or a run id")
        ap.add_argument("head", metavar="HEAD", nargs="?",
                        help="the head: the same forms as BASE (default: the machine's "
                        "newest run)")
        add_rule_arguments(ap)
        ap.add_argument("--failed-base", action="store_true",
                        help="let BASE's runs that failed the gate (and were not accepted) "
                        "serve as its baseline, for this comparison only")
        add_json_argument(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        reply = Reply(PROG, args.json)
        return reply.emit(lambda: run(
            args.base, args.head, where=Where.from_args(args),
            judging=Judging.from_args(args), failed_base=args.failed_base, reply=reply))


def run(base: str, head: str | None = None, *, where: Where | None = None,
        judging: Judging | None = None, failed_base: bool = False,
        reply: Reply | None = None) -> int:
    """``perfgate compare``: the exit status; ``reply.body`` gets the --json fields."""
    from pytest_perfgate.cli._found import judge_run, pick_run, read_history, warned
    from pytest_perfgate.cli._out import run_json, verdict_json
    from pytest_perfgate.history.context import is_history_run
    from pytest_perfgate.report import render

    judging, reply = judging or Judging(), reply or Reply(PROG)
    h = read_history(where or Where(), reply)
    if isinstance(h, int):
        return h
    base_run = pick_run(h, judging.repo, base, "BASE", reply)
    if isinstance(base_run, int):
        return base_run
    head_run = pick_run(h, judging.repo, head, "HEAD", reply)
    if isinstance(head_run, int):
        return head_run
    if head_run.commit == base_run.commit:
        raise UsageError(f"BASE and HEAD are the same commit ({base_run.commit[:10]}): "
                         "compare two different commits")
    failed = failed_base_runs(h, base_run)
    anyway = sorted({i for ids in failed.values() for i in ids}) if failed_base else []
    judged = warned(reply, lambda: judge_run(judging, h.results_dir, head_run,
                                             base_run.commit, PROG, before=False,
                                             serve_anyway=anyway))
    if not failed_base:
        mine = [r for r in h.runs if r.commit == base_run.commit and is_history_run(r)]
        judged = [explain_failed_base(j, base_run, failed.get(j.result.name, []), mine)
                  for j in judged]
    print(f"perfgate compare: {describe(head_run)} against the runs of commit "
          f"{base_run.commit[:10]}" + (" (its failed runs included: --failed-base)"
                                       if failed_base and failed else ""))
    for line in render.table(judged) + render.notes(judged):
        print(line)
    for j in judged:
        if j.verdict is not None and j.baseline_commits:
            print()
            print(render.explain(j))
    reply.body = {"base": {"commit": base_run.commit, "runs": [
        r.run_id for r in h.runs if r.commit == base_run.commit]}, "head": run_json(head_run),
        "failed_base": bool(failed_base),
        "benchmarks": [verdict_json(j, None) for j in judged]}
    return 0
