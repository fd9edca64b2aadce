"""``ring.borrow()``: a batch of views into the ring itself, its slots released on exit.

A class, not a ``@contextmanager`` generator: entering and leaving run once per step, right
after the learner's own MB-sized reads have emptied the caches, where the generator's frame,
its context-manager object each cost cache misses (docs/ring.md "The short paths").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_perfgate.ring import batch as _batch
from pytest_perfgate.ring import held as _held
from pytest_perfgate.ring.base import POPS
from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.layout import RingInputError

if TYPE_CHECKING:
    from pytest_perfgate.ring.ring import Ring


class Borrowed:
    """What ``ring.borrow(...)`` returns: ``with`` it to get the batch (or None)."""

    __slots__ = ("_args", "_claim", "_open", "_ring")

    def __init__(self, ring: Ring, max_steps: int | None, timeout: float | None,
                 min_steps: int) -> None:
        self._ring, self._args = ring, (max_steps, timeout, min_steps)
        self._claim: tuple[int, int] | None = None
        self._open = False

    def __enter__(self) -> Batch | None:
        if self._open:
            raise RuntimeError("this borrow() is entered already: call ring.borrow() for "
                               "each batch")
        self._open = True
        try:
            return self._enter()
        except BaseException:
            self._open = False  # nothing claimed: this borrow can be entered again
            raise

    def _enter(self) -> Batch | None:
        ring = self._ring
        if ring._borrowing:
            raise RingInputError(nested("borrow()"))
        max_steps, timeout, min_steps = self._args
        if ring._held_by is not None:  # a step held in pop(out=) buffers comes first
            import time

            done, b = _held.flush(ring, ring._held_by, max_steps,
                                  None if timeout is None else time.monotonic() + timeout)
            if not done or b is not None:
                ring._h[POPS] += b is not None
                return b
        got = ring._claim(max_steps, timeout, min_steps)
        if got is None:
            return None
        con, k = got
        cap = ring.spec.capacity
        # Steps whose successor is contiguous; the last slot's step alone (successor: slot 0).
        run = max(1, min(k, cap - con % cap - 1))
        try:
            b = _batch.views(ring._a, cap, con, run, ring._count)
        except BaseException:
            ring._release(con, run)
            raise
        self._claim = (con, run)
        ring._borrowing = True
        return b

    def __exit__(self, *exc: object) -> None:
        self._open = False
        claim, self._claim = self._claim, None
        if claim is not None:
            self._ring._borrowing = False
            self._ring._release(*claim)


def nested(what: str) -> str:
    """The error for a read of a ring inside one of its own open borrow() blocks."""
    return (f"{what} inside an open borrow() block of the same ring: the borrowed steps "
            "are not released yet, so this read would return them again; leave the "
            "with-block first")
