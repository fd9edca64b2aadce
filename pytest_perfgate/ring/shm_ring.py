"""A single-producer / single-consumer transition ring in shared memory (docs/design.md §9).

Slot t holds obs_t, action_t, reward_t, terminated_t, truncated_t (+ critic_obs_t); its
``next_obs`` is slot t+1's obs, and the true final observations of envs that ended at t are
in slot t's side store. Counters live in the segment header, read and written only under a
process-shared semaphore used as a mutex (sem_wait/sem_post synchronise memory, POSIX XBD
4.12), so the slot bytes written before a publish are visible to whoever sees the new count.
:class:`Ring` joins the producer (ring/producer.py) and the read paths: copies (here, on
ring/claims.py), held buffers (ring/held.py) and views (ring/borrow.py).
"""

from __future__ import annotations

import weakref
from math import inf
from time import monotonic
from typing import Any

from pytest_perfgate.ring import batch as _batch
from pytest_perfgate.ring.base import POPS
from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.borrow import Borrows, nested
from pytest_perfgate.ring.buffers import Buffers
from pytest_perfgate.ring.layout import (
    SECONDS,
    RingInputError,
    check_counts,
    check_timeout,
)
from pytest_perfgate.ring.producer import Producer

# id(pop(out=) obs buffer) -> (weak ref to it, ring name, stream index, row) of the obs
# row the next pop may start from; the entry goes when the buffer does.
_CARRY: dict[int, tuple[Any, str, int, int]] = {}


def _take_carry(arr: Any) -> tuple[str, int, int] | None:
    got = _CARRY.pop(id(arr), None)
    return got[1:] if got is not None and got[0]() is arr else None


def _put_carry(arr: Any, name: str, index: int, row: int) -> None:
    key = id(arr)
    _CARRY[key] = (weakref.ref(arr, lambda _: _CARRY.pop(key, None)), name, index, row)


