"""``perfgate forget RUN_ID``: keep a run out of every baseline and spread (undoes accept)."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._found import Where, add_history_arguments
from pytest_perfgate.cli.accept import decide


def run(run_id: str, *, where: Where | None = None) -> int:
    """``perfgate forget``: the exit status."""
    return decide("forget", run_id, where or Where())


class Forget(Command):
    name = "forget"
    help = "keep a recorded run out of every baseline and the run-to-run spread"
    description = ("Forget a recorded run: it no longer serves as a baseline or in the "
                   "spread (its files stay). Undo with perfgate accept RUN_ID.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("run_id", metavar="RUN_ID", help="the run to forget")
        add_history_arguments(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return run(args.run_id, where=Where.from_args(args))
