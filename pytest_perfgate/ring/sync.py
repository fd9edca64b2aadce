"""Process-shared POSIX semaphores living inside the ring's own segment, and peer liveness.

Unnamed semaphores (``sem_init(pshared=1)``) in the mapped segment leave nothing else in
/dev/shm (multiprocessing's named ones would, if a parent is SIGKILLed). POSIX requires
sem_wait/sem_post to synchronise memory (XBD 4.12): that is the whole ordering argument of
docs/design.md §9. Every wait here is sliced (at most ``SLICE_S``) so the caller can look at
its peer between slices and fail within 1 s when it died. Its peers are in the ring's
party table (:class:`Parties`, docs/ring.md "Who is reported dead"): every process that maps
the ring registers its pid, start time (a reused pid reads as another process) and role, and
liveness is read from /proc, not from a parent's handle, so siblings and orphans are
reported like a parent's children.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import signal
import time
from typing import Any

SEM_BYTES = 64  # sizeof(sem_t) is 32 on x86-64 and aarch64 glibc; one cache line each
SLICE_S = 0.1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_LIB: Any = None


def _lib() -> Any:
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(ctypes.util.find_library("pthread") or None, use_errno=True)
        for fn in ("sem_init", "sem_post", "sem_trywait", "sem_timedwait", "sem_destroy"):
            getattr(lib, fn).restype = ctypes.c_int
            getattr(lib, fn).argtypes = ([ctypes.c_void_p, ctypes.c_int, ctypes.c_uint]
                                         if fn == "sem_init" else
                                         [ctypes.c_void_p, ctypes.POINTER(_Timespec)]
                                         if fn == "sem_timedwait" else [ctypes.c_void_p])
        _LIB = lib
    return _LIB


SEM_MAX = 2**31 - 1  # SEM_VALUE_MAX on Linux


def _c_semaphore(addr: int, maxvalue: int) -> Any:
    """multiprocessing's C semaphore object over the sem_t at ``addr``, or None where it
    is not safe. Its acquire/release are C (a ``with`` block runs no Python frame),
    where the ctypes calls cost ~5x more and touch far more memory: on every push and
    pop, after a MB-sized copy has emptied the caches (docs/ring.md "The short
    paths"). Only with glibc: freeing the object calls sem_close(), which glibc refuses
    (EINVAL) for a semaphore it did not open; other C libraries may not."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        import _multiprocessing  # type: ignore[import-not-found]  # no stubs; probed

        sem = _multiprocessing.SemLock._rebuild(addr, 1, maxvalue, None)  # 1: SEMAPHORE
        return sem if sem.handle == addr else None
    except (AttributeError, ImportError, OSError, TypeError, ValueError):
        return None


class SharedSem:
    """A counting semaphore at ``addr`` (inside a shared mapping)."""

    def __init__(self, addr: int, init: int | None = None, maxvalue: int = SEM_MAX) -> None:
        self.addr = addr
        if init is not None and _lib().sem_init(addr, 1, init) != 0:
            raise OSError(ctypes.get_errno(), "sem_init(pshared=1) failed: process-shared "
                          "semaphores are unsupported here")
        self._c = _c_semaphore(addr, maxvalue)
        if self._c is not None:
            self.post: Any = self._c.release  # type: ignore[method-assign]

    def post(self) -> None:  # the ctypes fallback; replaced by the C one in __init__
        if _lib().sem_post(self.addr) != 0:
            raise OSError(ctypes.get_errno(), "sem_post failed")

    def bound(self) -> tuple[Any, Any]:
        """(try to take: True on success, post): called with no argument. For the mutex,
        taken on every push and pop."""
        import functools

        if self._c is not None:
            return functools.partial(self._c.acquire, False), self._c.release
        return functools.partial(self.wait, 0.0), self.post

    def wait(self, timeout_s: float) -> bool:
        """Take one unit within ``timeout_s`` (0 = try); False on timeout."""
        if self._c is not None:
            return bool(self._c.acquire(timeout_s > 0, max(0.0, timeout_s)))
        lib = _lib()
        if lib.sem_trywait(self.addr) == 0:
            return True
        if timeout_s <= 0:
            return False
        end = time.time() + timeout_s
        ts = _Timespec(int(end), int((end % 1) * 1e9))
        while True:
            if lib.sem_timedwait(self.addr, ctypes.byref(ts)) == 0:
                return True
            err = ctypes.get_errno()
            if err == errno.ETIMEDOUT:
                return False
            if err != errno.EINTR:
                raise OSError(err, "sem_timedwait failed")


def describe_status(status: int) -> str:
    """A wait(2) status as 'exit code N' / 'signal NAME'."""
    if status & 0x7F:
        sig = status & 0x7F
        try:
            return f"killed by signal {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit code {(status >> 8) & 0xFF}"


def start_time(pid: int) -> int:
    """``pid``'s start time in clock ticks since boot (/proc/<pid>/stat field 22), 0 if
    unknown: with the pid it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def peer_gone(pid: int, started: int = 0) -> str | None:
    """None while ``pid`` runs; else how it ended, as far as this process can see.

    A dead child not yet reaped is a zombie: /proc/<pid>/stat field 52 holds its wait
    status (Linux >= 3.5). Once reaped, the status is its parent's to report. ``started``
    (from :func:`start_time`, 0 = unchecked): another start time means the pid was reused.
    """
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
    except FileNotFoundError:
        return "exited (status reaped by its parent)"
    except OSError:
        try:
            os.kill(pid, 0)
            return None
        except ProcessLookupError:
            return "exited"
        except PermissionError:
            return None
    if started and len(rest) > 19 and rest[19].isdigit() and int(rest[19]) != started:
        return "exited (its pid now belongs to another process)"
    if rest[0] not in (b"Z", b"X"):
        return None
    try:
        return describe_status(int(rest[49]))
    except (IndexError, ValueError):
        return "exited"


TABLE, TABLE_ROWS = 32, 16  # header int64 slots from 32: (pid, start time, role bits) rows
PRODUCER, CONSUMER, OBSERVER = 1, 2, 4  # role bits; 0: a side that has not pushed or popped


class PeerDied(RuntimeError):
    """The other side of the ring exited; the message names it and how it ended."""


class Parties:
    """The party table of one mapping of a ring's header ``h`` (int64 items)."""

    def __init__(self, h: Any) -> None:
        self._h = h

    def register(self, bits: int, replace: bool = False) -> bool:
        """Put this process in the table (once), or add ``bits`` to its row (``replace``:
        set them); False when the table is full. The caller holds the ring's mutex."""
        h, me = self._h, os.getpid()
        free = None
        for row in range(TABLE, TABLE + 3 * TABLE_ROWS, 3):
            pid = int(h[row])
            if pid == me:
                h[row + 2] = bits if replace else int(h[row + 2]) | bits
                return True
            if pid == 0 and free is None:
                free = row
        if free is None:
            return False
        h[free + 1] = start_time(me)
        h[free + 2] = bits
        h[free] = me  # last: a reader without the mutex sees a complete row or none
        return True

    def rows(self) -> list[tuple[int, int]]:
        """(pid, role bits) of every process attached so far, this one included."""
        h = self._h
        return [(int(h[r]), int(h[r + 2])) for r in range(TABLE, TABLE + 3 * TABLE_ROWS, 3)
                if int(h[r])]

    def check(self, role: str | None, watch: Any) -> None:
        """PeerDied naming the first side (not an observer) of this ring that is gone, as
        seen by a process in ``role``; ``watch``: a ``multiprocessing.Process`` (or None)
        whose exit code and signal are reported first."""
        peer_role = {"producer": "consumer", "consumer": "producer"}.get(role or "", "side")
        if watch is not None and watch.exitcode is not None:
            code = watch.exitcode
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            raise PeerDied(f"ring {peer_role} (pid {watch.pid}) died: {how}")
        h, me = self._h, os.getpid()
        for row in range(TABLE, TABLE + 3 * TABLE_ROWS, 3):
            pid, bits = int(h[row]), int(h[row + 2])
            if pid in (0, me) or bits & OBSERVER:
                continue
            gone = peer_gone(pid, int(h[row + 1]))
            if gone is None:
                continue
            if bits & (PRODUCER | CONSUMER):
                what = "/".join(n for b, n in ((PRODUCER, "producer"), (CONSUMER, "consumer"))
                                if bits & b)
                raise PeerDied(f"ring {what} (pid {pid}) died: {gone}")
            first = {"consumer": "push", "producer": "pop"}.get(role or "", "push or pop")
            raise PeerDied(f"ring {peer_role} (pid {pid}) died before its first {first}, "
                           f"having attached to the ring: {gone}")
