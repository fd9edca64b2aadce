"""``perfgate machine``: the machine metadata the plugin records, and its fingerprint.

A baseline only counts on the same fingerprint (docs/design.md §2), so when NO BASELINE
says "fingerprint differs", this shows what this runner looks like to perfgate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_perfgate.cli import Command
from pytest_perfgate.cli._out import UsageError
from pytest_perfgate.cli.common_args import from_env
from pytest_perfgate.session.options import argparse_type, parse_machine, parse_path


class Machine(Command):
    name = "machine"
    help = "the machine metadata the plugin records, and the fingerprint baselines match on"
    description = ("Print the metadata `pytest --perfgate` records for this machine and the "
                   "fingerprint a baseline must share (CPU model, cores, affinity, cgroup "
                   "quota, NUMA nodes, Python and package versions; on a GPU machine the "
                   "GPUs, their driver and torch's CUDA runtime). Metadata added by a "
                   "conftest's pytest_perfgate_machine_info hook is not included.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        ap.add_argument("--machine", type=argparse_type(parse_machine), default=None,
                        help="the machine name to record under (default: $PERFGATE_MACHINE, "
                        "else the hostname)")
        ap.add_argument("--json", action="store_true", help="print one JSON object")
        ap.add_argument("--asv-machine-file", nargs="?", const="~/.asv-machine.json",
                        type=argparse_type(parse_path),
                        default=None, metavar="PATH",
                        help="also write this machine, under its perfgate name, into asv's "
                        "machine file (default ~/.asv-machine.json), so `asv run --machine "
                        "NAME` records into the same machine folder with the same fields")
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return run(args.machine, as_json=args.json, asv_machine_file=args.asv_machine_file)


def run(machine: str | None = None, *, as_json: bool = False,
        asv_machine_file: str | Path | None = None) -> int:
    """``perfgate machine``: the exit status."""
    from pytest_perfgate.history import machine_id as info

    try:  # every value is checked before anything is collected or written
        name = info.machine_name(machine or from_env("PERFGATE_MACHINE", parse_machine))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    target = None
    if asv_machine_file is not None:
        target = Path(asv_machine_file).expanduser()
        problem = info.asv_machine_file_problem(target)
        if problem is not None:
            raise UsageError(problem)
    meta = info.collect_metadata(name)
    fields = info.fingerprint_fields(meta)
    fp = info.fingerprint(meta)
    if target is not None:
        try:
            path = info.write_asv_machine_file(meta, target)
        except (OSError, ValueError) as exc:
            print(f"perfgate machine: infrastructure error: {exc}", file=sys.stderr)
            return 3
        print(f"wrote machine {meta['machine']!r} to {path}: record with "
              f"`asv run --machine {meta['machine']}`")
    if as_json:
        from pytest_perfgate.history import environment

        print(json.dumps({"fingerprint": fp, "fingerprint_fields": fields,
                          "gpu_model": info.gpu_model(meta), "metadata": meta,
                          "environment": environment.collect(())},
                         indent=2, sort_keys=True, default=str))
        return 0
    print(f"machine      {meta.get('machine')}")
    print(f"fingerprint  {fp}")
    print("fingerprint fields (a baseline must match all of them):")
    for k in sorted(fields):
        print(f"  {k:<22} {fields[k]}")
    gpu = info.gpu_model(meta)
    if gpu:
        print(f"  {'gpu':<22} {gpu} (for the benchmarks that ran on the GPU)")
    from pytest_perfgate.gpu.fingerprint import describe
    from pytest_perfgate.history import environment

    print("GPUs (name and compute capability match; memory and SMs are shown; driver and "
          "CUDA are the environment; settings are recorded):")
    for line in describe(meta.get("gpu")):
        print(f"  {line}")
    env = environment.collect(())
    print(f"environment (named in a verdict when it changed since its baseline, never a new "
          f"baseline): Python {env['python']}, {len(env['packages'])} distributions "
          f"({len(env['editable'])} editable, left out); `--json` lists them")
    rest = sorted(k for k in meta if k not in fields and k not in ("machine", "gpu"))
    if rest:
        print("other metadata (recorded, not matched):")
        for k in rest:
            print(f"  {k:<22} {meta[k]}")
    return 0
