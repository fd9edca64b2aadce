"""``perfgate sweep``: how a MuJoCo pool scales with threads, or with the batch size.

One ``--envs`` value: the thread sweep, thread counts x pinned/unpinned, each configuration
stepping the same held state in short rotating turns, the sizing rule marked (docs/design.md
§7; why interleaved: §1). Several (``256..8192``) or ``--workers``: the batch sweep, one
pool per size against N pinned worker processes splitting it (:mod:`.sim.batch_sweep`).
Every argument is checked before anything starts; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._out import UsageError
from pytest_perfgate.cli.common_args import parse_count, parse_int_list, parse_output_file
from pytest_perfgate.session.options import argparse_type, parse_positive_int, parse_seconds
from pytest_perfgate.sim.batch_plan import PlanError, parse_envs

THREAD_ONLY = ("threads", "no_pinned", "per_turn")  # flags the batch sweep does not take


class Sweep(Command):
    name = "sweep"
    help = "MuJoCo pool sweep over threads or batch sizes (interleaved)"
    description = ("Thread sweep (one --envs value): step one MuJoCo pool per thread count "
                   "(pinned and unpinned) on one held state in rotating turns and print "
                   "ms/step, cores used and each configuration's time relative to the "
                   "pool's sizing rule. Batch sweep (several --envs, e.g. 256..8192, or "
                   "--workers): env-steps/s of one pool per batch size and of N pinned "
                   "worker processes each stepping num_envs/N, interleaved.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("--model", default="humanoid",
                        help="humanoid, g1, tiny or a model path (default humanoid)")
        ap.add_argument("--envs", type=argparse_type(parse_envs, (PlanError,)), default=(1024,),
                        help="number of simulations (default 1024); several, e.g. "
                        "256,1024 or 256..8192 (doubling), sweep the batch size")
        ap.add_argument("--workers", type=argparse_type(parse_int_list), default=(),
                        help="batch sweep: also run each size as N pinned worker processes "
                        "of num_envs/N envs, e.g. 2 or 1,2")
        ap.add_argument("--frame-skip", type=argparse_type(parse_positive_int), default=1,
                        help="substeps per env step (default 1)")
        ap.add_argument("--threads", type=argparse_type(parse_int_list), default=None,
                        help="thread sweep: thread counts, e.g. 1,2,4 (default: powers of two "
                        "to 4x CPUs)")
        ap.add_argument("--no-pinned", action="store_true",
                        help="thread sweep: skip the pinned variants")
        ap.add_argument("--turns", type=argparse_type(parse_positive_int), default=20,
                        help="interleaved turns (medians; default 20)")
        ap.add_argument("--per-turn", type=argparse_type(parse_positive_int), default=None,
                        help="thread sweep: steps per configuration per turn (default 1)")
        ap.add_argument("--turn-time", type=argparse_type(parse_seconds), default=None,
                        help="batch sweep: seconds per configuration per turn (default 0.25)")
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
        return run(model=args.model, envs=args.envs, workers=args.workers,
                   frame_skip=args.frame_skip, threads=args.threads, no_pinned=args.no_pinned,
                   turns=args.turns, per_turn=args.per_turn, turn_time=args.turn_time,
                   settle=args.settle, keyframe=args.keyframe, json=args.json,
                   jsonl=args.jsonl)


def run(*, model: str = "humanoid", envs: tuple[int, ...] = (1024,),
        workers: tuple[int, ...] = (), frame_skip: int = 1,
        threads: tuple[int, ...] | None = None, no_pinned: bool = False, turns: int = 20,
        per_turn: int | None = None, turn_time: float | None = None, settle: int = 300,
        keyframe: str | None = None, json: Path | None = None, jsonl: Path | None = None
        ) -> int:
    """``perfgate sweep``: the exit status."""
    from pytest_perfgate.core.measure import MeasureError
    from pytest_perfgate.core.progress import stream_progress
    from pytest_perfgate.sim import batch_sweep, thread_sweep
    from pytest_perfgate.sim.models import MujocoUnavailable

    batch = len(envs) > 1 or bool(workers)
    given = {"threads": threads is not None, "no_pinned": no_pinned,
             "per_turn": per_turn is not None}
    if batch and any(given.values()):  # a flag of the other sweep is never ignored
        wrong = [f"--{k.replace('_', '-')}" for k in THREAD_ONLY if given[k]]
        raise UsageError(f"{', '.join(wrong)} belong(s) to the thread sweep (one --envs "
                         "value, no --workers); the batch sweep sizes each pool by the "
                         "rule: drop it, or sweep one batch size")
    if not batch and turn_time is not None:
        raise UsageError("--turn-time belongs to the batch sweep (several --envs values or "
                         "--workers); the thread sweep times single steps: use --per-turn")
    progress = stream_progress(sys.stderr, "perfgate sweep")
    try:
        model = thread_sweep.resolve_model(model)
        result: Any
        if batch:
            result = batch_sweep.run_batch_sweep(
                model, _plan(model, envs, workers), frame_skip=frame_skip, turns=turns,
                turn_s=turn_time or 0.25, settle_substeps=settle, keyframe=keyframe,
                progress=progress)
        else:  # one pool per configuration held at once: refuse what cannot fit
            configs = thread_sweep.thread_configs(envs[0], threads, not no_pinned)
            _plan(model, envs, (), len(configs))
            result = thread_sweep.run_sweep(
                model, envs[0], frame_skip=frame_skip, thread_counts=threads,
                pinned=not no_pinned, turns=turns, per_turn=per_turn or 1,
                settle_substeps=settle, keyframe=keyframe, progress=progress)
    except (MujocoUnavailable, ValueError, FileNotFoundError) as exc:
        print(f"perfgate sweep: error: {exc}", file=sys.stderr)
        return 2
    except MeasureError as exc:
        print(f"perfgate sweep: error: {exc} (here: raise --turn-time)", file=sys.stderr)
        return 3
    except RuntimeError as exc:  # a worker crashed or hung: infrastructure, not a result
        print(f"perfgate sweep: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    print(result.table())
    for path, write in ((json, lambda p: thread_sweep.write_json(str(p), result.to_dict())),
                        (jsonl, lambda p: _append(p, result.jsonl()))):
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:  # the table is printed above: only the file is lost
            print(f"perfgate sweep: error: could not write {path}: {exc}", file=sys.stderr)
            return 3
    return 0


def _plan(model: str, envs: tuple[int, ...], workers: tuple[int, ...], copies: int = 1
          ) -> Any:
    """The batch sweep's configurations, checked to fit (a bad plan is a usage error)."""
    from pytest_perfgate.sim import batch_sweep

    try:
        return batch_sweep.check(model, envs, workers, copies)
    except PlanError as e:
        raise UsageError(str(e)) from None


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
