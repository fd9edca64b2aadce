"""``perfgate forget RUN_ID``: keep a run out of every baseline and spread (undoes accept)."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli.accept import decide
from pytest_perfgate.cli.common_args import add_history_arguments


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
        return decide(args, "forget")
