"""Steps held in the learner's buffers: ``pop(out=)`` frees each slot as soon as it is copied.

A transition needs its successor's obs. A reader that leaves step t in the ring until step
t+1 arrives needs 3 slots before producer and learner overlap, and at MB-sized steps those
slots overflow the cache (docs/ring.md "Where the time goes"). Here the learner copies each
step (every field, and the final observations of the envs that ended at it) into its
buffers as soon as it is published and frees the slot at once; the newest step waits in
the buffers for its successor. A 2-slot ring then overlaps like a hand-written double
buffer. The buffers (:class:`Buffers`, from ``ring.buffers(k)``) carry what they hold; the
ring keeps a reference while they hold a step, and any other read path first delivers it
(:func:`flush`), so no transition is lost or repeated.

The buffers' rows are used as a circle: a batch never crosses the last row, except the one
transition of the last row, whose next_obs is row 0 (the rule ``borrow`` follows in the
ring itself), so no row is ever moved for a learner that takes what is there; a learner
waiting for ``min_steps`` that the last rows cannot hold in one piece has its held rows
moved to the top once.
"""

from __future__ import annotations

import time
from typing import Any

from pytest_perfgate.ring.base import (
    C_WAIT_NS,
    CLOSED,
    CONSUMED,
    HELD,
    PUBLISHED,
    W_CONS,
    W_PROD,
    RingBase,
)
from pytest_perfgate.ring.batch import Batch

SEQ = ("obs", "critic_obs")  # fields whose successor row is next_obs / next_critic_obs


class Buffers(dict[str, Any]):
    """Reusable destination arrays made by one ring's ``buffers(k)``, and the steps they hold:
    rows ``base .. base + held`` (mod ``rows``), stream indices ``start ..``."""

    def __init__(self, arrays: dict[str, Any], ring: str, max_steps: int, rows: int,
                 stream: bool = True) -> None:
        super().__init__(arrays)
        self.ring, self.max_steps, self.rows, self.stream = ring, max_steps, rows, stream
        self.step_keys = tuple(k for k in arrays if not k.startswith("next_"))  # a step's rows
        self.seq_keys = tuple(k for k in SEQ if k in arrays)
        self.base = self.held = self.start = 0
        self.arrays: tuple[Any, ...] = tuple(
            arrays.get(k) for k in ("obs", "action", "reward", "terminated", "truncated",
                                    "critic_obs"))
        self.src: Any = None  # the ring arrays ``pairs`` were made for
        # (copy, destination, source) per field: ring/stream.py's copier for its size
        self.pairs: list[tuple[Any, Any, Any]] = []
        self.fast: tuple[Any, ...] | None = None  # (ring arrays, ring/steady.py's pop)
        self.seq_pairs: list[tuple[Any, Any, Any]] = []
        self.finish_held = False  # the last held row is finish()'s observation, no step
        # stream index -> [(field, env indices, their final rows)] of envs that ended there
        self.finals: dict[int, list[tuple[str, Any, Any]]] = {}

    def clear_hold(self) -> None:
        self.base = self.held = 0
        self.finish_held = False
        self.finals = {}


