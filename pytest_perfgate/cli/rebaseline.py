"""``perfgate rebaseline RUN_ID --reason TEXT``: an intended upgrade starts a new baseline.

A dependency bump is part of the change under test (docs/environment.md): the commit that
makes numpy slower is judged against the runs before it and fails like any other, naming the
package. When the slowdown is the price of an upgrade the team wants, one explicit command
says so: the run becomes the first of a new baseline, earlier runs judge nothing any more,
and the history and the asv site show where and why. Never by default.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._found import Where, add_history_arguments
from pytest_perfgate.cli._out import Reply, UsageError


def run(run_id: str, reason: str, *, where: Where | None = None) -> int:
    """``perfgate rebaseline``: the exit status."""
    from pytest_perfgate.history import decisions
    from pytest_perfgate.history.lookup import HistoryMissing, check_results_dir

    reply = Reply("perfgate rebaseline")
    results, machine = (where or Where()).resolve()
    if not run_id.strip():
        raise UsageError("RUN_ID is empty: give an id printed as 'recorded run RUN_ID'")
    try:
        check_results_dir(results)
    except HistoryMissing as e:
        return reply.infra(str(e))
    try:
        print(decisions.rebaseline(results, machine, run_id, reason))
    except decisions.AcceptError as e:
        raise UsageError(str(e)) from None
    except decisions.DecisionsUnreadable as e:
        return reply.infra(str(e))
    except OSError as e:
        return reply.infra(f"cannot write the decision into {results}: {e}")
    return 0


class Rebaseline(Command):
    name = "rebaseline"
    help = "start a new baseline at a recorded run (an intended upgrade's new level)"
    description = ("Start a new baseline at RUN_ID on its machine: it (accepted, if it "
                   "failed the gate) and later runs judge later commits; earlier runs judge "
                   "nothing any more. For an intended dependency upgrade that costs speed. "
                   "The run id is the one printed as 'recorded run RUN_ID'.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("run_id", metavar="RUN_ID", help="the first run of the new baseline")
        ap.add_argument("--reason", required=True, metavar="TEXT",
                        help="why (recorded, shown in perfgate history and on the site), "
                             "e.g. 'mujoco 4.0 upgrade, intended'")
        add_history_arguments(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return run(args.run_id, args.reason, where=Where.from_args(args))