class Ring(Producer, Borrows):
    """Create with ``Ring(spec)``; hand it to the other process as a spawn argument.
    ``parties``: processes that will attach (2 when the creator only supervises); the
    name is removed once that many have mapped the segment."""

    def buffers(self, max_steps: int, rows: int | None = None, *, stream: bool = True
                ) -> Buffers:
        """Reusable destination arrays for ``pop(out=...)`` of at most ``max_steps`` steps,
        ``rows`` rows per field (default ``2 * max_steps + 1``, at least ``max_steps + 1``):
        a learner that pops into the same buffers every time skips allocating (and
        page-faulting) fresh ones, and in block mode each slot is freed as soon as it is
        copied (ring/held.py). They belong to this ring: another ring's pop refuses them
        while they hold a step. ``stream``: copy fields of a MB or more into them with
        streaming stores where built (ring/stream.py); False for numpy's copy."""
        if not isinstance(stream, bool):
            raise RingInputError(f"stream={stream!r}: pass True (streaming stores for big "
                                 "fields, where built) or False (numpy's copy)")
        if stream:
            from pytest_perfgate.ring.stream import available

            available()  # a bad PERFGATE_STREAM_COPY is named here, before any pop
        arrays = _batch.buffers(self._fields, max_steps, obs_rows=rows, every_field=True)
        return Buffers(arrays, self.name, max_steps, int(arrays["obs"].shape[0]),
                       stream=stream)

    def pop(self, max_steps: int | None = None, timeout: float | None = None, *,
            min_steps: int = 1, out: dict[str, Any] | None = None) -> Batch | None:
        """Copy out up to ``max_steps`` consumable steps, waiting until ``min_steps`` are
        (fewer only once the stream is finished). Returns None when the stream is finished
        and drained, or when ``timeout`` passed first (see ``ended``). With ``out`` (from
        :meth:`buffers`) the batch is views into those arrays, valid until the next pop,
        and steps are copied as they arrive, while the producer writes the next ones; each
        slot is freed once copied, the newest step waiting in the buffers for its
        successor (ring/held.py). A step held there is delivered first to any other read,
        as a copy (``pop()``, other buffers) or as views of the buffers (``borrow``)."""
        if (min_steps.__class__ is not int or min_steps < 1
                or (max_steps is not None
                    and (max_steps.__class__ is not int or max_steps < 1))):
            check_counts(max_steps, min_steps)  # raises, naming the value
        if timeout is not None and not (timeout.__class__ in SECONDS and 0 <= timeout < inf):
            timeout = check_timeout("pop", timeout)
        if self._borrowing:
            raise RingInputError(nested("pop()"))
        deadline = None if timeout is None else monotonic() + timeout
        held = self._held_by
        if held is not None:
            if held is out:  # most pops: into the buffers that hold this ring's step
                b = self._pop_held(held, max_steps, deadline, min_steps)
                self._h[POPS] += b is not None
                return b
            done, b = self._flush(held, max_steps, deadline)
            if not done:
                return None
            if b is not None:  # held in other buffers: delivered here as a copy
                self._h[POPS] += 1
                return b.copy()
        if out is None:
            got = self._claim(max_steps, deadline, min_steps)
            if got is None or not got[1]:
                return None
            con, k, _ = got
            try:
                return _batch.copy_out(self._a, self.spec.capacity, con, k, None)
            finally:
                self._release(con, k)
        if isinstance(out, Buffers) and out.ring == self._seg.name and not self.spec.overwrite:
            b = self._pop_held(out, max_steps, deadline, min_steps)
            self._h[POPS] += b is not None
            return b
        return self._pop_carried(out, max_steps, deadline, min_steps)

    def _pop_carried(self, out: dict[str, Any], max_steps: int | None,
                     deadline: float | None, min_steps: int) -> Batch | None:
        """pop() into plain arrays (or another ring's buffers, or in overwrite mode): each
        step stays in the ring until its successor arrives."""
        room = self._check_out(out)
        max_steps = room if max_steps is None else min(max_steps, room)
        goal = max(1, min(min_steps, max_steps, self.spec.capacity - 1))
        # The previous pop's last next_obs row is this pop's first obs when nothing came
        # between them: start there instead of copying it again (docs/ring.md).
        rows = int(out["obs"].shape[0])
        carry = _take_carry(out["obs"])
        base = carry[2] if (carry is not None and carry[0] == self.name
                            and carry[2] + 1 + goal <= rows) else 0
        max_steps = min(max_steps, rows - 1 - base)
        con = total = 0
        try:
            while total < goal:
                got = self._claim(max_steps - total, deadline, 1, skip=total)
                if got is None or not got[1]:
                    if got is not None and total:
                        break  # finished: fewer than min_steps is all there is
                    self._unclaim()
                    return None
                con, k, _ = got
                if total == 0 and base and (carry is None or con != carry[1]):
                    base = 0  # something was consumed or dropped in between
                _batch.copy_rows(self._a, self.spec.capacity, con + total, k, out, total,
                                 base, have_first=base > 0)
                total += k
            batch = _batch.finish(self._a, self.spec.capacity, con, total, out, base)
        except BaseException:
            self._unclaim()
            raise
        self._release(con, total)
        _put_carry(out["obs"], self.name, con + total, base + total)
        return batch

    def _check_out(self, out: Any) -> int:
        """Steps ``out`` holds, or RingInputError when it is not this ring's buffers()."""
        want = {k: v for k, v in self._fields.items() if not k.startswith("final_")}
        want.update({"next_" + k: want[k] for k in ("obs", "critic_obs") if k in want})
        if isinstance(out, Buffers) and out.held and out.ring != self.name:
            raise RingInputError(
                f"pop(out=...): these buffers hold a step of ring {out.ring!r} (made by its "
                "buffers()), which this pop would overwrite; pop each ring into its own "
                "buffers (Rings.buffers(k) makes one set per ring)")
        try:
            room = (out.max_steps if isinstance(out, Buffers)
                    else int(out["action"].shape[0]))
            ok = all(out[k].shape[1:] == shape and out[k].dtype == dt
                     and out[k].shape[0] >= room for k, (shape, dt) in want.items())
            ok = ok and all(out[k].shape[0] > room for k in ("obs", "critic_obs") if k in want)
        except (KeyError, TypeError, AttributeError, IndexError):
            ok = False
        if not ok:
            raise RingInputError("pop(out=...): not buffers of this ring (other shapes, "
                                 "dtypes or fields); make them with ring.buffers(max_steps)")
        return room
