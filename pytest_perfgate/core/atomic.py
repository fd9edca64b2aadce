"""Crash-safe file writes: the one atomic write every results file goes through.

A writer killed mid-write corrupted plain ``json.dump`` files 20 times out of 20 and this
0 times out of 20 (docs/design.md §6): the temp file lives in the target's folder (so the
rename is atomic), is fsynced, then replaces the target, and the folder is fsynced so the
rename itself survives a power cut. Temp names end in :data:`TMP_SUFFIX`, never ``.json``,
because asv parses every ``*.json`` below a machine folder.

Atomic is not enough when two processes read-modify-write one file (two pytest sessions
recording into one results dir lost 19-37 of 80 benchmarks.json entries): :func:`locked`
serialises them (docs/design.md §6).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".perfgate-tmp"
STALE_TMP_S = 3600.0  # a temp file this old belongs to a writer that was killed
LOCK_TIMEOUT_S = 60.0  # a record holds a lock for milliseconds; a minute means a hung holder


class LockTimeout(TimeoutError):
    """A results file stayed locked by another process for longer than LOCK_TIMEOUT_S.

    An OSError, so callers report it as an infrastructure error, never as a regression.
    """


@contextlib.contextmanager
def locked(lock_file: str | os.PathLike[str], timeout_s: float | None = None) -> Iterator[None]:
    """Hold the exclusive lock ``lock_file`` (created if missing) for a read-modify-write.

    ``filelock`` takes an OS lock (flock on POSIX), which the kernel drops when its holder
    dies, so a killed writer never leaves a stale lock behind.
    """
    from filelock import FileLock, Timeout

    lock_file = Path(lock_file)
    wait = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_file, timeout=wait)
    try:
        lock.acquire()
    except Timeout:
        raise LockTimeout(
            f"could not lock {lock_file} within {wait:g} s: another process holds it (a "
            "pytest session still recording into the same results dir, or a hung one; "
            f"`fuser {lock_file}` shows which); let it finish or stop it, or record into "
            "another --perfgate-results-dir") from None
    try:
        yield
    finally:
        lock.release()


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either the old or the new content, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def sweep_stale_temps(folder: Path, now: float | None = None,
                      max_age_s: float = STALE_TMP_S) -> int:
    """Delete our temp files older than ``max_age_s`` (left by killed writers)."""
    now = time.time() if now is None else now
    removed = 0
    with contextlib.suppress(OSError):
        for p in folder.glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > max_age_s:
                    p.unlink()
                    removed += 1
    return removed


def load_json(path: Path) -> Any:
    """The JSON in the file at ``path``. Whatever the file holds, the errors are OSError and
    ValueError (not JSON, not UTF-8, and nested deeper than the parser's recursion limit,
    which json raises as RecursionError), so every reader's skip-with-a-warning catches it."""
    return loads_json(path.read_text(encoding="utf-8"))


def loads_json(text: str) -> Any:
    """:func:`json.loads`, with nesting too deep to parse a ValueError like other garbage."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep to be JSON perfgate or asv wrote") from None


def output_problem(path: Path, shown: str, example: str, create_folders: bool = True
                   ) -> str | None:
    """Why a file cannot be written at ``path`` (None: it can), checked before any work so
    a long measurement never ends in a traceback over its output path. Missing folders are
    created later when ``create_folders`` (as pytest's --junitxml does), else refused."""
    if path.is_dir():
        return f"{shown} is a folder, not a file: give a file path, e.g. {example}"
    parent = path.parent
    while not parent.exists():
        if not create_folders:
            return f"{shown}: its folder {path.parent} does not exist"
        parent = parent.parent
    if not parent.is_dir():
        return f"{shown}: {parent} is a file, not a folder: give a path in a folder"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{shown}: the file is not writable: fix its permissions or give another path"
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"{shown}: cannot create files in {parent}: give a writable path"
    return None
