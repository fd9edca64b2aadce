"""A sandbox for a pull request's code on a perf runner, whose end is the end of everything
the code started: ``perfgate sandbox [--rw PATH]... -- COMMAND`` (docs/ci.md, "The sandbox").

bubblewrap (``bwrap``) makes it, because the kernel then enforces each promise: a PID
namespace of its own, so when the command ends its init ends and the kernel kills every
process left in it (a double fork, a zombie leader whose other thread runs); a private
``/dev/shm``, ``/tmp`` and IPC namespace; HOME a fresh tmpfs; the workspace and the paths
given with ``--rw`` the only writable places, everything else (the interpreter, the runner's
folder, the runner user's home) read-only. No seccomp filter and no cgroup of its own: CPU
pinning, NUMA binding and POSIX shared memory work inside as outside.

A standard-library script: the workflow runs it with the base interpreter (``python -I -S
_sandbox.py``), never with the job's venv, whose packages the pull request chose.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

INFRA = 3  # perfgate's infrastructure error: nothing was run, nothing judged
# device nodes a benchmark may need beside the minimal /dev: GPUs (NVIDIA, AMD, DRM)
DEVICES = ("/dev/nvidia*", "/dev/dri", "/dev/kfd")


class SandboxError(Exception):
    """The sandbox cannot be made as asked: the message names the value and the fix."""


def unsafe_link(path: str) -> str | None:
    """The first part of `path` that is a symbolic link its user could have made (its own,
    or in a folder it can write), else None: a job may have swapped the folder for a link."""
    part = os.path.abspath(path)
    while part not in ("/", ""):
        if os.path.islink(part) and (os.lstat(part).st_uid == os.getuid()
                                     or os.access(os.path.dirname(part), os.W_OK)):
            return part
        part = os.path.dirname(part)
    return None


def check_place(path: str, what: str) -> str:
    """`path` as an absolute path, or SandboxError naming why it cannot be bound."""
    link = unsafe_link(path)
    if link is not None:
        raise SandboxError(f"{what} {path} goes through the symbolic link {link} (to "
                           f"{os.readlink(link)}), which the runner's user could have made: "
                           "give the real folder, or re-image the runner if a job left it")
    if not os.path.exists(path):
        raise SandboxError(f"{what} {path} does not exist: create it before the sandbox")
    return os.path.abspath(path)


def bwrap_argv(command: Sequence[str], *, workspace: str, writable: Sequence[str] = (),
               readable: Sequence[str] = (), home: str | None = None,
               bwrap: str = "bwrap") -> list[str]:
    """The bwrap command line that runs `command` in `workspace` (writable), with `writable`
    bound read-write, `readable` read-only (a venv under /tmp, which is the sandbox's own) and
    `home` (default $HOME) a fresh tmpfs."""
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev"]
    for pattern in DEVICES:
        for node in sorted(glob.glob(pattern)):
            argv += ["--dev-bind", node, node]
    argv += ["--tmpfs", "/dev/shm", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in readable:
        argv += ["--ro-bind", path, path]
    for path in (workspace, *writable):
        argv += ["--bind", path, path]
    home = home if home is not None else os.environ.get("HOME", "")
    if home:
        argv += ["--tmpfs", home, "--setenv", "HOME", home]
    return [*argv, "--chdir", workspace, "--", *command]


def prepare(command: Sequence[str], *, workspace: str, writable: Sequence[str] = (),
            readable: Sequence[str] = (), home: str | None = None) -> list[str]:
    """The checked bwrap command line: bwrap found, every path real, and a trial sandbox
    made, so a failure to make one is named here, never taken for the command's status."""
    if not command:
        raise SandboxError("no command given: perfgate sandbox [--rw PATH]... -- COMMAND")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError("bwrap (bubblewrap) is not installed: install it on the runner "
                           "(apt-get install bubblewrap, dnf install bubblewrap; docs/ci.md)")
    workspace = check_place(workspace, "the workspace")
    writable = [check_place(p, "--rw") for p in writable]
    readable = [check_place(p, "--ro") for p in readable]
    home = home if home is not None else os.environ.get("HOME", "")
    if home:
        home = check_place(home, "HOME")
    trial = subprocess.run(bwrap_argv(["true"], workspace=workspace, writable=writable,
                                      readable=readable, home=home, bwrap=bwrap),
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if trial.returncode != 0:
        said = " ".join(trial.stderr.split())[:300] or f"exit {trial.returncode}"
        raise SandboxError(f"bwrap cannot make the sandbox here ({said}): the kernel must "
                           "allow user and PID namespaces to the runner's user (sysctl "
                           "kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0; "
                           "on Ubuntu 24.04 the bwrap AppArmor profile; docs/ci.md)")
    return bwrap_argv(command, workspace=workspace, writable=writable, readable=readable,
                      home=home, bwrap=bwrap)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="perfgate sandbox", description="Run COMMAND where the kernel ends everything "
        "it started when it ends, with a private /dev/shm and /tmp, a fresh HOME, and "
        "nothing writable but the workspace and the --rw paths (docs/ci.md).")
    add_arguments(ap)
    return ap


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--workspace", default=".", metavar="DIR",
                    help="the folder COMMAND runs in, writable (default: this one)")
    ap.add_argument("--rw", action="append", default=[], metavar="PATH",
                    help="another path COMMAND may write (repeat for more)")
    ap.add_argument("--ro", action="append", default=[], metavar="PATH",
                    help="a path under /tmp that COMMAND reads (the sandbox's /tmp is its own "
                    "and empty; everything else is readable already)")
    ap.add_argument("--home", default=None, metavar="DIR",
                    help="the HOME that becomes a fresh, empty tmpfs (default: $HOME)")
    ap.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                    help="what to run, after --")


def run(command: Sequence[str], *, workspace: str = ".", writable: Sequence[str] = (),
        readable: Sequence[str] = (), home: str | None = None) -> int:
    """Replace this process by the sandbox running `command` (its exit status is the
    command's); SandboxError's message and exit 3 where it cannot be made."""
    command = list(command[1:] if command[:1] == ["--"] else command)
    try:
        argv = prepare(command, workspace=workspace, writable=writable, readable=readable,
                       home=home)
    except SandboxError as e:
        print(f"perfgate sandbox: {e}", file=sys.stderr, flush=True)
        if os.environ.get("GITHUB_ACTIONS") == "true":
            print(f"::error title=perfgate sandbox::{e}", flush=True)
        return INFRA
    sys.stdout.flush()
    os.execv(argv[0], argv)
    return INFRA  # not reached: execv returns only by raising


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run(args.command, workspace=args.workspace, writable=args.rw, readable=args.ro,
               home=args.home)


if __name__ == "__main__":
    sys.exit(main())
