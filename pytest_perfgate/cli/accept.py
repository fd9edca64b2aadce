"""``perfgate accept RUN_ID``: let a run whose benchmarks failed the gate serve as a baseline.

A run that failed the gate (REGRESSION, UNSTABLE) never joins a baseline or the run-to-run
spread on its own, so re-running slow code cannot launder its verdict (docs/design.md §2).
When the slowdown is intended, a person accepts the run; ``perfgate forget`` undoes it.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._found import Where, add_history_arguments
from pytest_perfgate.cli._out import Reply, UsageError


def run(run_id: str, *, where: Where | None = None) -> int:
    """``perfgate accept``: the exit status."""
    return decide("accept", run_id, where or Where())


def decide(what: str, run_id: str, where: Where) -> int:
    """Run history.accept's ``what`` ("accept" or "forget") and print its answer."""
    from pytest_perfgate.history import decisions
    from pytest_perfgate.history.lookup import HistoryMissing, check_results_dir

    reply = Reply(f"perfgate {what}")
    results, machine = where.resolve()
    if not run_id.strip():
        raise UsageError("RUN_ID is empty: give an id printed as 'recorded run RUN_ID'")
    try:  # a missing history is the same condition, and status, in every command
        check_results_dir(results)
    except HistoryMissing as e:
        return reply.infra(str(e))
    try:
        print(getattr(decisions, what)(results, machine, run_id))
    except decisions.AcceptError as e:
        raise UsageError(str(e)) from None
    except decisions.DecisionsUnreadable as e:
        return reply.infra(str(e))
    except OSError as e:
        return reply.infra(f"cannot write the decision into {results}: {e}")
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
        return run(args.run_id, where=Where.from_args(args))
