"""``perfgate sweep``: a MuJoCo pool's thread-scaling sweep, measured interleaved.

Thread counts x pinned/unpinned, each configuration stepping the same held state in short
rotating turns, the sizing rule marked (docs/design.md §7; why interleaved: §1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli.common_args import (argparse_type, parse_count, parse_int_list,
                                             parse_output_file)
from pytest_perfgate.session.options import parse_positive_int


class Sweep(Command):
    name = "sweep"
    help = "MuJoCo pool thread-scaling sweep (interleaved), sizing rule marked"
    description = ("Step one MuJoCo pool per thread count (pinned and unpinned) on one held "
                   "state in rotating turns and print ms/step, cores used and each "
                   "configuration's time relative to the pool's sizing rule.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("--model", default="humanoid",
                        help="humanoid, g1, tiny or a model path (default humanoid)")
        ap.add_argument("--envs", type=argparse_type(parse_positive_int), default=1024,
                        help="number of simulations (default 1024)")
        ap.add_argument("--frame-skip", type=argparse_type(parse_positive_int), default=1,
                        help="substeps per env step (default 1)")
        ap.add_argument("--threads", type=argparse_type(parse_int_list), default=None,
                        help="thread counts, e.g. 1,2,4 (default: powers of two to 4x CPUs)")
        ap.add_argument("--no-pinned", action="store_true", help="skip the pinned variants")
        ap.add_argument("--turns", type=argparse_type(parse_positive_int), default=20,
                        help="interleaved turns (medians; default 20)")
        ap.add_argument("--per-turn", type=argparse_type(parse_positive_int), default=1,
                        help="steps per configuration per turn (default 1)")
        ap.add_argument("--settle", type=argparse_type(parse_count), default=300,
                        help="substeps of random actions before the state is held "
                        "(default 300)")
        ap.add_argument("--keyframe", default=None,
                        help="reset keyframe name (e.g. 'stand' for g1; default: the "
                        "model's own)")
        ap.add_argument("--json", type=argparse_type(parse_output_file), default=None,
                        help="also write the result to this file")
        ap.add_argument("--jsonl", type=argparse_type(parse_output_file), default=None,
                        help="also append one JSON line per configuration to this file")
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        from pytest_perfgate.sim import sweep
        from pytest_perfgate.sim.models import MujocoUnavailable

        try:
            result = sweep.run_sweep(
                sweep.resolve_model(args.model), args.envs, frame_skip=args.frame_skip,
                thread_counts=args.threads, pinned=not args.no_pinned, turns=args.turns,
                per_turn=args.per_turn, settle_substeps=args.settle, keyframe=args.keyframe)
        except (MujocoUnavailable, ValueError, FileNotFoundError) as exc:
            print(f"perfgate sweep: error: {exc}", file=sys.stderr)
            return 2
        print(result.table())
        for path, write in ((args.json, lambda p: sweep.write_json(str(p), result.to_dict())),
                            (args.jsonl, lambda p: _append(p, result.jsonl()))):
            if path is None:
                continue
            try:
                write(path)
            except OSError as exc:  # the table is printed above: only the file is lost
                print(f"perfgate sweep: error: could not write {path}: {exc}", file=sys.stderr)
                return 3
        return 0


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
