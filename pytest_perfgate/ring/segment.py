"""Shared-memory segments for rings: unguessable names, mode 0600, swept after a crash.

Names are ``perfgate_ring_<creator pid>_<128 random bits>``: the random part makes them
unguessable, the pid lets :func:`sweep_stale` remove segments whose creator is dead (a
killed parent cannot run its cleanup). The ring unlinks its name as soon as both sides have
mapped it (docs/design.md §9), so a later crash of anyone leaves nothing in /dev/shm; the
sweep covers only the start-up window. No multiprocessing resource tracker is involved: it
would unlink a segment at the wrong process's exit and warn about "leaks" it caused.
"""

from __future__ import annotations

import mmap
import os
import secrets
from pathlib import Path
from typing import Any

PREFIX = "perfgate_ring_"
MADV_POPULATE_WRITE = 23  # <linux/mman.h>; Python 3.11's mmap has no name for it
SHM_DIR = Path("/dev/shm")
PID_MAX_LIMIT = 4 * 1024 * 1024  # <linux/threads.h>: no pid is larger on any kernel


def _shm() -> Any:
    import importlib

    return importlib.import_module("_posixshmem")  # CPython's shm_open, as multiprocessing


def new_name() -> str:
    return f"{PREFIX}{os.getpid()}_{secrets.token_hex(16)}"


class Segment:
    """One mapped POSIX shared-memory segment."""

    def __init__(self, name: str, size: int, create: bool) -> None:
        shm = _shm()
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = shm.shm_open("/" + name, flags, mode=0o600)
        try:
            if create:
                os.fchmod(fd, 0o600)  # whatever the umask did
                os.ftruncate(fd, size)
            elif os.fstat(fd).st_size < size:
                raise ValueError(f"shared-memory segment {name!r} is smaller than the ring "
                                 "declared: was it created with another spec?")
            self.map = mmap.mmap(fd, size)
        except BaseException:
            if create:
                self._unlink(name)
            raise
        finally:
            os.close(fd)
        self.name, self.size = name, size
        self.unlinked = False

    def populate(self, length: int) -> None:
        """Map the first ``length`` bytes in now (MADV_POPULATE_WRITE, Linux >= 5.14): the
        first pass through a ring would otherwise fault every page in, ~10x slower than
        copying into mapped pages (docs/design.md §9). Only an optimisation: an older
        kernel's refusal is ignored."""
        length = min(self.size, -(-length // mmap.PAGESIZE) * mmap.PAGESIZE)
        try:
            self.map.madvise(MADV_POPULATE_WRITE, 0, length)
        except (OSError, ValueError):
            pass

    @staticmethod
    def _unlink(name: str) -> None:
        try:
            _shm().shm_unlink("/" + name)
        except FileNotFoundError:
            pass

    def unlink(self) -> None:
        """Remove the name; mappings stay valid until every process closes them."""
        if not self.unlinked:
            self.unlinked = True
            self._unlink(self.name)

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:
            pass  # numpy views still alive: the mapping goes away with the process


def sweep_stale(shm_dir: Path = SHM_DIR) -> list[str]:
    """Unlink ring segments whose creator process no longer exists; return their names.

    Only this user's regular files named as :func:`new_name` names them: /dev/shm is shared
    by every user, so a name another user chose (a pid no process can have, digits that are
    not ASCII) or a file this user does not own is left alone, never an error."""
    import stat

    from psutil import pid_exists as _pid_exists

    removed: list[str] = []
    try:
        entries = list(shm_dir.iterdir())
    except OSError:
        return removed
    me = os.geteuid()
    for path in entries:
        name = path.name
        if not name.startswith(PREFIX):
            continue
        pid_text, sep, token = name[len(PREFIX):].partition("_")
        if not (sep and pid_text.isascii() and pid_text.isdigit() and len(pid_text) <= 7
                and 0 < int(pid_text) <= PID_MAX_LIMIT and token):
            continue
        try:
            st = path.lstat()
            if st.st_uid != me or not stat.S_ISREG(st.st_mode) or _pid_exists(int(pid_text)):
                continue
            path.unlink()
            removed.append(name)
        except (OSError, OverflowError, ValueError):
            pass
    return removed