class HeldReads(RingBase):
    """The ring's side of held reads: take published steps, free them, hold the rest."""

    def _take(self, room: int, holding: bool, deadline: float | None
              ) -> tuple[int, int, bool] | None:
        """Wait for a published unconsumed step: (first index, how many up to ``room``,
        whether the last is finish()'s observation, taken only as a ``holding`` reader's
        successor); (index, 0, False) once finished and drained; None at the deadline."""
        self._claim_role("consumer")
        h = self._h
        seen = self._seen_e
        if seen is not None:
            got = _takeable(*seen, room, holding)
            if got is not None and got[1]:
                return got
        t0 = self._clock()
        spin = self._spin_end(t0, deadline)
        try:
            while True:
                with self._locked():
                    seen = int(h[CONSUMED]), int(h[PUBLISHED]), bool(h[CLOSED])
                    self._seen_e = seen
                    got = _takeable(*seen, room, holding)
                    if got is not None:
                        return got
                    if not spin:
                        h[W_CONS] = 1
                if spin:
                    spin = self._spin(PUBLISHED, seen[1], spin)
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                self._wait(self._data_bell, "consumer", deadline)
        finally:
            self._spun(t0)
            h[C_WAIT_NS] += self._clock() - t0

    def _free(self, con: int, out: Buffers, add: int = 0, finish: bool = False) -> None:
        """Steps before ``con`` are copied into ``out``: free their slots, and count the
        ``add`` steps just copied as held (``finish``: the last is finish()'s observation)
        in the same locked step, so an exception while waiting for the mutex leaves them
        uncounted and in the ring, to be copied again. finish()'s slot stays counted as
        unconsumed (as for every reader), and ``HELD`` counts the steps copied but not yet
        delivered."""
        h = self._h
        con -= finish if add else out.finish_held
        with self._locked():
            h[CONSUMED] = con
            if add:
                out.held += add
                out.finish_held = finish
            h[HELD] = out.held - out.finish_held
            ring_bell = bool(h[W_PROD])
            h[W_PROD] = 0
            self._seen_e = (con, int(h[PUBLISHED]), bool(h[CLOSED]))
            self._seen_c = None  # consumed moved under the other read paths' view
        if ring_bell:
            self._free_bell.post()

    def _hold(self, out: Buffers) -> None:
        """Record what ``out`` holds (single writer: a plain store, read under the mutex)."""
        self._held_by = out if out.held else None
        self._h[HELD] = max(0, out.held - out.finish_held)

    def _peek(self, deadline: float | None) -> int | None:
        """Index of the first unconsumed step once it is published (left in the ring)."""
        h = self._h
        t0 = self._clock()
        spin = self._spin_end(t0, deadline)
        while True:
            with self._locked():
                con, pub = int(h[CONSUMED]), int(h[PUBLISHED])
                if pub > con:
                    self._spun(t0)
                    return con
                if not spin:
                    h[W_CONS] = 1
            if spin:
                spin = self._spin(PUBLISHED, pub, spin)
                continue
            if deadline is not None and time.monotonic() >= deadline:
                self._spun(t0)
                return None
            self._wait(self._data_bell, "consumer", deadline)


def _takeable(con: int, pub: int, closed: bool, room: int, holding: bool
              ) -> tuple[int, int, bool] | None:
    """What :meth:`HeldReads._take` returns for these counters, or None: wait."""
    steps = pub - con - closed  # unconsumed steps, finish()'s slot not counted
    if steps > 0 or (closed and holding):
        m = min(pub - con, room)
        return con, m, closed and con + m == pub
    return (con, 0, False) if closed else None


def _row(out: Buffers, i: int) -> int:
    return (out.base + i) % out.rows


def set_pairs(out: Buffers, a: dict[str, Any]) -> None:
    """(copy, destination, source) per field for ring mapping ``a``, made once per mapping:
    big fields are copied with streaming stores where built (ring/stream.py), the
    buffers' rows taking turns."""
    from pytest_perfgate.ring.stream import copier, plain

    def cp(key: str) -> Any:
        return copier(out[key][0].nbytes) if out.stream else plain

    out.src = a
    out.pairs = [(cp(k), out[k], a[k]) for k in out.step_keys]
    out.seq_pairs = [(cp(k), out[k], a[k]) for k in out.seq_keys]


