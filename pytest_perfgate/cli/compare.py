"""``perfgate compare BASE [HEAD]``: two commits' recorded runs, side by side.

The head (a commit, a run id, or by default the machine's newest run) is judged against the
runs of the base commit with the gate's own rules (``--perfgate-baseline BASE``): ratio,
interval, p-value and verdict per benchmark, then every phase now vs then. Unlike
``check``, the base need not be an ancestor or older: it is the comparison asked for.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli.check import (
    add_rule_arguments,
    describe,
    judge_run,
    machine_runs,
    pick_run,
    warned,
)


class Compare(Command):
    name = "compare"
    help = "two recorded commits (or a commit and the newest run) side by side"
    description = ("Judge HEAD's newest run (a commit hash prefix or a run id; default: the "
                   "machine's newest run) against the runs of commit BASE with the gate's "
                   "rules, and print ratios, intervals, p-values, verdicts and every phase "
                   "side by side. Exit 0 (whatever the verdicts), 2 usage error, 3 "
                   "infrastructure error.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("base", metavar="BASE", help="the base commit (hash or prefix)")
        ap.add_argument("head", metavar="HEAD", nargs="?",
                        help="the head: a commit (hash or prefix) or a run id (default: the "
                        "machine's newest run)")
        add_rule_arguments(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        from pytest_perfgate.report import render

        found = machine_runs(args)
        if isinstance(found, int):
            return found
        results, machine, runs = found
        base = pick_run(args, runs, machine, args.base, "BASE")
        if isinstance(base, int):
            return base
        head = pick_run(args, runs, machine, args.head, "HEAD")
        if isinstance(head, int):
            return head
        if head.commit == base.commit:
            args.parser.error(f"BASE and HEAD are the same commit ({base.commit[:10]}): "
                              "compare two different commits")
        judged = warned(args, lambda: judge_run(args, results, head, base.commit,
                                                before=False))
        print(f"perfgate compare: {describe(head)} against the runs of commit "
              f"{base.commit[:10]}")
        for line in render.table(judged) + render.notes(judged):
            print(line)
        for j in judged:
            if j.verdict is not None and j.baseline_commits:
                print()
                print(render.explain(j))
        return 0
