"""Steps held in the learner's buffers: ``pop(out=)`` frees each slot as soon as it is copied.

A transition needs its successor's obs; a reader that leaves step t in the ring until t+1
arrives needs 3 slots before producer and learner overlap, too many for the cache at
MB-sized steps (docs/ring.md "Where the time goes"). Here each published step is copied
whole into the learner's buffers (ring/buffers.py) and its slot freed at once, the newest
step waiting there for its successor: 2 slots overlap like a hand-written double buffer.
Any other read path first delivers what the buffers hold (:meth:`HeldReads.flush`).
"""

from __future__ import annotations

from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.buffers import Buffers
from pytest_perfgate.ring.claims import Claims
from pytest_perfgate.ring.mapping import Mapping


class HeldReads:
    """Held reads of one mapping: take published steps, free them, hold the newest.

    Its own state: ``held_by``, the buffers holding steps copied but not delivered (None:
    none; at most one set per ring). Invariant: the header's HELD is what ``held_by``
    holds, finish()'s observation not counted (written through :class:`Claims`), so
    ``stats()`` and ``ended`` count held steps as unconsumed.
    """

    def __init__(self, claims: Claims, m: Mapping) -> None:
        self._claims, self._a, self._count, self._cap = claims, m.a, m.count, m.spec.capacity
        self.held_by: Buffers | None = None

    def pop(self, out: Buffers, max_steps: int | None, deadline: float | None,
            min_steps: int) -> Batch | None:
        """``pop(out=)`` into this ring's own buffers (block mode): copy published steps,
        each slot freed once copied, until ``min_steps`` transitions are held (fewer only at
        the end), and deliver them; None at the deadline or once the stream is drained."""
        claims = self._claims
        if (out.held == 1 and not out.finish_held and out.src is self._a
                and (min_steps == 1 or max_steps == 1 or out.max_steps == 1)):
            # Most pops: one step held, its successor the one new step. The loop below
            # taken once, with nothing else to decide (docs/ring.md "The short paths").
            got = claims.claim(2, deadline, 1, succ=0, held=True)
            if got is None:
                return None  # the held step stays held
            con, m, last = got
            if m == 1 and not last:
                out.copy_step(con)
                claims.free(con + 1, out, 1)
                batch = out.deliver(1)
                claims.hold(1, popped=True)  # its successor, held by the same buffers
                return batch
        k = out.max_steps if max_steps is None or max_steps > out.max_steps else max_steps
        goal = min_steps if min_steps < k else k
        if goal > 1 and 0 < out.held <= goal and out.base + goal + 1 > out.rows:
            out.compact()  # now, while few rows are held: the goal's rows would not fit below
        rows = k + 1 if k < out.rows else out.rows  # a batch of k spans k + 1 rows
        while out.held <= goal and not out.finish_held:
            room = rows - out.held
            got = claims.claim(room, deadline, 1, succ=0, held=True)
            if got is None:  # timeout: what was copied stays held, nothing is lost
                self._hold(out, False)
                return None
            con, m, last = got
            # finish()'s observation after the last step: its successor, copied alone
            fin = last and m < room and out.held + m > 0
            if not (m or fin):
                break  # finished and drained
            if out.src is not self._a:
                out.bind(self._a, self._count)
            if m == 1 and not fin:
                out.copy_step(con)
                claims.free(con + 1, out, 1)
                continue
            j, cap = 0, self._cap
            while j < m:  # in runs of up to half the ring, each slot freed once copied
                n = min(m - j, max(1, cap // 2), cap - (con + j) % cap,
                        out.rows - (out.base + out.held) % out.rows)
                out.copy_run(con + j, n, False)
                claims.free(con + j + n, out, n)
                j += n
            if fin:
                out.copy_run(con + m, 1, True)
                claims.free(con + m + 1, out, 1, True)
        if out.held < 2:  # the stream ended: at most finish()'s observation is left
            if out.finish_held:
                out.clear_hold()
            self._hold(out, False)
            return None
        r = out.ready(k)
        if r < goal and r < out.held - 1:
            out.compact()
            r = out.ready(k)
        batch = out.deliver(r)
        self._hold(out, True)
        return batch

    def flush(self, out: Buffers, max_steps: int | None, deadline: float | None
              ) -> tuple[bool, Batch | None]:
        """Deliver what ``out`` holds before another read path reads the ring: (True, batch),
        (True, None) when it held nothing deliverable, (False, None) at timeout."""
        limit = out.max_steps if max_steps is None else max_steps
        if out.held >= 2:
            batch: Batch | None = out.deliver(out.ready(limit))
        elif out.held == 0 or out.finish_held:
            out.clear_hold()
            batch = None
        else:
            # One step waits for its successor, still in the ring (a step, or once finished
            # finish()'s observation): copy only its observation, leave it for the next read.
            con = self._claims.peek(deadline)
            if con is None:
                return False, None
            if out.src is not self._a:
                out.bind(self._a, self._count)
            out.hold_successor(con)
            batch = out.deliver(1)
        self._hold(out, batch is not None)
        return True, batch

    def _hold(self, out: Buffers, popped: bool) -> None:
        """Record what ``out`` holds (``popped``: after delivering a batch)."""
        self.held_by = out if out.held else None
        self._claims.hold(out.held - out.finish_held if out.held else 0, popped)
