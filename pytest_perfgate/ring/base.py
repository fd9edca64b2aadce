"""The ring's shared state: the segment, its header counters, the mutex and doorbells.

:class:`RingBase` maps one segment (header, semaphores, slot arrays) and holds what
both sides need: the mutex taken in slices, sliced waits that notice a dead peer,
pickling to the other process, and the counters behind ``stats()``. The producer is
ring/producer.py, the read paths ring/claims.py, ring/held.py and ring/borrow.py, joined in
ring/shm_ring.py (docs/design.md §9).
"""

from __future__ import annotations

import ctypes
import os
import time
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, Self

from pytest_perfgate.ring import sync
from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.segment import Segment, new_name, sweep_stale
from pytest_perfgate.ring.stream import ring_mapped
from pytest_perfgate.ring.sync import SLICE_S, TABLE_ROWS, SharedSem

# Header int64 slots; producer-written and consumer-written counters on separate lines.
PUBLISHED, P_BLOCKED_NS, CLOSED, PUSHES, OVERWRITTEN = 0, 2, 3, 4, 5
CONSUMED, C_WAIT_NS, CLAIM, POPS, HELD = 8, 10, 11, 12, 13
W_PROD, W_CONS, ATTACHED, PARTIES, SPIN = 16, 17, 18, 19, 20  # SPIN: ns, set once
# From 32: the party table (ring/sync.py Parties).
SPIN_MISSES = 3  # waits in a row too long for polling to catch: then sleep at once
SEM_OFF = 1024  # mutex, data bell, free bell


class RingClosed(RuntimeError):
    """push() after finish(), or a ring whose segment was closed."""


class _ClosedAttribute(RingClosed, AttributeError):
    """A mapped attribute read after close(): RingClosed for a caller, AttributeError for
    hasattr() and getattr(..., default)."""


class _Closed:
    """A closed ring's class (:func:`_closed`): reading what close() dropped says so. Not on
    an open ring's class, where ``__getattr__`` makes every attribute read ~3x slower."""

    _MAPPED: tuple[str, ...]

    def __getattr__(self, name: str) -> Any:
        """A missing attribute: a mapped one, or a property whose getter read one."""
        why = (f"ring {self.__dict__['_seg'].name!r} was closed in this process: make a "
               "new ring (or pass one to this process)")
        if name in type(self)._MAPPED:
            raise _ClosedAttribute(why)
        if isinstance(getattr(type(self), name, None), property):
            raise RingClosed(why)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_CLOSED: dict[type, type] = {}


