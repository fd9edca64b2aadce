"""Several rings drained as one: what the learner of a multi-collector pair sees.

Each collector process has its own single-producer/single-consumer :class:`Ring`; the
learner gets a :class:`Rings` with the consumer half of the same API (``pop``,
``borrow``, ``spec``, ``waited_ns``, ``ended``), so a learner written for one ring drains N
unchanged. Both serve the rings in turn, starting after the one served last, so every
collector with data waiting gets the learner's attention in rotation; ``last`` names the
ring a batch came from (docs/ring.md "Several collectors").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.buffers import Buffers
from pytest_perfgate.ring.layout import RingInputError, check_timeout
from pytest_perfgate.ring.shm_ring import Ring

WAIT_SLICE_S = 0.002  # sleep on one ring at a time for this long when none has data


class Rings:
    """The rings of N collectors, same spec, read round-robin by one learner."""

    def __init__(self, rings: Sequence[Ring]) -> None:
        if not rings:
            raise RingInputError("Rings([]): give at least one ring")
        specs = {r.spec for r in rings}
        if len(specs) != 1:
            raise RingInputError("Rings: every collector's ring must have the same RingSpec "
                                 f"(got {len(specs)} different ones)")
        self.rings = list(rings)
        self.spec = rings[0].spec
        self.served = [0] * len(rings)  # transitions taken from each ring
        self.last: int | None = None  # the ring the latest batch came from
        self._next = 0

    @property
    def waited_ns(self) -> int:
        """Consumer wait summed over the rings (each ring's own counter)."""
        return sum(r.waited_ns for r in self.rings)

    @property
    def ended(self) -> bool:
        return all(r.ended for r in self.rings)

    def buffers(self, max_steps: int, rows: int | None = None, *, stream: bool = True
                ) -> list[Buffers]:
        """One set of ``pop(out=...)`` buffers per ring (each ring's own: see Ring.buffers)."""
        return [r.buffers(max_steps, rows, stream=stream) for r in self.rings]

    def pop(self, max_steps: int | None = None, timeout: float | None = None, *,
            min_steps: int = 1, out: Sequence[dict[str, Any]] | dict[str, Any] | None = None
            ) -> Batch | None:
        """A batch from the next ring (in rotation) that has ``min_steps`` consumable;
        None once every stream is finished and drained, or when ``timeout`` passed.
        ``out``: :meth:`buffers` (the batch is views into the serving ring's set)."""
        if timeout is not None:
            timeout = check_timeout("pop", timeout)
        outs = self._outs(out)

        def take(i: int, wait: float) -> Batch | None:
            return self.rings[i].pop(max_steps, wait, min_steps=min_steps, out=outs[i])

        return self._rotate(take, timeout)

    def borrow(self, max_steps: int | None = None, timeout: float | None = None, *,
               min_steps: int = 1, next_obs: bool = True) -> RingsBorrow:
        """Ring.borrow() from the next ring (in rotation) with ``min_steps`` consumable:
        ``with rings.borrow(...) as b:`` gives views into that ring, released when the
        block ends; None once every stream is finished and drained (with
        ``next_obs=False``, after each ring's end batch), or at the timeout. With
        ``next_obs=False`` a step's next_obs is the next step *of the same ring*:
        :attr:`last` names it."""
        # the checks of Ring.borrow, once: every ring has the same spec
        self.rings[0].borrow(max_steps, timeout, min_steps=min_steps, next_obs=next_obs)
        return RingsBorrow(self, max_steps, timeout, min_steps, next_obs)

    def _rotate(self, take: Callable[[int, float], Batch | None], timeout: float | None
                ) -> Batch | None:
        """``take(ring index, wait)`` from each ring in turn until one gives a batch; when
        none has one, wait on one ring at a time for a slice, the next ring each time."""
        n = len(self.rings)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for j in range(n):
                i = (self._next + j) % n
                b = take(i, 0)
                if b is not None:
                    return self._served(i, b)
            if self.ended:
                # A ring that finished during that pass may still have its last step or
                # its end batch (borrow(next_obs=False)) to give: one more pass.
                for i in range(n):
                    b = take(i, 0)
                    if b is not None:
                        return self._served(i, b)
                return None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            i = self._next
            self._next = (i + 1) % n
            b = take(i, WAIT_SLICE_S if left is None else min(WAIT_SLICE_S, left))
            if b is not None:
                return self._served(i, b)

    def _outs(self, out: Any) -> list[Any]:
        if out is None or (isinstance(out, dict) and not isinstance(out, Buffers)):
            return [out] * len(self.rings)  # plain arrays: every ring pops into them
        if isinstance(out, dict) or len(out) != len(self.rings):
            raise RingInputError(
                "Rings.pop(out=...): pass rings.buffers(k), one set per ring (a ring's own "
                "buffers hold its newest step between pops, so the rings cannot share one)")
        return list(out)

    def _served(self, i: int, b: Batch) -> Batch:
        self._next = (i + 1) % len(self.rings)
        self.served[i] += b.transitions
        self.last = i
        return b

    def close(self) -> None:
        for r in self.rings:
            r.close()


class RingsBorrow:
    """What ``rings.borrow(...)`` returns: ``with`` it to get a batch of one ring's views
    (or None); that ring's borrow is left when the block ends."""

    def __init__(self, rings: Rings, max_steps: int | None, timeout: float | None,
                 min_steps: int, next_obs: bool) -> None:
        self._rings, self._timeout = rings, timeout
        self._args = (max_steps, min_steps, next_obs)
        self._open: Any = None  # the entered Borrowed of the serving ring

    def __enter__(self) -> Batch | None:
        if self._open is not None:
            raise RuntimeError("this borrow() is entered already: call rings.borrow() for "
                               "each batch")
        max_steps, min_steps, next_obs = self._args

        def take(i: int, wait: float) -> Batch | None:
            held = self._rings.rings[i].borrow(max_steps, wait, min_steps=min_steps,
                                               next_obs=next_obs)
            b = held.__enter__()
            if b is None:
                held.__exit__(None, None, None)
            else:
                self._open = held
            return b

        return self._rings._rotate(take, self._timeout)

    def __exit__(self, *exc: object) -> None:
        held, self._open = self._open, None
        if held is not None:
            held.__exit__(*exc)
