"""``pop()`` copies that keep each step in the ring until its successor arrives: into fresh
arrays, or into plain arrays (another ring's buffers, or any ring in overwrite mode).

The steps copied so far stay claimed (never overwritten) and are released together once the
batch is complete; a timeout gives them back unconsumed (docs/design.md §9). Into plain
arrays, the previous pop's last next_obs row is the next pop's first obs when nothing came
between them: that row is carried over instead of copied again (docs/ring.md).
"""

from __future__ import annotations

import weakref
from typing import Any

from pytest_perfgate.ring import batch as _batch
from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.buffers import Buffers
from pytest_perfgate.ring.claims import Claims
from pytest_perfgate.ring.layout import RingInputError
from pytest_perfgate.ring.mapping import Mapping

# id(pop(out=) obs buffer) -> (weak ref to it, ring name, stream index, row) of the obs
# row the next pop may start from; the entry goes when the buffer does. One table for every
# ring: plain arrays may be shared by rings.
_CARRY: dict[int, tuple[Any, str, int, int]] = {}


def _take_carry(arr: Any) -> tuple[str, int, int] | None:
    got = _CARRY.pop(id(arr), None)
    return got[1:] if got is not None and got[0]() is arr else None


def _put_carry(arr: Any, name: str, index: int, row: int) -> None:
    key = id(arr)
    _CARRY[key] = (weakref.ref(arr, lambda _: _CARRY.pop(key, None)), name, index, row)


class Copies:
    """The copying reads of one mapping. No state of its own beyond the carry table: what
    it claims it releases (or gives back) before it returns."""

    def __init__(self, claims: Claims, m: Mapping) -> None:
        self._claims, self._a, self._cap = claims, m.a, m.spec.capacity
        self._name, self._fields = m.seg.name, m.fields

    def fresh(self, max_steps: int | None, deadline: float | None, min_steps: int
              ) -> Batch | None:
        """``pop()``: up to ``max_steps`` steps copied into fresh arrays."""
        got = self._claims.claim(max_steps, deadline, min_steps)
        if got is None or not got[1]:
            return None
        con, k, _ = got
        try:
            return _batch.copy_out(self._a, self._cap, con, k, None)
        finally:
            self._claims.release(con, k)

    def into(self, out: dict[str, Any], max_steps: int | None, deadline: float | None,
             min_steps: int) -> Batch | None:
        """``pop(out=)`` into plain arrays, claimed steps copied as they come."""
        claims, cap = self._claims, self._cap
        room = self._check_out(out)
        max_steps = room if max_steps is None else min(max_steps, room)
        goal = max(1, min(min_steps, max_steps, cap - 1))
        rows = int(out["obs"].shape[0])
        carry = _take_carry(out["obs"])
        base = carry[2] if (carry is not None and carry[0] == self._name
                            and carry[2] + 1 + goal <= rows) else 0
        max_steps = min(max_steps, rows - 1 - base)
        con = total = 0
        try:
            while total < goal:
                got = claims.claim(max_steps - total, deadline, 1, skip=total)
                if got is None or not got[1]:
                    if got is not None and total:
                        break  # finished: fewer than min_steps is all there is
                    claims.unclaim()
                    return None
                con, k, _ = got
                if total == 0 and base and (carry is None or con != carry[1]):
                    base = 0  # something was consumed or dropped in between
                _batch.copy_rows(self._a, cap, con + total, k, out, total, base,
                                 have_first=base > 0)
                total += k
            batch = _batch.finish(self._a, cap, con, total, out, base)
        except BaseException:
            claims.unclaim()
            raise
        claims.release(con, total)
        _put_carry(out["obs"], self._name, con + total, base + total)
        return batch

    def _check_out(self, out: Any) -> int:
        """Steps ``out`` holds, or RingInputError when it is not this ring's buffers()."""
        want = {k: v for k, v in self._fields.items() if not k.startswith("final_")}
        want.update({"next_" + k: want[k] for k in ("obs", "critic_obs") if k in want})
        if isinstance(out, Buffers) and out.held and out.ring != self._name:
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
