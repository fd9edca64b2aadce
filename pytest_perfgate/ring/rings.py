"""Several rings drained as one: what the learner of a multi-collector pair sees.

Each collector process has its own single-producer/single-consumer :class:`Ring`; the
learner gets a :class:`Rings` with the consumer half of the same API (``pop``, ``borrow``
is not offered, ``spec``, ``waited_ns``, ``ended``), so a learner written for one ring
drains N unchanged. ``pop`` serves the rings in turn, starting after the one served last,
so every collector with data waiting gets the learner's attention in rotation
(docs/ring.md "Several collectors").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.held import Buffers
from pytest_perfgate.ring.layout import RingInputError
from pytest_perfgate.ring.ring import Ring

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
        n = len(self.rings)
        outs = self._outs(out)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for j in range(n):
                i = (self._next + j) % n
                b = self.rings[i].pop(max_steps, 0, min_steps=min_steps, out=outs[i])
                if b is not None:
                    return self._served(i, b)
            if self.ended:
                return None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            i = self._next
            self._next = (i + 1) % n
            wait = WAIT_SLICE_S if left is None else min(WAIT_SLICE_S, left)
            b = self.rings[i].pop(max_steps, wait, min_steps=min_steps, out=outs[i])
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
        return b

    def close(self) -> None:
        for r in self.rings:
            r.close()


__all__ = ["Rings"]