def copy_in(ring: HeldReads, out: Buffers, con: int, m: int, finish_last: bool) -> None:
    """Copy published steps con..con+m (contiguous in the ring and in the buffers' rows)
    into the rows after the held ones: every field in one copy per field, and the final
    rows of envs that ended, which live in the slot's side store. ``finish_last``: the
    one step is finish()'s observation."""
    a, cap = ring._a, ring.spec.capacity
    if out.src is not a:
        set_pairs(out, a)
    if out.held == 0:
        out.start = con
    slot, row = con % cap, (out.base + out.held) % out.rows
    if finish_last:  # finish() wrote only the observation
        for cp, dst, src in out.seq_pairs:
            cp(dst[row], src[slot])
        return
    for cp, dst, src in out.pairs:
        cp(dst[row:row + m], src[slot:slot + m])
    count, term, trunc = ring._count, a["terminated"], a["truncated"]
    if count(term[slot:slot + m]) or count(trunc[slot:slot + m]):
        for j in range(m):
            if count(term[slot + j]) or count(trunc[slot + j]):
                _keep_finals(out, a, con + j, slot + j, row + j)


def _copy_free_one(ring: HeldReads, out: Buffers, con: int) -> None:
    """copy_in() of the one step ``con`` without its run bookkeeping, then free the slot:
    each step of a pop that waits for several on a 2-slot ring (the one-transition pop is
    ring/steady.py's)."""
    a = ring._a
    slot, row = con % ring.spec.capacity, (out.base + out.held) % out.rows
    if out.held == 0:
        out.start = con
    for cp, dst, src in out.pairs:
        cp(dst[row], src[slot])
    count = ring._count
    if count(a["terminated"][slot]) or count(a["truncated"][slot]):
        _keep_finals(out, a, con, slot, row)
    ring._free(con + 1, out, add=1)


def _keep_finals(out: Buffers, a: dict[str, Any], index: int, slot: int, row: int) -> None:
    """Step ``index`` ended some envs: keep their final rows (the slot's side store is
    reused once the slot is freed) until the step is delivered."""
    import numpy as np

    envs = np.flatnonzero(out["terminated"][row] | out["truncated"][row])
    out.finals[index] = [(key, envs, a["final_" + key][slot, :len(envs)].copy())
                         for key in out.seq_keys]


def ready(out: Buffers, limit: int) -> int:
    """Transitions deliverable as one contiguous batch (at most ``limit``)."""
    r = min(out.held - 1, limit)
    to_end = out.rows - out.base  # obs rows up to the last row
    return max(0, min(r, to_end - 1 if to_end > 1 else 1))


def compact(out: Buffers) -> None:
    """Move the held rows to the top: a batch of ``min_steps`` must not cross the last row.
    Done before copying more, when usually one row is held (1/rows of the copies for a
    learner that always waits for full batches)."""
    import numpy as np

    idx = np.array([_row(out, i) for i in range(out.held)])
    for key in out.step_keys:
        out[key][:out.held] = out[key][idx]  # fancy index: a copy, so overlap is safe
    out.base = 0


def deliver(out: Buffers, r: int) -> Batch:
    """The first ``r`` held transitions as a batch of views; they stop being held."""
    b, start = out.base, out.start
    if out.finals and any(s in out.finals for s in range(start, start + r)):
        return _deliver_patched(out, r)
    nxt = (b + 1) % out.rows
    obs, action, reward, term, trunc, critic = out.arrays
    batch = Batch(obs[b:b + r], obs[nxt:nxt + r], action[b:b + r], reward[b:b + r],
                  term[b:b + r], trunc[b:b + r],
                  None if critic is None else critic[b:b + r],
                  None if critic is None else critic[nxt:nxt + r], start)
    _delivered(out, r)
    return batch


def _delivered(out: Buffers, r: int) -> None:
    out.base, out.held, out.start = (out.base + r) % out.rows, out.held - r, out.start + r
    if out.held == 0 or (out.held == 1 and out.finish_held):
        out.clear_hold()  # only finish()'s observation is left: the stream is drained


