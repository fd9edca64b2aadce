"""Shared-memory segments for rings: unguessable names, mode 0600, swept after a crash.

Names are ``perfgate_ring_<creator pid>_<128 random bits>``: the random part makes them
unguessable, the pid lets :func:`sweep_stale` remove segments whose creator is dead (a
killed parent cannot run its cleanup). The ring unlinks its name as soon as both sides have
mapped it (docs/design.md §9), so a later crash of anyone leaves nothing in /dev/shm; the
sweep covers only the start-up window. No multiprocessing resource tracker is involved: it
would unlink a segment at the wrong process's exit and warn about "leaks" it caused.
"""

from __future__ import annotations

import contextlib
import fcntl
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


def check_space(size: int, shm_dir: Path = SHM_DIR) -> None:
    """Refuse a segment larger than the free space of ``shm_dir`` before it is made: the
    kernel allocates its pages on first write, and a write past the space dies of SIGBUS
    with the segment left behind."""
    from pytest_perfgate.ring.layout import RingInputError

    try:
        st = os.statvfs(shm_dir)
    except OSError:
        return  # not there to ask (another OS): the kernel says at the first write
    free = st.f_bavail * st.f_frsize
    if size > free:
        raise RingInputError(
            f"the ring needs {size / 2**20:,.1f} MiB of shared memory and {shm_dir} has "
            f"{free / 2**20:,.1f} MiB free: use fewer slots (capacity), fewer envs or smaller "
            f"observations, or make {shm_dir} larger (docker: --shm-size)")


class Segment:
    """One mapped POSIX shared-memory segment. Its creator keeps the segment's file open
    with an exclusive flock until the name is unlinked: the lock dies with the process,
    so :func:`sweep_stale` tells a live creator in another PID namespace (a container
    sharing /dev/shm, where its pid means nothing here) from a dead one."""

    def __init__(self, name: str, size: int, create: bool) -> None:
        shm = _shm()
        if create:
            check_space(size)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = shm.shm_open("/" + name, flags, mode=0o600)
        self._lock: int | None = None
        try:
            if create:
                os.fchmod(fd, 0o600)  # whatever the umask did
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.ftruncate(fd, size)
            elif os.fstat(fd).st_size < size:
                raise ValueError(f"shared-memory segment {name!r} is smaller than the ring "
                                 "declared: was it created with another spec?")
            self.map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            if create:
                self._unlink(name)
            raise
        if create:
            self._lock = fd  # held until unlink(): the creator is alive
        else:
            os.close(fd)
        self.name, self.size = name, size
        self.unlinked = False

    def _release(self) -> None:
        fd, self._lock = self._lock, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

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
        self._release()

    def close(self) -> None:
        self._release()
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
            if _locked(path):
                continue  # its creator lives, in another PID namespace
            path.unlink()
            removed.append(name)
        except (OSError, OverflowError, ValueError):
            pass
    return removed


def _locked(path: Path) -> bool:
    """Whether a live process holds the segment's creator lock (see :class:`Segment`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
