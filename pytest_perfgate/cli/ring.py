"""``perfgate ring-compare``: a collector/learner pair pinned vs unpinned, interleaved.

Prints the pinned-vs-unpinned table of docs/design.md §9: env-steps/s, change vs unpinned,
env_step ms, push ms, for the unpinned pair and the pinned pair at each learner core count.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli.common_args import parse_count, parse_int_list
from pytest_perfgate.session.options import (
    OptionError,
    argparse_type,
    parse_positive_int,
    parse_seconds,
)


def parse_count_list(text: str) -> tuple[int, ...]:
    """'0,1,2' -> (0, 1, 2): whole numbers >= 0 (0 learner cores: the learner unpinned)."""
    out = tuple(parse_count(p) for p in str(text).split(",") if p.strip())
    if not out:
        raise OptionError(f"{text!r} holds no number: use e.g. 0,1")
    return out


class RingCompare(Command):
    name = "ring-compare"
    help = ("collector/learner ring pair: pinned vs unpinned over learner core counts and "
            "collector counts")
    description = ("Start the default humanoid collector / SAC learner pair once per "
                   "configuration (unpinned; then per learner core count k the same thread "
                   "caps unpinned, and the learner pinned to its first k cores with the "
                   "collector on the rest; per collector count c > 1, c collectors on "
                   "slices of the rest, the envs split between them), measure them in "
                   "rotating turns and print whole-machine env-steps/s, change vs unpinned, "
                   "env_step ms, push ms and the learner's wait share.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("--envs", type=argparse_type(parse_positive_int), default=256,
                        help="environments the collector steps (default 256)")
        ap.add_argument("--capacity", type=argparse_type(parse_positive_int), default=8,
                        help="ring slots, >= 2 (default 8)")
        ap.add_argument("--learner-cores", type=argparse_type(parse_count_list), default=None,
                        help="learner core counts, e.g. 0,1 (0: learner unpinned, collectors "
                        "on every CPU; default: 1,2,4,8 below the CPU count)")
        ap.add_argument("--collectors", type=argparse_type(parse_int_list), default=(1,),
                        help="collector process counts to sweep, e.g. 1,2 (default 1)")
        ap.add_argument("--turns", type=argparse_type(parse_positive_int), default=6,
                        help="interleaved turns (medians; default 6)")
        ap.add_argument("--window", type=argparse_type(parse_seconds), default=1.0,
                        help="seconds measured per configuration per turn (default 1)")
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return run(envs=args.envs, capacity=args.capacity, learner_cores=args.learner_cores,
                   collectors=args.collectors, turns=args.turns, window=args.window)


def run(*, envs: int = 256, capacity: int = 8, learner_cores: tuple[int, ...] | None = None,
        collectors: tuple[int, ...] = (1,), turns: int = 6, window: float = 1.0) -> int:
    """``perfgate ring-compare``: the exit status."""
    from pytest_perfgate.ring import pinning_table
    from pytest_perfgate.ring.layout import RingInputError
    from pytest_perfgate.sim.models import MujocoUnavailable

    try:
        from pytest_perfgate.ring.workloads import humanoid_spec

        configs = pinning_table.plan(learner_cores, collectors=collectors)
        for c in collectors:
            if envs < c:
                raise RingInputError(f"--envs {envs} for {c} collectors: give each "
                                     "collector one env at least")
        spec = humanoid_spec(envs, capacity)
        rows = pinning_table.compare(spec, configs, turns=turns, window_s=window)
    except (MujocoUnavailable, RingInputError, ValueError, FileNotFoundError) as exc:
        print(f"perfgate ring-compare: error: {exc}", file=sys.stderr)
        return 2
    print(pinning_table.table(rows, spec))
    return 0
