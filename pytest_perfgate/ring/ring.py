"""A single-producer / single-consumer transition ring in shared memory (docs/design.md §9).

Slot t holds one step: obs_t, action_t, reward_t, terminated_t, truncated_t (+ critic_obs_t).
``next_obs`` of slot t is slot t+1's obs, so slot t is consumable only once slot t+1 is
written: the newest slot waits for its successor, and :meth:`Ring.finish` (the observation
after the last step) flushes it at shutdown. Envs that ended at step t have their true final
observation in slot t's side store; the successor holds their reset observation.

Counters live in the segment header and are read and written only under a process-shared
semaphore used as a mutex (sem_wait/sem_post synchronise memory, POSIX XBD 4.12), so the
slot bytes written before a publish are visible to whoever sees the new count, on x86-64
and aarch64 alike. Backpressure: ``overwrite=False`` (default) blocks the producer while
the ring is full; ``overwrite=True`` drops the oldest unread step and counts it.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from pytest_perfgate.ring import batch as _batch
from pytest_perfgate.ring import borrow as _borrow
from pytest_perfgate.ring import held as _held
from pytest_perfgate.ring import steady as _steady
from pytest_perfgate.ring.base import (
    C_WAIT_NS,
    CLAIM,
    CLOSED,
    CONSUMED,
    OVERWRITTEN,
    P_BLOCKED_NS,
    POPS,
    PUBLISHED,
    PUSHES,
    W_CONS,
    W_PROD,
    PeerDied,
    RingClosed,
)
from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.held import Buffers, HeldReads
from pytest_perfgate.ring.layout import RingInputError, RingSpec, check_array, check_timeout

# id(pop(out=) obs buffer) -> (weak ref to it, ring name, stream index, row) of the obs
# row the next pop may start from; the entry goes when the buffer does.
_CARRY: dict[int, tuple[Any, str, int, int]] = {}


def _take_carry(arr: Any) -> tuple[str, int, int] | None:
    got = _CARRY.pop(id(arr), None)
    return got[1:] if got is not None and got[0]() is arr else None


def _put_carry(arr: Any, name: str, index: int, row: int) -> None:
    key = id(arr)
    _CARRY[key] = (weakref.ref(arr, lambda _: _CARRY.pop(key, None)), name, index, row)


_SECONDS = (float, int)  # a timeout of these classes needs only a range check
_INF = float("inf")


class Ring(HeldReads):
    """Create with ``Ring(spec)``; hand it to the other process as a spawn argument.
    ``parties``: processes that will attach (2 when the creator only supervises); the
    name is removed once that many have mapped the segment."""

    # ---- producer --------------------------------------------------------------------
    def push(self, obs: Any, action: Any, reward: Any, terminated: Any, truncated: Any, *,
             critic_obs: Any = None, final_obs: Any = None, final_critic_obs: Any = None,
             timeout: float | None = None) -> bool:
        """Write one step. ``final_obs``: true final observations of the envs that ended
        (terminated | truncated), one row per such env in env order. Returns False only
        when ``timeout`` passed with the ring full (block mode)."""
        if timeout is not None and not (timeout.__class__ in _SECONDS and 0 <= timeout < _INF):
            timeout = check_timeout("push", timeout)
        fast = self._push_fast
        if (fast is not None and critic_obs is None and final_obs is None
                and final_critic_obs is None):
            # The common step, checked inline: five arrays exactly as declared, no env
            # ended. This runs between MB-sized copies with the interpreter's caches cold,
            # where each call and lookup costs ~3x its timeit figure (docs/ring.md).
            nd, so, do, sa, da, sr, dr, sb, db, count, slots = fast
            if (obs.__class__ is nd and action.__class__ is nd and reward.__class__ is nd
                    and terminated.__class__ is nd and truncated.__class__ is nd
                    and obs.shape == so and obs.dtype == do and action.shape == sa
                    and action.dtype == da and reward.shape == sr and reward.dtype == dr
                    and terminated.shape == sb and terminated.dtype == db
                    and truncated.shape == sb and truncated.dtype == db
                    and not (count(terminated) or count(truncated))):
                slot = self._acquire("push", timeout)
                if slot is None:
                    return False
                o, a, r, t, u = slots
                o[slot] = obs
                a[slot] = action
                r[slot] = reward
                t[slot] = terminated
                u[slot] = truncated
                self._publish(closed=False)
                return True
        # One tuple per field, made once (base.py).
        vals = [(name, check_array(name, v, shape, dt, fin)) for (name, shape, dt, fin), v
                in zip(self._push_fields, (obs, action, reward, terminated, truncated),
                       strict=True)]
        if self._push_critic is not None:
            name, shape, dt, fin = self._push_critic
            vals.append((name, check_array(name, critic_obs, shape, dt, fin)))
        elif critic_obs is not None:
            raise RingInputError("push: critic_obs given but the ring declares no "
                                 "critic_shape; declare it in RingSpec or drop the argument")
        term, trunc = vals[3][1], vals[4][1]
        count = self._count
        k = int(count(term | trunc)) if count(term) or count(trunc) else 0
        finals = self._finals(k, final_obs, final_critic_obs) \
            if k or final_obs is not None or final_critic_obs is not None else {}
        slot = self._acquire("push", timeout)
        if slot is None:
            return False
        a = self._a
        for name, v in vals:
            a[name][slot] = v
        for name, v in finals.items():
            a[name][slot, :k] = v
        self._publish(closed=False)
        return True

    def _finals(self, k: int, final_obs: Any, final_critic_obs: Any) -> dict[str, Any]:
        sp, out = self.spec, {}
        pairs = [("final_obs", final_obs, sp.obs_shape)]
        if sp.critic_shape is not None:
            pairs.append(("final_critic_obs", final_critic_obs, sp.critic_shape))
        for name, val, shape in pairs:
            if k == 0 and val is None:
                continue
            if val is None:
                raise RingInputError(f"push: {k} env(s) ended at this step but {name} is "
                                     f"None; pass their final observations, shape "
                                     f"({k}, {', '.join(map(str, shape))}), in env order")
            out[name] = check_array(name, val, (k, *shape), sp.obs_dtype, sp.check_finite)
        return out

    def _acquire(self, what: str, timeout: float | None) -> int | None:
        """Index of a free slot (dropping the oldest in overwrite mode), or None at timeout."""
        self._claim_role("producer")
        h, cap = self._h, self.spec.capacity
        seen = self._seen_p
        if seen is not None and seen[0] - seen[1] < cap:
            return seen[0] % cap  # free by the last locked look (base.py)
        deadline = None if timeout is None else time.monotonic() + timeout
        t0 = self._clock()
        spin = self._spin_end(t0, deadline)
        try:
            while True:
                with self._locked():
                    if h[CLOSED]:
                        raise RingClosed(f"{what} after finish(): the stream is closed")
                    pub, con = int(h[PUBLISHED]), int(h[CONSUMED])
                    if pub - con < cap:
                        return pub % cap
                    if self.spec.overwrite and not h[CLAIM]:
                        h[CONSUMED] = con + 1  # drop the oldest unread step, counted
                        h[OVERWRITTEN] += 1
                        return pub % cap
                    if not spin:
                        h[W_PROD] = 1  # full (or the oldest is being copied out): wait
                if spin:
                    spin = self._spin(CONSUMED, con, spin)
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                self._wait(self._free_bell, "producer", deadline)
        finally:
            self._spun(t0)
            waited = self._clock() - t0
            if waited > 50_000:
                h[P_BLOCKED_NS] += waited  # producer-owned line, single writer

    def _publish(self, closed: bool) -> None:
        h = self._h
        with self._locked():
            h[PUBLISHED] += 1
            h[PUSHES] += not closed
            if closed:
                h[CLOSED] = 1
            ring_bell = bool(h[W_CONS])
            h[W_CONS] = 0
            self._seen_p = (None if closed or self.spec.overwrite
                            else (int(h[PUBLISHED]), int(h[CONSUMED])))
        if ring_bell:  # after unlocking: the woken side finds the mutex free
            self._data_bell.post()

    def finish(self, next_obs: Any, next_critic_obs: Any = None,
               timeout: float | None = None) -> bool:
        """End the stream with the observation after the last step: the last pushed step
        becomes consumable, and pop() returns None once everything is drained."""
        if timeout is not None and not (timeout.__class__ in _SECONDS and 0 <= timeout < _INF):
            timeout = check_timeout("finish", timeout)
        f, chk = self._fields, self.spec.check_finite
        o = check_array("obs", next_obs, *f["obs"], chk)
        c = (check_array("critic_obs", next_critic_obs, *f["critic_obs"], chk)
             if self.spec.critic_shape is not None else None)
        slot = self._acquire("finish", timeout)
        if slot is None:
            return False
        self._a["obs"][slot] = o
        if c is not None:
            self._a["critic_obs"][slot] = c
        self._publish(closed=True)
        return True

    # ---- consumer --------------------------------------------------------------------
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
            _check_counts(max_steps, min_steps)  # raises, naming the value
        if timeout is not None and not (timeout.__class__ in _SECONDS and 0 <= timeout < _INF):
            timeout = check_timeout("pop", timeout)
        if self._borrowing:
            raise RingInputError(_borrow.nested("pop()"))
        hb: Buffers | None = self._held_by
        if (hb is not None and out is hb and hb.held == 1
                and (min_steps == 1 or max_steps == 1 or hb.max_steps == 1)):
            b = _steady.pop_one(self, hb, timeout)  # one held step: most pops
            if b is not _steady.SLOW:
                self._h[POPS] += b is not None
                return b  # type: ignore[return-value]
        deadline = None if timeout is None else time.monotonic() + timeout
        own = (isinstance(out, Buffers) and out.ring == self._seg.name
               and not self.spec.overwrite)
        if self._held_by is not None and self._held_by is not out:
            done, b = _held.flush(self, self._held_by, max_steps, deadline)
            if not done:
                return None
            if b is not None:  # held in other buffers: delivered here as a copy
                self._h[POPS] += 1
                return _held.copied(b)
        if own:
            assert isinstance(out, Buffers)
            b = _held.pop_into(self, out, max_steps, deadline, min_steps)
            self._h[POPS] += b is not None
            return b
        if out is None:
            got = self._claim(max_steps, timeout, min_steps)
            if got is None:
                return None
            con, k = got
            try:
                return _batch.copy_out(self._a, self.spec.capacity, con, k, out)
            finally:
                self._release(con, k)
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
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                got = self._claim(max_steps - total, left, 1, skip=total)
                if got is None:
                    if total and self._drained(total):
                        break  # finished: fewer than min_steps is all there is
                    self._unclaim()
                    return None
                con, k = got
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

    def borrow(self, max_steps: int | None = None, timeout: float | None = None, *,
               min_steps: int = 1, next_obs: bool = True) -> _borrow.Borrowed:
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
            _check_counts(max_steps, min_steps)  # raises, naming the value
        if timeout is not None and not (timeout.__class__ in _SECONDS and 0 <= timeout < _INF):
            timeout = check_timeout("borrow", timeout)
        if next_obs.__class__ is not bool:
            raise RingInputError(f"next_obs={next_obs!r}: pass True (each step with its "
                                 "next_obs) or False (each step as soon as it is written)")
        return _borrow.Borrowed(self, max_steps, timeout, min_steps, next_obs)

    def _claim(self, max_steps: int | None, timeout: float | None, min_steps: int,
               skip: int = 0, succ: int = 1) -> tuple[int, int] | None:
        """Wait for consumable steps beyond the ``skip`` already claimed and mark them being
        read: (first unconsumed index, count of new steps). ``succ=0``: a step is
        consumable once published, not once its successor is (``borrow(next_obs=False)``;
        finish()'s slot is no step)."""
        self._claim_role("consumer")
        h = self._h
        want = min(min_steps, max_steps or min_steps, self.spec.capacity - succ)
        seen = self._seen_c
        if succ and seen is not None and seen[1] - seen[0] - 1 - skip >= want:
            con, avail = seen[0], seen[1] - seen[0] - 1 - skip
            return con, avail if max_steps is None else min(avail, max_steps)
        deadline = None if timeout is None else time.monotonic() + timeout
        t0 = spin = 0  # t0 set once the first look found too little: the wait is timed
        while True:
            with self._locked():
                con, pub = int(h[CONSUMED]), int(h[PUBLISHED])
                ended = bool(h[CLOSED])
                avail = pub - con - (succ or ended) - skip
                if avail >= want or (ended and avail > 0):
                    k = avail if max_steps is None else min(avail, max_steps)
                    h[CLAIM] = skip + k
                    if not self.spec.overwrite:
                        self._seen_c = (con, pub)
                    break
                if t0 and not (ended or spin):
                    h[W_CONS] = 1
            if not t0 and not ended:
                t0 = self._clock()
                spin = self._spin_end(t0, deadline)
                continue  # look again, announcing the wait unless polling first
            if spin and not ended:
                spin = self._spin(PUBLISHED, pub, spin)
                continue
            if ended or (deadline is not None and time.monotonic() >= deadline):
                if t0:
                    self._spun(t0)
                    h[C_WAIT_NS] += self._clock() - t0
                return None
            self._wait(self._data_bell, "consumer", deadline)
        if t0:
            self._spun(t0)
            h[C_WAIT_NS] += self._clock() - t0
        return con, k

    def _drained(self, claimed: int) -> bool:
        """finish() was called and nothing is left beyond the ``claimed`` steps."""
        h = self._h
        with self._locked():
            return bool(h[CLOSED]) and int(h[PUBLISHED]) - int(h[CONSUMED]) - claimed <= 1

    def _unclaim(self) -> None:
        """Give up a claim without consuming (a timeout, an error mid-copy)."""
        h = self._h
        with self._locked():
            h[CLAIM] = 0
            ring_bell = bool(h[W_PROD])
            h[W_PROD] = 0
        if ring_bell:
            self._free_bell.post()

    def _release(self, con: int, k: int) -> None:
        h, lock = self._h, self._lock
        if not lock.take():  # once per pop and borrow: no Python frame for the mutex
            lock.__enter__()
        try:
            h[CONSUMED] = con + k
            h[CLAIM] = 0
            h[POPS] += 1
            ring_bell = h[W_PROD]
            h[W_PROD] = 0
            self._seen_c = None if self.spec.overwrite else (con + k, h[PUBLISHED])
            self._seen_e = None  # consumed moved under the held path's view
        finally:
            lock.post()
        if ring_bell:
            self._free_bell.post()


def _check_counts(max_steps: int | None, min_steps: int) -> None:
    for name, v in (("max_steps", max_steps), ("min_steps", min_steps)):
        if v is None and name == "max_steps":
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RingInputError(f"{name}={v!r}: pass a positive int"
                                 + (" (or None: all consumable steps)"
                                    if name == "max_steps" else ""))


__all__ = ["Batch", "PeerDied", "Ring", "RingClosed", "RingInputError", "RingSpec"]
