"""The base revision's temporary git worktree: created, always removed, and swept when a
killed run left one behind (docs/design.md §3).

A run that ends normally, fails, or is interrupted (Ctrl-C, or SIGTERM, which
:func:`term_as_interrupt` turns into the same unwinding) removes its worktree; the removal
itself runs with SIGINT and SIGTERM held so a second signal cannot cut it short. Only
SIGKILL (or a power cut) leaves one: every worktree lives in a folder named
``perfgate-base-*`` holding :data:`MARKER` (owner pid, its start time, host, repository),
and the next A/B start removes those whose owner is gone, then runs ``git worktree prune``.
A folder without the marker, or whose owner still runs, is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PREFIX = "perfgate-base-"
MARKER = "perfgate-ab-owner.json"  # beside the worktree folder ("base"), never inside it
BISECT_PREFIX = "perfgate-bisect-"  # a bisection's folder, holding its one worktree's
PID_MAX = 1 << 22  # the kernel's largest pid_max: a larger "pid" is no process of ours


class WorktreeError(RuntimeError):
    """The base revision could not be checked out (the caller words it for the user)."""


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "start": _start_time(os.getpid()),
            "host": socket.gethostname()}


def _alive(owner: dict[str, Any]) -> bool:
    """Whether the run that made a worktree may still run (when unsure: yes, keep it)."""
    pid = owner.get("pid")
    if (owner.get("host") != socket.gethostname() or type(pid) is not int
            or not 0 < pid <= PID_MAX):
        return True  # another machine sharing this folder, or not our format
    import psutil

    if not psutil.pid_exists(pid):
        return False
    start = owner.get("start")
    return start is None or _start_time(pid) in (None, start)


def _git(repo: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          timeout=timeout)


def sweep_stale(repo: Path) -> list[Path]:
    """Remove the worktrees of perfgate runs that were killed; return their folders.

    Candidates: ``perfgate-base-*`` folders in the temp dir, and worktrees registered in
    ``repo`` at ``.../perfgate-base-*/base`` (a run with another TMPDIR). Removed only when
    the marker names an owner process on this host that is gone.
    """
    found = {p for p in Path(tempfile.gettempdir()).glob(PREFIX + "*") if p.is_dir()}
    listing = _git(repo, "worktree", "list", "--porcelain")
    for line in listing.stdout.splitlines() if listing.returncode == 0 else []:
        path = Path(line[len("worktree "):]) if line.startswith("worktree ") else None
        if path is not None and path.name == "base" and path.parent.name.startswith(PREFIX):
            found.add(path.parent)
    swept = []
    for folder in sorted(found):
        try:
            if not (_mine(folder) and _mine(folder / MARKER)):
                continue  # the temp dir is shared: another user's, or a link, is not ours
            owner = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not provably ours (or still being created): leave it
        if not isinstance(owner, dict) or _alive(owner):
            continue
        mark = owner.get("repo")
        _remove(Path(mark) if isinstance(mark, str) and mark else repo, folder)
        swept.append(folder)
    _git(repo, "worktree", "prune")
    return swept


def _mine(path: Path) -> bool:
    """A folder or file (not a link) owned by this user."""
    st = path.lstat()
    return not stat.S_ISLNK(st.st_mode) and st.st_uid == os.getuid()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends (a cleanup that must finish)."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (AttributeError, OSError, ValueError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _remove(repo: Path, folder: Path) -> None:
    """Unregister and delete one worktree folder (never raises)."""
    with signals_held():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _git(repo, "worktree", "remove", "--force", str(folder / "base"))
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _git(repo, "worktree", "prune")
        if folder.parent.name.startswith(BISECT_PREFIX):  # a killed bisection's, now empty
            with contextlib.suppress(OSError):
                folder.parent.rmdir()


@contextlib.contextmanager
def worktree(repo: Path, commit: str, parent: Path | None = None) -> Iterator[Path]:
    """A detached temporary git worktree of ``commit``, removed afterwards (also on SIGTERM
    when :func:`term_as_interrupt` is in force; swept at the next start after SIGKILL).
    ``parent``: the folder to make it in (default: the temp dir)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        sweep_stale(repo)
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    try:
        owner = {**_owner(), "repo": str(Path(repo).resolve())}
        (folder / MARKER).write_text(json.dumps(owner), encoding="utf-8")
        path = folder / "base"
        proc = _git(repo, "worktree", "add", "--detach", str(path), commit, timeout=300)
        if proc.returncode != 0:
            raise WorktreeError(proc.stderr.strip())
        yield path
    finally:
        _remove(repo, folder)


def term_as_interrupt() -> Any:
    """Make SIGTERM (what a cancelled CI job sends after SIGINT) unwind like Ctrl-C, so
    fixtures end the sides and the worktree is removed; later SIGTERMs are ignored while
    that bounded cleanup runs. Returns a callable restoring the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt("SIGTERM: the A/B run was stopped; cleaning up")

    signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) in (handler, signal.SIG_IGN):
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    return restore
