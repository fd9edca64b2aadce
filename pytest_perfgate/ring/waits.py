"""How a side of the ring waits: the mutex taken in slices, and a wait for the other side
that polls a counter for a budget, then sleeps on a doorbell in slices; both notice a dead
peer within a slice (docs/ring.md "Polling before sleeping", "Who is reported dead").
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from typing import Any

from pytest_perfgate.ring.sync import SLICE_S, SharedSem

SPIN_MISSES = 3  # waits in a row too long for polling to catch: then sleep at once


class Mutex:
    """The ring mutex, taken in slices so a peer that died holding it is reported; one per
    mapping, an uncontended try first. It holds the header (an export: a close() in another
    thread cannot unmap an entered lock's semaphore) and the mapping's peer check only weakly
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


class Waits:
    """One side's waits for the other side: on ``bell``, as ``role``.

    Its own state: ``misses``, this side's waits in a row that outlasted the polling budget
    ``spin_ns`` (SPIN_MISSES of them: sleep at once), and ``clock``, the clock of the waits
    that may poll (tests fake it). The producer's long waits never stop the consumer's
    polling: each side has its own. A poll reads a header counter without the mutex: a hint
    to look again under it, never a reason to touch a slot.

    The bells' protocol, kept by both sides' callers: a side about to sleep sets its
    waiting flag (W_CONS, W_PROD) under the mutex, in the same locked look that found too
    little; the side that moves the counter reads and clears that flag under the mutex and
    posts the bell after unlocking. So no wake-up is lost (the flag is set before the
    sleeper's last look), a stale post costs one more look, and a side that polls sets no
    flag and gets no post.
    """

    def __init__(self, h: Any, bell: SharedSem, role: str, spin_ns: int,
                 check: Callable[[str], None]) -> None:
        self.h, self.bell, self.role, self.spin_ns = h, bell, role, spin_ns
        self._check = check  # PeerDied naming the other side, if it is gone
        self.misses = 0
        self.clock = time.perf_counter_ns

    def sleep(self, deadline: float | None) -> bool:
        """One sliced wait on the bell; PeerDied within a slice of the peer dying."""
        left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
        got = self.bell.wait(max(0.0, left))
        if not got:
            self._check(self.role)
        return got

    def spin_end(self, t0: int, deadline: float | None) -> int:
        """Until when (``clock``) a wait that began at ``t0`` polls before it sleeps, 0 for
        not at all: not after SPIN_MISSES waits in a row outlasted the budget (see
        :meth:`spun`), and never past the caller's deadline."""
        budget = self.spin_ns if self.misses < SPIN_MISSES else 0
        if budget and deadline is not None:
            budget = min(budget, int((deadline - time.monotonic()) * 1e9))
        return t0 + budget if budget > 0 else 0

    def spin(self, idx: int, value: int, until_ns: int) -> int:
        """Poll header counter ``idx`` until it leaves ``value``: ``until_ns`` then, to poll
        on if that was not enough; 0 once the clock reaches ``until_ns`` (sleep). Yielding
        the CPU each turn lets a peer that shares it run."""
        h, clock, yield_ = self.h, self.clock, os.sched_yield
        while h[idx] == value:
            if clock() >= until_ns:
                return 0
            yield_()
        return until_ns

    def spun(self, t0: int) -> None:
        """After a wait that began at ``t0``: count it as a miss if it outlasted the
        polling budget. A side whose last SPIN_MISSES waits all did sleeps at once, and
        polls again after the first wait short enough for polling to have caught."""
        if self.clock() - t0 < self.spin_ns:
            self.misses = 0
        else:
            self.misses += 1