def _closed(cls: type) -> type:
    """``cls`` for a closed ring: the same name, :class:`_Closed` first."""
    if cls not in _CLOSED:
        _CLOSED[cls] = type(cls.__name__, (_Closed, cls),
                            {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return _CLOSED[cls]


class RingBase:
    """The segment and its synchronisation; see :class:`Ring` for the operations."""

    # What refers to the mapping: gone at close(). A subclass adds what it maps.
    _MAPPED: tuple[str, ...] = ("_h", "_base", "_mutex", "_lock", "_data_bell", "_free_bell",
                                "_parties")

    def __init__(self, spec: RingSpec, parties: int = 1) -> None:
        """``parties``: processes that will attach (2 when the creator only supervises);
        the name is removed once that many have mapped the segment."""
        if (isinstance(parties, bool) or not isinstance(parties, int)
                or not 1 <= parties <= TABLE_ROWS):
            raise RingInputError(f"parties={parties!r}: pass how many processes will attach, "
                                 f"an int from 1 to {TABLE_ROWS} (2 when the creator only "
                                 "supervises a producer and a consumer)")
        sweep_stale()  # segments of a killed parent (docs/design.md §9)
        self.spec = spec
        self._seg = Segment(new_name(), spec.layout()[1], create=True)
        self._finalizer = weakref.finalize(self, self._seg.unlink)
        self._map_views(init=True)
        self._h[PARTIES] = parties
        self._register(sync.OBSERVER if parties >= 2 else 0)

    # ---- setup / teardown ------------------------------------------------------------
    def _map_views(self, init: bool) -> None:
        import numpy as np

        buf = self._seg.map
        # The header as int64 items: a memoryview indexes to plain ints, twice as fast
        # as a numpy view, on every push and pop.
        self._h: Any = memoryview(buf)[:SEM_OFF].cast("q")
        self._base = ctypes.c_char.from_buffer(buf)  # an export: dropped in close()
        base = ctypes.addressof(self._base)
        self._mutex = SharedSem(base + SEM_OFF, 1 if init else None, maxvalue=1)
        self._data_bell = SharedSem(base + SEM_OFF + sync.SEM_BYTES, 0 if init else None)
        self._free_bell = SharedSem(base + SEM_OFF + 2 * sync.SEM_BYTES, 0 if init else None)
        self._lock = _Held(self._h, self._mutex, weakref.WeakMethod(self._check_peer))
        self._parties = sync.Parties(self._h)
        layout, _ = self.spec.layout()
        self._a = {k: np.ndarray(shape, dt, buf, off) for k, (off, shape, dt) in layout.items()}
        # Slot fields come first; the side store is touched only where envs end (§9).
        self._seg.populate(min(off for k, (off, _, _) in layout.items() if k.startswith("final_")))
        self._fields = self.spec.fields()
        try:  # the C function under np.count_nonzero's Python wrapper (numpy >= 2)
            from numpy._core.multiarray import count_nonzero as _count
        except ImportError:  # pragma: no cover - numpy 1.x
            _count = np.count_nonzero
        self._count = _count
        self._peer_watch: Any = None
        self._role: str | None = None
        if init:
            self._h[SPIN] = self.spec.spin_ns()  # the creator's machine view, for both sides
        self._spin_ns = int(self._h[SPIN])
        self._spin_misses = 0  # waits in a row that outlasted the polling budget
        self._clock = time.perf_counter_ns  # of the waits that may poll (tests fake it)
        ring_mapped()  # the run's metadata says which copy this process's rings use
        self._on_map()

    def _on_map(self) -> None:
        """What a subclass makes once per mapping, after the views (each calls super())."""

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "name": self._seg.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.spec = state["spec"]
        try:
            self._seg = Segment(state["name"], self.spec.layout()[1], create=False)
        except FileNotFoundError:
            raise RingClosed(f"ring segment {state['name']!r} is gone: a ring joins exactly "
                             "two processes, and its name is removed once the second one "
                             "attached (or its creator exited)") from None
        self._finalizer = weakref.finalize(self, lambda: None)
        self._map_views(init=False)
        with self._lock:
            self._h[ATTACHED] += 1
            last = self._h[ATTACHED] >= self._h[PARTIES]
            self._register(0, held=True)
        if last:
            self._seg.unlink()  # every side is mapped: nothing left to leak (§9)

    def close(self) -> None:
        """Unlink the name (if still there) and drop this process's mapping."""
        self._seg.unlink()
        self._a = {}
        for attr in self._MAPPED:
            self.__dict__.pop(attr, None)
        if not isinstance(self, _Closed):
            self.__class__ = _closed(type(self))
        self._seg.close()  # unmaps unless a caller still holds views (then at exit)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def name(self) -> str:
        return self._seg.name

    def watch(self, peer: Any) -> None:
        """Let waits report a peer ``multiprocessing.Process`` with its exit code/signal."""
        self._peer_watch = peer

    def observe(self) -> None:
        """Register this process as an observer (a supervisor that only reads ``stats()``
        or ``ended``): its own exit is never reported to the sides, and its waits report
        any side that died."""
        self._register(sync.OBSERVER, replace=True)
        self._role = "observer"

    def parties(self) -> list[tuple[int, int]]:
        """(pid, role bits) of every process attached so far, this one included."""
        return self._parties.rows()

    def _register(self, bits: int, replace: bool = False, held: bool = False) -> None:
        """Put this process in the party table (once), or add ``bits`` to its row
        (``held``: the caller holds the mutex)."""
        if not held:
            with self._lock:
                self._register(bits, replace, True)
        elif not self._parties.register(bits, replace):
            raise RingClosed(f"ring {self.name!r}: {TABLE_ROWS} processes are attached "
                             "already, the most one ring tracks; a ring joins one producer "
                             "and one consumer (plus observers)")

    # ---- locking and waiting ---------------------------------------------------------
    def _check_peer(self, role: str | None = None) -> None:
        """PeerDied naming the first side (not an observer) of this ring that is gone."""
        self._parties.check(role or self._role, self._peer_watch)

    def _wait(self, bell: SharedSem, role: str, deadline: float | None) -> bool:
        """One sliced wait on ``bell``; PeerDied within a slice of the peer dying."""
        left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
        got = bell.wait(max(0.0, left))
        if not got:
            self._check_peer(role)
        return got

    def _spin_end(self, t0: int, deadline: float | None) -> int:
        """Until when (``_clock``) a wait that began at ``t0`` polls before it sleeps, 0 for
        not at all: not after SPIN_MISSES waits in a row outlasted the budget (see
        _spun), and never past the caller's deadline (docs/ring.md "Polling before
        sleeping")."""
        budget = self._spin_ns if self._spin_misses < SPIN_MISSES else 0
        if budget and deadline is not None:
            budget = min(budget, int((deadline - time.monotonic()) * 1e9))
        return t0 + budget if budget > 0 else 0

    def _spin(self, idx: int, value: int, until_ns: int) -> int:
        """Poll header counter ``idx`` (read without the mutex: a hint, re-read under it)
        until it leaves ``value``: ``until_ns`` then, to poll on if that was not enough;
        0 once the clock reaches ``until_ns`` (sleep). Yielding the CPU each turn lets a
        peer that shares it run."""
        h, clock, yield_ = self._h, self._clock, os.sched_yield
        while h[idx] == value:
            if clock() >= until_ns:
                return 0
            yield_()
        return until_ns

    def _spun(self, t0: int) -> None:
        """After a wait that began at ``t0``: count it as a miss if it outlasted the
        polling budget. A side whose last SPIN_MISSES waits all did sleeps at once, and
        polls again after the first wait short enough for polling to have caught."""
        if self._clock() - t0 < self._spin_ns:
            self._spin_misses = 0
        else:
            self._spin_misses += 1

    def _claim_role(self, role: str) -> None:
        if self._role in (None, "observer"):  # an observer that pushes is a side now
            self._register(sync.PRODUCER if role == "producer" else sync.CONSUMER,
                           replace=self._role == "observer" or self._h[PARTIES] >= 2)
            self._role = role

    @property
    def ended(self) -> bool:
        """finish() was called and every step has been consumed (steps copied into a
        learner's buffers and not yet delivered count as unconsumed)."""
        h = self._h
        with self._lock:
            return (bool(h[CLOSED])
                    and int(h[PUBLISHED]) - int(h[CONSUMED]) + int(h[HELD]) <= 1)

    def stats(self, lock: bool = True) -> dict[str, float]:
        """Fill level, blocked/wait time, overwrites: what a run report shows. ``lock=False``
        reads without the mutex (a supervisor whose sides may be stopped holding it): each
        counter is then exact, but they may be from slightly different moments."""
        h = self._h
        with self._lock if lock else nullcontext():
            pub, con, held = int(h[PUBLISHED]), int(h[CONSUMED]), int(h[HELD])
            return {"capacity": self.spec.capacity, "pushed": int(h[PUSHES]),
                    "consumed": con - held, "fill": max(0, pub - con + held - 1),
                    "overwritten": int(h[OVERWRITTEN]),
                    "producer_blocked_s": int(h[P_BLOCKED_NS]) / 1e9,
                    "consumer_wait_s": int(h[C_WAIT_NS]) / 1e9, "pops": int(h[POPS])}


class _Held:
    """The ring mutex, taken in slices so a peer that died holding it is reported; one per
    mapping, an uncontended try first. It holds the header (an export: a close() in another
    thread cannot unmap an entered lock's semaphore) and the ring's peer check only weakly
    (no cycle: a ring dropped without close() is unlinked at once by its finalizer)."""

    def __init__(self, header: Any, mutex: SharedSem,
                 check: weakref.WeakMethod[Callable[[], None]]) -> None:
        self._keep, self._mutex, self._check = header, mutex, check
        self.take, self.post = mutex.bound()

    def __enter__(self) -> None:
        if self.take():
            return
        while not self._mutex.wait(SLICE_S):
            check = self._check()
            if check is not None:
                check()

    def __exit__(self, *exc: object) -> None:
        self.post()