def _deliver_patched(out: Buffers, r: int) -> Batch:
    """deliver() where envs ended: next_obs copied into the buffers' next_* rows and
    patched with the final observations kept by :func:`_keep_finals`."""
    import numpy as np

    b, nxt = out.base, (out.base + 1) % out.rows
    got = {key: out[key][b:b + r] for key in out.step_keys}
    for key in out.seq_keys:
        patched = out["next_" + key][:r]
        np.copyto(patched, out[key][nxt:nxt + r])
        got["next_" + key] = patched
    for s in range(out.start, out.start + r):
        for key, envs, rows in out.finals.pop(s, ()):
            got["next_" + key][s - out.start, envs] = rows
    start = out.start
    _delivered(out, r)
    return Batch(got["obs"], got["next_obs"], got["action"], got["reward"],
                 got["terminated"], got["truncated"], got.get("critic_obs"),
                 got.get("next_critic_obs"), start)


def pop_into(ring: HeldReads, out: Buffers, max_steps: int | None, deadline: float | None,
             min_steps: int) -> Batch | None:
    """``pop(out=)`` that frees slots as it copies (block mode, the ring's own buffers)."""
    k = out.max_steps if max_steps is None else min(max_steps, out.max_steps)
    goal = max(1, min(min_steps, k))
    if goal > 1 and out.held and out.held - 1 < goal and out.base + goal + 1 > out.rows:
        compact(out)  # now, while few rows are held: the goal's rows will not fit below
    while out.held - 1 < goal and not out.finish_held:
        room = min(k + 1, out.rows) - out.held
        got = ring._take(room, out.held > 0, deadline)
        if got is None:  # timeout: what was copied stays held, nothing is lost
            ring._hold(out)
            return None
        con, m, finish_last = got
        if m == 0:
            break  # finished and nothing left to copy
        if m == 1 and not finish_last and out.src is ring._a:
            _copy_free_one(ring, out, con)  # the steady state of a 2-slot ring
            continue
        j, cap = 0, ring.spec.capacity
        while j < m:  # in runs of up to half the ring, each slot freed once copied
            first, row = con + j, (out.base + out.held) % out.rows
            n = min(m - j, max(1, cap // 2), cap - first % cap, out.rows - row)
            last = finish_last and j + n == m
            if last and n > 1:
                n, last = n - 1, False  # finish()'s observation is copied alone
            copy_in(ring, out, first, n, last)
            ring._free(first + n, out, add=n, finish=last)
            j += n
    if out.held < 2:  # the stream ended: at most finish()'s observation is left
        if out.finish_held:
            out.clear_hold()
        ring._hold(out)
        return None
    r = ready(out, k)
    if r < min(goal, out.held - 1):
        compact(out)
        r = ready(out, k)
    batch = deliver(out, r)
    ring._hold(out)
    return batch


def flush(ring: HeldReads, out: Buffers, max_steps: int | None, deadline: float | None
          ) -> tuple[bool, Batch | None]:
    """Deliver what ``out`` holds before another read path reads the ring: (True, batch),
    (True, None) when it held nothing deliverable, (False, None) at timeout."""
    import numpy as np

    limit = out.max_steps if max_steps is None else max_steps
    if out.held >= 2:
        batch = deliver(out, ready(out, limit))
        ring._hold(out)
        return True, batch
    if out.held == 0 or out.finish_held:
        out.clear_hold()
        ring._hold(out)
        return True, None
    # One step waits for its successor, which is still in the ring (not freed): copy only
    # its observation and leave the slot for the next reader.
    con = ring._peek(deadline)
    if con is None:
        return False, None
    slot, row = con % ring.spec.capacity, _row(out, 1)
    for key in out.seq_keys:
        np.copyto(out[key][row], ring._a[key][slot])
    out.held, out.finish_held = 2, True  # the copied row is a successor only, not a step
    batch = deliver(out, 1)
    ring._hold(out)
    return True, batch


def copied(batch: Batch) -> Batch:
    """The batch in fresh arrays (a delivery from held buffers to a reader of copies)."""
    import dataclasses

    return dataclasses.replace(batch, **{
        f.name: getattr(batch, f.name).copy() for f in dataclasses.fields(batch)
        if f.name != "start" and getattr(batch, f.name) is not None})
