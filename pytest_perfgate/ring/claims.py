"""The consumer's counters: the one wait for steps, the claim, and the frees.

Every read of the ring (ring/reader.py) takes its steps through :meth:`Claims.claim` and
gives them back through :meth:`Claims.release` (read while claimed: copied out, or
borrowed), :meth:`Claims.free` (copied into the learner's buffers, ring/held.py) or
:meth:`Claims.unclaim` (nothing read). A claim marks steps being read, so an overwriting
producer leaves them alone.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pytest_perfgate.ring.mapping import (
    C_WAIT_NS,
    CLAIM,
    CLOSED,
    CONSUMED,
    HELD,
    POPS,
    PUBLISHED,
    W_CONS,
    W_PROD,
    Mapping,
)
from pytest_perfgate.ring.waits import Waits

if TYPE_CHECKING:
    from pytest_perfgate.ring.buffers import Buffers


class Claims:
    """The consumer's side of the header, and the views it keeps of it.

    Invariants: in the consumer's process only this object writes CONSUMED, CLAIM, POPS,
    HELD and C_WAIT_NS (an overwriting producer also moves CONSUMED, past unclaimed steps
    only). Its views are (consumed, published, closed) as last read under the mutex, block
    mode only: ``_copy_view`` for the claims of copies and borrows, ``_held_view`` for the
    held reads. Every write of CONSUMED refreshes one view and drops the other, and
    published only grows, so a view under-states what is there: a claim skips the mutex
    when its own view shows enough (docs/ring.md "Where the time goes").
    """

    def __init__(self, m: Mapping) -> None:
        self._map, self._h, self._lock = m, m.h, m.lock
        self.free_bell = m.free_bell  # rung for a producer that sleeps on it
        self.waits = Waits(m.h, m.data_bell, "consumer", m.spin_ns, m.check_peer)
        self._cap, self._overwrite = m.spec.capacity, m.spec.overwrite
        self._copy_view: tuple[int, int, bool] | None = None
        self._held_view: tuple[int, int, bool] | None = None

    @property
    def waited_ns(self) -> int:
        """Consumer time spent waiting for a consumable step so far (its own counter)."""
        return int(self._h[C_WAIT_NS])

    def claim(self, max_steps: int | None, deadline: float | None, min_steps: int,
              skip: int = 0, succ: int = 1, held: bool = False
              ) -> tuple[int, int, bool] | None:
        """Wait for consumable steps beyond the ``skip`` already claimed and mark them being
        read: (first unconsumed index, count of new steps, whether only finish()'s
        observation follows them); (index, 0, True) once the stream is finished and
        drained; None at the deadline. ``succ=0``: a step is consumable once published, not
        once its successor is (finish()'s slot is no step); ``held``: for a held read."""
        h, most, overwrite = self._h, self._cap - succ, self._overwrite
        want = min_steps if max_steps is None or min_steps < max_steps else max_steps
        if want > most:
            want = most
        seen = self._held_view if held else self._copy_view if succ else None
        if seen is None:  # the first read of this process: its role too
            self._map.claim_role("consumer")
        else:
            con, pub, ended = seen
            avail = pub - con - (succ or ended) - skip
            if avail >= want:
                k = avail if max_steps is None or avail < max_steps else max_steps
                return con, k, ended and k == avail
        lock, waits = self._lock, self.waits
        t0 = spin = 0  # t0 set once the first look found too little: the wait is timed
        try:
            while True:
                if not lock.take():  # on nearly every pop: no Python frame for the mutex
                    lock.__enter__()
                try:
                    con, pub, ended = h[CONSUMED], h[PUBLISHED], bool(h[CLOSED])
                    avail = pub - con - (succ or ended) - skip
                    got = avail >= want or (ended and avail > 0)
                    if got:
                        k = avail if max_steps is None or avail < max_steps else max_steps
                        if overwrite:
                            h[CLAIM] = skip + k  # what an overwriting producer leaves alone
                    elif t0 and not (ended or spin):
                        h[W_CONS] = 1
                    if held:
                        self._held_view = (con, pub, ended)
                    elif got and not overwrite:
                        self._copy_view = (con, pub, ended)
                finally:
                    lock.post()
                if got:
                    return con, k, ended and k == avail
                if ended:
                    return con, 0, True
                if not t0:
                    t0 = waits.clock()
                    spin = waits.spin_end(t0, deadline)
                elif spin:
                    spin = waits.spin(PUBLISHED, pub, spin)
                elif deadline is not None and time.monotonic() >= deadline:
                    return None
                else:
                    waits.sleep(deadline)
        finally:
            if t0:
                waits.spun(t0)
                h[C_WAIT_NS] += waits.clock() - t0

    def peek(self, deadline: float | None) -> int | None:
        """Wait for the step after the last consumed one to be published, claiming nothing:
        its index, or None at the deadline (the held reads copy its observation)."""
        got = self.claim(1, deadline, 1, succ=0)
        self._copy_view = None  # a look, not a claim: the claims look again themselves
        return None if got is None else got[0]

    def unclaim(self) -> None:
        """Give up a claim without consuming (a timeout, an error mid-copy)."""
        h = self._h
        with self._lock:
            h[CLAIM] = 0
            ring_bell = bool(h[W_PROD])
            h[W_PROD] = 0
        if ring_bell:
            self.free_bell.post()

    def release(self, con: int, k: int) -> None:
        """Steps ``con .. con + k`` are read: free their slots, count the pop."""
        h, lock = self._h, self._lock
        if not lock.take():  # once per pop and borrow: no Python frame for the mutex
            lock.__enter__()
        try:
            h[CONSUMED] = con + k
            h[CLAIM] = 0
            h[POPS] += 1
            ring_bell = h[W_PROD]
            h[W_PROD] = 0
            if not self._overwrite:
                self._copy_view = (con + k, h[PUBLISHED], bool(h[CLOSED]))
            self._held_view = None  # consumed moved under the held reads' view
        finally:
            lock.post()
        if ring_bell:
            self.free_bell.post()

    def free(self, con: int, out: Buffers, add: int, finish: bool = False) -> None:
        """Steps before ``con`` are copied into ``out``: free their slots and count the ``add``
        just copied as held (``finish``: the last is finish()'s observation, whose slot stays
        unconsumed) in one locked step, so an exception while waiting for the mutex leaves
        them uncounted and in the ring, to be copied again."""
        h, lock = self._h, self._lock
        con -= finish
        if not lock.take():
            lock.__enter__()
        try:
            h[CONSUMED] = con
            h[HELD] = out.count_held(add, finish)
            ring_bell = h[W_PROD]
            h[W_PROD] = 0
            self._held_view = (con, h[PUBLISHED], bool(h[CLOSED]))
            self._copy_view = None  # consumed moved under the claims' view
        finally:
            lock.post()
        if ring_bell:
            self.free_bell.post()

    def hold(self, steps: int, popped: bool) -> None:
        """Record ``steps`` held in the learner's buffers (``popped``: and count a pop that
        delivered a batch). Single writer: plain stores, read under the mutex."""
        h = self._h
        h[HELD] = steps
        h[POPS] += popped
