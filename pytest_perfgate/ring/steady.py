"""``pop(out=)`` in its steady state, with the least Python a read can have.

A learner popping a 2-slot ring into its own buffers spends nearly every pop in one state:
one step held in the buffers, its successor the one new step in the ring. This module does
exactly that pop (copy the step, free its slot, deliver the held transition) and nothing
else; every other state returns :data:`SLOW` and goes through ring/held.py, which it
mirrors step for step. Why it is worth a module: the pop runs right after a MB-sized copy
has emptied the caches, where each Python object it touches is a cache miss, so the
general path's bookkeeping cost the learner 5-10% of its rate against a hand-written
double buffer (docs/ring.md "The short paths"). Hence a closure made once per buffers
and mapping: what it needs is in its cells, not behind attribute lookups.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pytest_perfgate.ring.base import CLOSED, CONSUMED, HELD, PUBLISHED, W_PROD
from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.held import Buffers, HeldReads, _deliver_patched, _keep_finals

SLOW = object()  # not the steady state: take the general path


def pop_one(ring: HeldReads, out: Buffers, timeout: float | None) -> Batch | object | None:
    """The held step as a one-transition batch, its successor copied into the buffers and
    its slot freed; None at the timeout (nothing changes); :data:`SLOW` in any other
    state. The caller checked that ``out`` holds exactly one step of this ring and that
    the pop wants one transition."""
    fast = out.fast
    if fast is None or fast[0] is not ring._a:
        if out.src is not ring._a:
            return SLOW  # not copied from this mapping yet: the general path sets it up
        fast = out.fast = (ring._a, _one_pop(ring, out))
    return fast[1](ring, out, timeout)


def _one_pop(ring: HeldReads, out: Buffers
             ) -> Callable[[HeldReads, Buffers, float | None], Any]:
    """pop_one() for this ring mapping and these buffers. The ring and the buffers are
    arguments, not cells: the buffers keep the closure, which must keep neither them (a
    cycle only the cyclic GC frees, holding the mapping) nor a ring the learner drops
    without close() (the ring refers to the buffers while they hold a step)."""
    a, h, lock, count = ring._a, ring._h, ring._lock, ring._count
    take, post, ring_free = lock.take, lock.post, ring._free_bell.post
    n_rows = out.rows
    rows = [tuple(out[k][r] for k in out.step_keys) for r in range(n_rows)]
    cap = int(a["obs"].shape[0])
    slots = [tuple(a[k][s] for k in out.step_keys) for s in range(cap)]
    ends = [(a["terminated"][s], a["truncated"][s]) for s in range(cap)]
    copies = tuple(cp for cp, _, _ in out.pairs)  # ring/stream.py's, per field
    obs, action, reward, term_b, trunc_b, critic = out.arrays

    def one(ring: HeldReads, out: Buffers, timeout: float | None) -> Any:
        if out.finish_held:
            return SLOW
        seen = ring._seen_e
        if seen is None or seen[1] - seen[0] != 1 or seen[2]:
            # Not known to be there. Usually it is by now, the producer having written it
            # during the copy: one look under the mutex. Else wait as every held read does.
            if not take():
                lock.__enter__()
            try:
                seen = ring._seen_e = (h[CONSUMED], h[PUBLISHED], bool(h[CLOSED]))
            finally:
                post()
            if seen[1] == seen[0] and not seen[2]:
                deadline = None if timeout is None else time.monotonic() + timeout
                if ring._take(2, True, deadline) is None:
                    return None  # the held step stays held, as in pop_into()
                seen = ring._seen_e
                assert seen is not None
            if seen[1] - seen[0] != 1 or seen[2]:
                return SLOW  # a run of steps, or the stream's end
        con = seen[0]  # seen under the mutex: published, unread
        b = out.base
        row = b + 1 if b + 1 < n_rows else 0
        slot = con % cap
        for cp, dst, src in zip(copies, rows[row], slots[slot], strict=True):
            cp(dst, src)
        term, trunc = ends[slot]
        if count(term) or count(trunc):  # some env ended at this step
            _keep_finals(out, a, con, slot, row)
        if not take():
            lock.__enter__()
        try:
            h[CONSUMED] = con + 1
            out.held = 2  # with the free: interrupted before it, the step is copied again
            h[HELD] = 2
            bell = h[W_PROD]
            h[W_PROD] = 0
            ring._seen_e = (con + 1, h[PUBLISHED], bool(h[CLOSED]))
        finally:
            post()
        ring._seen_c = None
        if bell:
            ring_free()
        start = out.start
        if out.finals and start in out.finals:
            batch = _deliver_patched(out, 1)
        else:
            e = b + 1
            batch = Batch(obs[b:e], obs[row:row + 1], action[b:e], reward[b:e], term_b[b:e],
                          trunc_b[b:e], None if critic is None else critic[b:e],
                          None if critic is None else critic[row:row + 1], start)
        out.base, out.held, out.start = row, 1, start + 1  # the successor is held now
        h[HELD] = 1
        return batch

    return one
