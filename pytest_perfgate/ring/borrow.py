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

    __slots__ = ("_args", "_claim", "_open", "_ring", "_succ")

    def __init__(self, ring: Ring, max_steps: int | None, timeout: float | None,
                 min_steps: int, next_obs: bool = True) -> None:
        self._ring, self._args = ring, (max_steps, timeout, min_steps)
        self._succ = 1 if next_obs else 0
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
        got = ring._claim(max_steps, timeout, min_steps, succ=self._succ)
        if got is None:
            return None if self._succ else _end(ring)
        con, k = got
        cap = ring.spec.capacity
        try:
            if self._succ:
                # Steps whose successor is contiguous; the last slot's step alone (its
                # successor: slot 0).
                run = max(1, min(k, cap - con % cap - 1))
                b = _batch.views(ring._a, cap, con, run, ring._count)
            else:
                run = min(k, cap - con % cap)
                b = _batch.step_views(ring._a, cap, con, run)
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


def _end(ring: Ring) -> Batch | None:
    """After ``borrow(next_obs=False)`` found nothing: finish()'s observation once, as a
    batch of no steps (the last step's next_obs), when the stream is finished and drained;
    None otherwise (a timeout, or the end told already)."""
    from pytest_perfgate.ring.base import CLOSED, CONSUMED, PUBLISHED

    h = ring._h
    with ring._locked():
        con, closed = int(h[CONSUMED]), bool(h[CLOSED])
        last = closed and int(h[PUBLISHED]) - con == 1
    if not last or ring._end_told:
        return None
    ring._end_told = True
    return _batch.end_views(ring._a, ring.spec.capacity, con)


def nested(what: str) -> str:
    """The error for a read of a ring inside one of its own open borrow() blocks."""
    return (f"{what} inside an open borrow() block of the same ring: the borrowed steps "
            "are not released yet, so this read would return them again; leave the "
            "with-block first")
