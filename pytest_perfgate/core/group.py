"""Processes perfgate starts: each in a process group of its own, ended on every way out.

A child started by :func:`popen` leads a new session, so one signal to its group reaches
everything it started (a set-up command's shell and the build it runs), and on Linux it
asks the kernel for SIGTERM when the process that started it dies: a perfgate killed
outright (SIGKILL, where no clean-up code runs) still ends its A/B sides and a bisection's
probe, which unwind as on a cancelled job (their own children ended, worktrees removed).
:func:`run` is :func:`subprocess.run` with both, and it ends the whole group when it is
interrupted (Ctrl-C, or SIGTERM turned into the same unwinding) instead of the shell alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

PR_SET_PDEATHSIG = 1  # prctl(2)
TERM_WAIT_S = 5.0
KILL_WAIT_S = 10.0
NESTED_STOP_S = 60.0  # a nested pytest (a probe, a profile run) ends its sides, removes its
# worktree (bounded waits of its own), then exits: more than a loaded machine ever needed

_libc: Any = None


def _parent_death_hook() -> Callable[[], None] | None:
    """The function a child runs before exec to die with its parent (None off Linux or
    where prctl cannot be found: the group is still ended on every way out we see)."""
    global _libc
    if not os.uname().sysname == "Linux":
        return None
    if _libc is None:
        try:  # loaded here, never in the child: only async-signal-safe work after fork
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.prctl  # noqa: B018 (looked up now, not in the child)
        except (OSError, AttributeError):
            _libc = False
    if not _libc:
        return None
    prctl, parent = _libc.prctl, os.getpid()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


def popen(args: Sequence[str] | str, **kw: Any) -> subprocess.Popen[Any]:
    """:class:`subprocess.Popen` in a new session that ends when this process dies."""
    return subprocess.Popen(args, start_new_session=True, preexec_fn=_parent_death_hook(),
                            **kw)


def stop(proc: subprocess.Popen[Any], term_wait: float = TERM_WAIT_S,
         kill_wait: float = KILL_WAIT_S) -> int | None:
    """End ``proc``'s whole group: SIGTERM, then SIGKILL; its exit status, or None. Its
    pipes are read meanwhile: a child that writes while it unwinds would block on a full
    pipe and never end on SIGTERM."""
    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, kill_wait)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return _ended(proc, wait)
    return proc.poll()


def _ended(proc: subprocess.Popen[Any], wait: float) -> int:
    """``proc``'s exit status within ``wait`` s, reading (and dropping) what its pipes
    still carry; TimeoutExpired past it."""
    if proc.stdout is None and proc.stderr is None:
        return proc.wait(wait)
    try:
        proc.communicate(timeout=wait)
    except (ValueError, OSError):  # the pipes are closed already: nothing to read
        return proc.wait(wait)
    return proc.returncode


def reap(proc: subprocess.Popen[Any]) -> None:
    """After ``proc`` itself ended: anything it left running in its group is ended too."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run(command: str, cwd: str | os.PathLike[str], timeout: float | None = None
        ) -> subprocess.CompletedProcess[str]:
    """A shell command, its output captured; interrupted or timed out, its whole group is
    ended before the exception goes on (a set-up command's children never outlive it)."""
    proc = popen(command, shell=True, cwd=cwd, stdin=subprocess.DEVNULL,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        stop(proc)
        raise
    finally:
        reap(proc)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def run_argv(args: Sequence[str], term_wait: float = TERM_WAIT_S, **kw: Any
             ) -> subprocess.CompletedProcess[Any]:
    """:func:`subprocess.run` of ``args`` (no shell) in a group of its own that dies with
    this process; interrupted, the whole group is ended (TERM, then KILL after
    ``term_wait`` s: a nested pytest needs the time to end its own children and remove its
    worktree) before the exception goes on, and anything the run left in its group is
    ended after it."""
    proc = popen(list(args), stdin=subprocess.DEVNULL, **kw)
    try:
        out, err = proc.communicate()
    except BaseException:
        stop(proc, term_wait)
        raise
    finally:
        reap(proc)
    return subprocess.CompletedProcess(list(args), proc.returncode, out, err)
