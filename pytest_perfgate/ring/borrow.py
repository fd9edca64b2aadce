"""``ring.borrow()``: a batch of views into the ring itself, its slots released on exit.

:class:`Borrowed` is a class, not a ``@contextmanager`` generator: it is entered once per
step, after MB-sized reads emptied the caches, where a generator's frame costs misses
(docs/ring.md "The short paths"). It keeps the claim; the ring lends and takes back.
"""

from __future__ import annotations

from math import inf
from time import monotonic

from pytest_perfgate.ring.base import POPS
from pytest_perfgate.ring.batch import Batch, end_views, step_views, views
from pytest_perfgate.ring.held import HeldReads
from pytest_perfgate.ring.layout import SECONDS, RingInputError, check_counts, check_timeout


class Borrowed:
    """What ``ring.borrow(...)`` returns: ``with`` it to get the batch (or None)."""

    __slots__ = ("_args", "_claim", "_open", "_ring")

    def __init__(self, ring: Borrows, args: tuple[int | None, float | None, int, int]) -> None:
        self._ring, self._args = ring, args  # (max_steps, timeout, min_steps, successors)
        self._claim: tuple[int, int] | None = None
        self._open = False

    def __enter__(self) -> Batch | None:
        if self._open:
            raise RuntimeError("this borrow() is entered already: call ring.borrow() for "
                               "each batch")
        self._open = True
        try:
            b, self._claim = self._ring.lend(*self._args)
        except BaseException:
            self._open = False  # nothing claimed: this borrow can be entered again
            raise
        return b

    def __exit__(self, *exc: object) -> None:
        self._open = False
        claim, self._claim = self._claim, None
        if claim is not None:
            self._ring.take_back(claim)


class Borrows(HeldReads):
    """The ring's side of ``borrow()``: lend steps as views, take them back."""

    _borrowing = False  # a borrow() block of this process is open: no other read
    _end_told = False  # borrow(next_obs=False) delivered finish()'s observation

    def borrow(self, max_steps: int | None = None, timeout: float | None = None, *,
               min_steps: int = 1, next_obs: bool = True) -> Borrowed:
        """Like pop(), but the batch is views into the ring itself (no copy), valid only
        inside the ``with`` block; the steps are released when it ends. A batch stops at
        the ring's wrap point (the step in the last slot comes alone, its next_obs a view of
        slot 0); next_obs is copied only when an env ended in the batch. The producer cannot
        reuse borrowed slots meanwhile. ``next_obs=False``: a step comes as soon as it is
        written, not once its successor is, with next_obs None and the ended envs' final
        observations in ``final_obs`` (``Batch.finals``); once the stream is finished and
        drained, one batch of no steps whose next_obs[0] is finish()'s observation
        (docs/ring.md "Borrowing without next_obs")."""
        if (min_steps.__class__ is not int or min_steps < 1
                or (max_steps is not None
                    and (max_steps.__class__ is not int or max_steps < 1))):
            check_counts(max_steps, min_steps)  # raises, naming the value
        if timeout is not None and not (timeout.__class__ in SECONDS and 0 <= timeout < inf):
            timeout = check_timeout("borrow", timeout)
        if next_obs.__class__ is not bool:
            raise RingInputError(f"next_obs={next_obs!r}: pass True (each step with its "
                                 "next_obs) or False (each step as soon as it is written)")
        return Borrowed(self, (max_steps, timeout, min_steps, 1 if next_obs else 0))

    def lend(self, max_steps: int | None, timeout: float | None, min_steps: int, succ: int
             ) -> tuple[Batch | None, tuple[int, int] | None]:
        """:class:`Borrowed`'s way in (call borrow()): the batch, and the claim to give
        back when the block ends (None: nothing to give back). ``succ=0``: steps without
        their successors."""
        if self._borrowing:
            raise RingInputError(nested("borrow()"))
        deadline = None if timeout is None else monotonic() + timeout
        if self._held_by is not None:  # a step held in pop(out=) buffers comes first
            done, b = self._flush(self._held_by, max_steps, deadline)
            if not done or b is not None:
                self._h[POPS] += b is not None
                return b, None
        got = self._claim(max_steps, deadline, min_steps, succ=succ)
        if got is None:
            return None, None
        con, k, _ = got
        cap = self.spec.capacity
        if not k:  # finished and drained: after its steps, finish()'s observation once
            if succ or self._end_told:
                return None, None
            self._end_told = True
            return end_views(self._a, cap, con), None
        # A run stops at the ring's end; with successors before the last slot, whose step
        # comes alone (its successor: slot 0).
        run = max(1, min(k, cap - con % cap - 1)) if succ else min(k, cap - con % cap)
        try:
            b = (views(self._a, cap, con, run, self._count) if succ
                 else step_views(self._a, cap, con, run))
        except BaseException:
            self._release(con, run)
            raise
        self._borrowing = True
        return b, (con, run)

    def take_back(self, claim: tuple[int, int]) -> None:
        """:class:`Borrowed`'s way out: the borrowed steps ``(first, count)`` are read."""
        self._borrowing = False
        self._release(*claim)


def nested(what: str) -> str:
    """The error for a read of a ring inside one of its own open borrow() blocks."""
    return (f"{what} inside an open borrow() block of the same ring: the borrowed steps "
            "are not released yet, so this read would return them again; leave the "
            "with-block first")
