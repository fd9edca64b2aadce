"""One process's mapping of a ring: the header counters, the slot arrays, the mutex, the
doorbells and the party table, which the ring's sides share (docs/design.md §9).

:class:`Mapping` holds what every side needs and moves no step: the producer
(ring/producer.py) and the consumer's claims (ring/claims.py) each take their views of it
once, when the ring is made or unpickled. The header's counters are grouped by writer, each
group on a cache line of its own.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

from pytest_perfgate.ring import sync
from pytest_perfgate.ring.layout import RingSpec
from pytest_perfgate.ring.segment import Segment
from pytest_perfgate.ring.stream import ring_mapped
from pytest_perfgate.ring.sync import TABLE_ROWS, SharedSem
from pytest_perfgate.ring.waits import Mutex

# Header int64 slots. The producer writes the first line, the consumer the second.
PUBLISHED, P_BLOCKED_NS, CLOSED, PUSHES, OVERWRITTEN = 0, 2, 3, 4, 5
CONSUMED, C_WAIT_NS, CLAIM, POPS, HELD = 8, 10, 11, 12, 13
W_PROD, W_CONS, ATTACHED, PARTIES, SPIN = 16, 17, 18, 19, 20  # SPIN: ns, set once
# From 32: the party table (ring/sync.py Parties).
SEM_OFF = 1024  # mutex, data bell, free bell


class RingClosed(RuntimeError):
    """push() after finish(), or a ring whose segment was closed."""


class Mapping:
    """The segment mapped into this process, and this process's row in its party table.

    What the sides take from it: ``h`` (the header's int64 counters), ``a`` (the slot
    arrays by field), ``lock`` (the mutex, :class:`Mutex`), the two doorbells, ``count``
    (numpy's count_nonzero) and ``spin_ns`` (the polling budget the creator set).
    Invariants: every header counter is read and written under ``lock``, except the
    single-writer stores and the polling hints their writers document; ``role`` is what
    this process registered in the party table (None until it pushes, reads or observes).
    """

    def __init__(self, spec: RingSpec, seg: Segment, init: bool) -> None:
        """Map ``seg`` (``init``: a new segment, whose header and semaphores start here)."""
        import numpy as np

        self.spec, self.seg = spec, seg
        buf = seg.map
        # The header as int64 items: a memoryview indexes to plain ints, twice as fast
        # as a numpy view, on every push and pop.
        self.h: Any = memoryview(buf)[:SEM_OFF].cast("q")
        self._base = ctypes.c_char.from_buffer(buf)  # an export: dropped in close()
        base = ctypes.addressof(self._base)
        self.mutex = SharedSem(base + SEM_OFF, 1 if init else None, maxvalue=1)
        self.data_bell = SharedSem(base + SEM_OFF + sync.SEM_BYTES, 0 if init else None)
        self.free_bell = SharedSem(base + SEM_OFF + 2 * sync.SEM_BYTES, 0 if init else None)
        self.lock = Mutex(self.h, self.mutex, weakref.WeakMethod(self.check_peer))
        self.table = sync.Parties(self.h)
        layout, _ = spec.layout()
        self.a = {k: np.ndarray(shape, dt, buf, off) for k, (off, shape, dt) in layout.items()}
        # Slot fields come first; the side store is touched only where envs end (§9).
        seg.populate(min(off for k, (off, _, _) in layout.items() if k.startswith("final_")))
        self.fields = spec.fields()
        try:  # the C function under np.count_nonzero's Python wrapper (numpy >= 2)
            from numpy._core.multiarray import count_nonzero as count
        except ImportError:  # pragma: no cover - numpy 1.x
            count = np.count_nonzero
        self.count: Any = count
        self.peer_watch: Any = None
        self.role: str | None = None
        if init:
            self.h[SPIN] = spec.spin_ns()  # the creator's machine view, for both sides
        self.spin_ns = int(self.h[SPIN])
        ring_mapped()  # the run's metadata says which copy this process's rings use

    @classmethod
    def create(cls, spec: RingSpec, seg: Segment, parties: int) -> Mapping:
        """The creator's mapping of the new ``seg``, for ``parties`` processes to attach."""
        m = cls(spec, seg, init=True)
        m.h[PARTIES] = parties
        m.register(sync.OBSERVER if parties >= 2 else 0)
        return m

    @classmethod
    def attach(cls, spec: RingSpec, seg: Segment) -> Mapping:
        """Another process's mapping of ``seg``; the name is removed once every party has
        mapped it (nothing left to leak, §9)."""
        m = cls(spec, seg, init=False)
        with m.lock:
            m.h[ATTACHED] += 1
            last = m.h[ATTACHED] >= m.h[PARTIES]
            m.register(0, held=True)
        if last:
            seg.unlink()
        return m

    def close(self) -> None:
        """Unlink the name (if still there) and drop this mapping: the segment is unmapped
        unless a caller still holds views into it (then at exit)."""
        self.seg.unlink()
        for attr in ("h", "_base", "mutex", "lock", "data_bell", "free_bell", "table", "a"):
            self.__dict__.pop(attr, None)
        self.seg.close()

    def register(self, bits: int, replace: bool = False, held: bool = False) -> None:
        """Put this process in the party table (once), or add ``bits`` to its row
        (``held``: the caller holds the mutex)."""
        if not held:
            with self.lock:
                self.register(bits, replace, True)
        elif not self.table.register(bits, replace):
            raise RingClosed(f"ring {self.seg.name!r}: {TABLE_ROWS} processes are attached "
                             "already, the most one ring tracks; a ring joins one producer "
                             "and one consumer (plus observers)")

    def claim_role(self, role: str) -> None:
        """This process acts as ``role`` ("producer" or "consumer") from now on: registered
        as that side unless it is a side already (an observer that pushes is one now)."""
        if self.role in (None, "observer"):
            self.register(sync.PRODUCER if role == "producer" else sync.CONSUMER,
                          replace=self.role == "observer" or self.h[PARTIES] >= 2)
            self.role = role

    def observe(self) -> None:
        """Register this process as an observer (see Ring.observe)."""
        self.register(sync.OBSERVER, replace=True)
        self.role = "observer"

    def check_peer(self, role: str | None = None) -> None:
        """PeerDied naming the first side (not an observer) of this ring that is gone."""
        self.table.check(role or self.role, self.peer_watch)
