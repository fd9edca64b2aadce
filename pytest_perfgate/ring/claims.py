"""The consumer's wait for steps, and the reads in place: claim steps, read, release.

``pop()`` into fresh or plain arrays and ``borrow()`` read steps in their slots: a claim
marks them being read (an overwriting producer leaves them alone), the release frees their
slots in one locked step. Held reads (ring/held.py) wait the same way, then free as they copy.
"""

from __future__ import annotations

import time

from pytest_perfgate.ring.base import (
    C_WAIT_NS,
    CLAIM,
    CLOSED,
    CONSUMED,
    POPS,
    PUBLISHED,
    W_CONS,
    W_PROD,
    RingBase,
)


class Claims(RingBase):
    """The consumer's counters: claims and releases, and the view they keep of the ring."""

    # (consumed, published, closed) as the claims and the held reads (ring/held.py) last
    # saw them under the mutex, block mode only: a stale view under-states what is there,
    # so a read skips the mutex when its own path's view shows enough (docs/ring.md).
    _seen_c: tuple[int, int, bool] | None = None
    _seen_e: tuple[int, int, bool] | None = None

    @property
    def waited_ns(self) -> int:
        """Consumer time spent waiting for a consumable step so far (its own counter)."""
        return int(self._h[C_WAIT_NS])

    def _claim(self, max_steps: int | None, deadline: float | None, min_steps: int,
               skip: int = 0, succ: int = 1, held: bool = False
               ) -> tuple[int, int, bool] | None:
        """Wait for consumable steps beyond the ``skip`` already claimed and mark them being
        read: (first unconsumed index, count of new steps, whether only finish()'s
        observation follows them); (index, 0, True) once the stream is finished and
        drained; None at the deadline. ``succ=0``: a step is consumable once published, not
        once its successor is (finish()'s slot is no step); ``held``: for a held read."""
        h, most, overwrite = self._h, self.spec.capacity - succ, self.spec.overwrite
        want = min_steps if max_steps is None or min_steps < max_steps else max_steps
        if want > most:
            want = most
        seen = self._seen_e if held else self._seen_c if succ else None
        if seen is None:  # the first read of this process: its role too
            self._claim_role("consumer")
        else:
            con, pub, ended = seen
            avail = pub - con - (succ or ended) - skip
            if avail >= want:
                k = avail if max_steps is None or avail < max_steps else max_steps
                return con, k, ended and k == avail
        lock = self._lock
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
                        self._seen_e = (con, pub, ended)
                    elif got and not overwrite:
                        self._seen_c = (con, pub, ended)
                finally:
                    lock.post()
                if got:
                    return con, k, ended and k == avail
                if ended:
                    return con, 0, True
                if not t0:
                    t0 = self._clock()
                    spin = self._spin_end(t0, deadline)
                elif spin:
                    spin = self._spin(PUBLISHED, pub, spin)
                elif deadline is not None and time.monotonic() >= deadline:
                    return None
                else:
                    self._wait(self._data_bell, "consumer", deadline)
        finally:
            if t0:
                self._spun(t0)
                h[C_WAIT_NS] += self._clock() - t0

    def _unclaim(self) -> None:
        """Give up a claim without consuming (a timeout, an error mid-copy)."""
        h = self._h
        with self._lock:
            h[CLAIM] = 0
            ring_bell = bool(h[W_PROD])
            h[W_PROD] = 0
        if ring_bell:
            self._free_bell.post()

    def _release(self, con: int, k: int) -> None:
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
            if not self.spec.overwrite:
                self._seen_c = (con + k, h[PUBLISHED], bool(h[CLOSED]))
            self._seen_e = None  # consumed moved under the held reads' view
        finally:
            lock.post()
        if ring_bell:
            self._free_bell.post()
