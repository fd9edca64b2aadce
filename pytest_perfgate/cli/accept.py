"""``perfgate accept RUN_ID``: let a run whose benchmarks failed the gate serve as a baseline.

A run that failed the gate (REGRESSION, UNSTABLE) never joins a baseline or the run-to-run
spread on its own, so re-running slow code cannot launder its verdict (docs/design.md §2).
When the slowdown is intended, a person accepts the run; ``perfgate forget`` undoes it.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli.common_args import add_history_arguments, history_location


def decide(args: argparse.Namespace, what: str) -> int:
    """Run history.accept's ``what`` ("accept" or "forget") and print its answer."""
    from pytest_perfgate.cli._out import infra
    from pytest_perfgate.history import accept as decisions
    from pytest_perfgate.history.lookup import HistoryMissing, check_results_dir

    results, machine = history_location(args)
    if not args.run_id.strip():
        args.parser.error("RUN_ID is empty: give an id printed as 'recorded run RUN_ID'")
    try:  # a missing history is the same condition, and status, in every command
        check_results_dir(results)
    except HistoryMissing as e:
        return infra(args, str(e))
    try:
        print(getattr(decisions, what)(results, machine, args.run_id))
    except decisions.AcceptError as e:
        args.parser.error(str(e))
    except decisions.DecisionsUnreadable as e:
        return infra(args, str(e))
    except OSError as e:
        return infra(args, f"cannot write the decision into {results}: {e}")
    return 0


class Accept(Command):
    name = "accept"
    help = "let a run that failed the gate serve as a baseline (an intended slowdown)"
    description = ("Accept a recorded run whose benchmarks failed the gate (REGRESSION, "
                   "UNSTABLE): later commits are judged against it. The run id is the one "
                   "printed as 'recorded run RUN_ID' at the end of the pytest session.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("run_id", metavar="RUN_ID", help="the run to accept")
        add_history_arguments(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return decide(args, "accept")
