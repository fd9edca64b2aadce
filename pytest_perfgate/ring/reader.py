"""The learner's side of the ring: every read starts here, in ``pop()`` or ``borrow()``.

:class:`Reader` picks the read path (held reads into the ring's own buffers, ring/held.py;
copies, ring/copies.py; views, :meth:`Reader.lend`), each of which claims its steps and
frees them through the claims (ring/claims.py). :class:`Borrowed` is a class, not a
``@contextmanager`` generator: it is entered once per step, after MB-sized reads emptied the
caches, where a generator's frame costs misses (docs/ring.md "The short paths").
"""

from __future__ import annotations

from math import inf
from time import monotonic
from typing import Any

from pytest_perfgate.ring.batch import Batch, end_views, step_views, views
from pytest_perfgate.ring.buffers import Buffers
from pytest_perfgate.ring.claims import Claims
from pytest_perfgate.ring.copies import Copies
from pytest_perfgate.ring.held import HeldReads
from pytest_perfgate.ring.layout import SECONDS, RingInputError, check_counts, check_timeout
from pytest_perfgate.ring.mapping import Mapping


class Borrowed:
    """What ``ring.borrow(...)`` returns: ``with`` it to get the batch (or None)."""

    __slots__ = ("_args", "_claim", "_open", "_reader")

    def __init__(self, reader: Reader, args: tuple[int | None, float | None, int, int]
                 ) -> None:
        self._reader, self._args = reader, args  # (max_steps, timeout, min_steps, successors)
        self._claim: tuple[int, int] | None = None
        self._open = False

    def __enter__(self) -> Batch | None:
        if self._open:
            raise RuntimeError("this borrow() is entered already: call ring.borrow() for "
                               "each batch")
        self._open = True
        try:
            b, self._claim = self._reader.lend(*self._args)
        except BaseException:
            self._open = False  # nothing claimed: this borrow can be entered again
            raise
        return b

    def __exit__(self, *exc: object) -> None:
        self._open = False
        claim, self._claim = self._claim, None
        if claim is not None:
            self._reader.take_back(claim)


class Reader:
    """pop() and borrow() on one mapping: it has the held reads and the copies, and lends
    views itself.

    Its own state: ``_borrowing``, a borrow() block of this process is open (no other read
    until it ends: it would return the borrowed steps again), and ``_end_told``,
    borrow(next_obs=False) delivered finish()'s observation. Invariant: steps held in the
    ring's own buffers (``_held.held_by``) are delivered before any other read takes a step,
    so no transition is lost or repeated.
    """

    def __init__(self, m: Mapping, claims: Claims) -> None:
        self._claims, self._a, self._count = claims, m.a, m.count
        self._cap, self._overwrite = m.spec.capacity, m.spec.overwrite
        self._name = m.seg.name
        self._held = HeldReads(claims, m)
        self._copies = Copies(claims, m)
        self._borrowing = False
        self._end_told = False

    def pop(self, max_steps: int | None, timeout: float | None, min_steps: int,
            out: dict[str, Any] | None) -> Batch | None:
        """Copy out up to ``max_steps`` consumable steps (see Ring.pop)."""
        if not (min_steps.__class__ is int and min_steps > 0
                and (max_steps is None or (max_steps.__class__ is int and max_steps > 0))
                and (timeout is None or (timeout.__class__ in SECONDS and 0 <= timeout < inf))):
            timeout = _checked("pop", max_steps, timeout, min_steps)
        if self._borrowing:
            raise RingInputError(nested("pop()"))
        deadline = None if timeout is None else monotonic() + timeout
        held_reads = self._held
        held = held_reads.held_by
        if held is not None:
            if held is out:  # most pops: into the buffers that hold this ring's step
                return held_reads.pop(held, max_steps, deadline, min_steps)
            done, b = held_reads.flush(held, max_steps, deadline)
            if not done:
                return None
            if b is not None:  # held in other buffers: delivered here as a copy
                return b.copy()
        if out is None:
            return self._copies.fresh(max_steps, deadline, min_steps)
        if isinstance(out, Buffers) and out.ring == self._name and not self._overwrite:
            return held_reads.pop(out, max_steps, deadline, min_steps)
        return self._copies.into(out, max_steps, deadline, min_steps)

    def borrow(self, max_steps: int | None, timeout: float | None, min_steps: int,
               next_obs: bool) -> Borrowed:
        """Views into the ring itself, released when the block ends (see Ring.borrow)."""
        if not (min_steps.__class__ is int and min_steps > 0
                and (max_steps is None or (max_steps.__class__ is int and max_steps > 0))
                and (timeout is None or (timeout.__class__ in SECONDS and 0 <= timeout < inf))):
            timeout = _checked("borrow", max_steps, timeout, min_steps)
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
        held = self._held.held_by
        if held is not None:  # a step held in pop(out=) buffers comes first
            done, b = self._held.flush(held, max_steps, deadline)
            if not done or b is not None:
                return b, None
        got = self._claims.claim(max_steps, deadline, min_steps, succ=succ)
        if got is None:
            return None, None
        con, k, _ = got
        cap, a = self._cap, self._a
        if not k:  # finished and drained: after its steps, finish()'s observation once
            if succ or self._end_told:
                return None, None
            self._end_told = True
            return end_views(a, cap, con), None
        # A run stops at the ring's end; with successors before the last slot, whose step
        # comes alone (its successor: slot 0).
        run = max(1, min(k, cap - con % cap - 1)) if succ else min(k, cap - con % cap)
        try:
            b = views(a, cap, con, run, self._count) if succ else step_views(a, cap, con, run)
        except BaseException:
            self._claims.release(con, run)
            raise
        self._borrowing = True
        return b, (con, run)

    def take_back(self, claim: tuple[int, int]) -> None:
        """:class:`Borrowed`'s way out: the borrowed steps ``(first, count)`` are read."""
        self._borrowing = False
        self._claims.release(*claim)


def _checked(what: str, max_steps: int | None, timeout: Any, min_steps: int) -> float | None:
    """A read's counts and timeout, checked in full (RingInputError naming a bad one): the
    timeout as a float. Off the fast path: pop() and borrow() recognise the common values
    inline, where a call per read costs (docs/ring.md "The short paths")."""
    check_counts(max_steps, min_steps)
    return None if timeout is None else check_timeout(what, timeout)


def nested(what: str) -> str:
    """The error for a read of a ring inside one of its own open borrow() blocks."""
    return (f"{what} inside an open borrow() block of the same ring: the borrowed steps "
            "are not released yet, so this read would return them again; leave the "
            "with-block first")
