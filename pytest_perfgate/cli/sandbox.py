"""``perfgate sandbox [--rw PATH]... -- COMMAND``: COMMAND where the kernel ends everything it
started when it ends, and nothing but the workspace is writable (``_sandbox``, docs/ci.md)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pytest_perfgate.cli import Command, _sandbox


def run(command: Sequence[str], *, workspace: str = ".", writable: Sequence[str] = (),
        readable: Sequence[str] = (), home: str | None = None) -> int:
    """``perfgate sandbox``: this process becomes the sandbox; 3 where none can be made."""
    return _sandbox.run(command, workspace=workspace, writable=writable, readable=readable,
                        home=home)


class Sandbox(Command):
    name = "sandbox"
    help = "run a command in a sandbox whose end kills everything it started (bubblewrap)"
    description = ("Run COMMAND in its own PID namespace (its end kills every process it "
                   "started), with a private /dev/shm and /tmp, a fresh HOME, and "
                   "everything outside the workspace and the --rw paths read-only. CPU "
                   "pinning, NUMA binding and shared memory work inside. Needs bwrap.")

    @classmethod
    def setup_arguments(cls, subparsers: Any) -> argparse.ArgumentParser:
        ap = super().setup_arguments(subparsers)
        _sandbox.add_arguments(ap)
        return ap

    @classmethod
    def run_from_args(cls, args: argparse.Namespace) -> int:
        return run(args.command, workspace=args.workspace, writable=args.rw,
                   readable=args.ro, home=args.home)
