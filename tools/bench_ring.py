"""The transition ring's figures, each measured INTERLEAVED (A and B alternated in short
turns, medians of many turns; docs/design.md §1):

  push   6-field successor ring vs an 8-field ring that also stores next_obs/next_critic_obs
         (2048 envs x 376 float32 obs and critic obs; target <= 0.6x)
  copy   pop(out=) into the ring's own buffers (each slot freed once copied, a ring of
         --copy-capacity slots, default 2, big fields copied with streaming stores where
         ring/_stream.c is built), the same with numpy's copy, without polling
         (spin_us=0), and into
         plain arrays (the step kept in the ring until its successor arrives, >= 3 slots),
         borrow(next_obs=False) + the learner's copy with ring.stream.copy (--copy-capacity
         slots) and with numpy's, borrow + copy with next_obs (>= 3 slots), borrow unread
         and pop() into fresh arrays (>= 3 slots) vs a hand-written shared-memory double
         buffer copying with numpy (its twin with the streaming copy, its unread twin)
         and mp.Queue, all
         interleaved, 4096 x 376 float32 obs + the other fields (6.46 MB per step), with
         minor page faults per step and a pop's wait/copy split (docs/ring.md)
  read   pop(out=) with streaming stores and with numpy's copy, and the hand buffer with
         each, for a learner that sums each batch's obs right after the copy
  queue  ring vs multiprocessing.Queue carrying the same batches between two spawn
         processes (4096 x 376 float32; target >= 10x)
  timeline  pop(out=) vs the hand buffer (mp.Queue alternated with them): when a turn's
         first step is in hand, and the steady time per step after it
  floor  the ring's protocol (the shipped push, counters under the mutex) with a ten-line
         learner, vs the hand buffer: the bound any read path on this protocol can reach
  stages where a step's time goes on the consumer side, pop(out=) vs the hand buffer,
         interleaved (per-stage perf_counter_ns sums; this VM has no hardware counters)
  footprint  one process: a write + a copy per step through S slots and R rows, the cost
         of the working set outgrowing the L3 (cache misses, measured by their effect)
  bw     push-to-batch-in-hand bandwidth (producer process -> learner's own copy) vs one
         plain memcpy of the same bytes, at a batch below and one above the L3 cache
         (target >= 70%)
  pair   the default humanoid/SAC pair pinned vs unpinned on this machine

    flock /tmp/perfgate-timing.lock python tools/bench_ring.py \
        [--only push,copy,read,timeline,floor,stages,footprint,queue,bw,pair]

The copy, timeline and stages runs pin this process to one CPU and every producer to
another (``--pin``), and order the paths in a balanced design every round: see ``_order``.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import statistics
import time
from typing import Any

import numpy as np

from pytest_perfgate.ring import batch as _batch
from pytest_perfgate.ring import stream
from pytest_perfgate.ring.buffers import Buffers
from pytest_perfgate.ring.layout import RingSpec
from pytest_perfgate.ring.shm_ring import Ring


# ---- push: 6 fields vs 8 -------------------------------------------------------------------
class Spec8(RingSpec):
    """The 8-field layout: next_obs and next_critic_obs stored in every slot."""

    def fields(self) -> dict[str, tuple[tuple[int, ...], str]]:
        f = super().fields()
        f["next_obs"] = f["obs"]
        f["next_critic_obs"] = f["critic_obs"]
        return f


class Ring8(Ring):
    def push8(self, obs: Any, action: Any, reward: Any, term: Any, trunc: Any, critic: Any,
              nxt: Any, cnxt: Any) -> None:
        p = self._producer
        slot = p.acquire("push", None)
        assert slot is not None
        a = self._map.a
        for name, v in (("obs", obs), ("critic_obs", critic), ("action", action),
                        ("reward", reward), ("terminated", term), ("truncated", trunc),
                        ("next_obs", nxt), ("next_critic_obs", cnxt)):
            a[name][slot] = v
        p.publish(closed=False)


def bench_push(turns: int, per_turn: int) -> None:
    n, d = 2048, 376
    rng = np.random.default_rng(0)
    obs, cobs, nxt, cnxt = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(4))
    act = rng.standard_normal((n, 17)).astype(np.float32)
    rew = np.zeros(n, np.float32)
    no = np.zeros(n, bool)
    kw: dict[str, Any] = dict(critic_shape=(d,), capacity=8, overwrite=True)  # no consumer
    r6 = Ring(RingSpec(n, (d,), (17,), **kw))
    r8 = Ring8(Spec8(n, (d,), (17,), **kw))
    t6: list[float] = []
    t8: list[float] = []
    try:
        for turn in range(turns):
            for which in ((6, 8) if turn % 2 == 0 else (8, 6)):
                t0 = time.perf_counter_ns()
                for _ in range(per_turn):
                    if which == 6:
                        r6.push(obs, act, rew, no, no, critic_obs=cobs)
                    else:
                        r8.push8(obs, act, rew, no, no, cobs, nxt, cnxt)
                dt = (time.perf_counter_ns() - t0) / per_turn / 1e6
                (t6 if which == 6 else t8).append(dt)
    finally:
        r6.close()
        r8.close()
    m6, m8 = statistics.median(t6), statistics.median(t8)
    ratios = statistics.median(a / b for a, b in zip(t6, t8, strict=True))
    print(f"push  {n} envs x {d} float32 obs + critic obs, no episode ends, {turns} turns x "
          f"{per_turn} pushes:\n      6-field {m6:.3f} ms  8-field {m8:.3f} ms  "
          f"ratio {ratios:.2f}x (target <= 0.6x)")


def _order(runs: dict[str, Any], turn: int) -> list[str]:
    """This turn's order of the paths: a Williams design (core/turn_order.py), so each path
    follows each other one equally often. A rotation keeps the cycle, and the path after
    ``mp.Queue`` would always inherit its leftovers (its feeder thread, the freed
    pickles): measured 0.61 ms per step after the Queue against 0.48 after another path."""
    from pytest_perfgate.core.turn_order import turn_order

    return turn_order(list(runs), turn)


def _interleave(runs: dict[str, Any], turns: int) -> dict[str, list[Any]]:
    """Warm every path once, then ``turns`` rounds of all of them in :func:`_order`: each
    path's results, one per round."""
    for f in runs.values():
        f()
    got: dict[str, list[Any]] = {k: [] for k in runs}
    for i in range(turns):
        for name in _order(runs, i):
            got[name].append(runs[name]())
    return got


# ---- queue / bandwidth: a producer process ----------------------------------------------------
def producer(ring: Any, queue: Any, conn: Any, n: int, d: int) -> None:
    obs = np.random.default_rng(1).standard_normal((n, d)).astype(np.float32)
    act = np.zeros((n, 17), np.float32)
    rew = np.zeros(n, np.float32)
    no = np.zeros(n, bool)
    if ring is not None:
        ring.push(obs, act, rew, no, no)  # priming: every later step has a successor
    while True:
        msg = conn.recv()
        if msg is None:
            return
        for _ in range(msg):
            if ring is not None:
                ring.push(obs, act, rew, no, no)
            else:
                queue.put({"obs": obs, "action": act, "reward": rew, "terminated": no,
                           "truncated": no})


PIN: list[int] = []  # [consumer CPU, producer CPU] (--pin)
FIELDS5 = ("obs", "action", "reward", "terminated", "truncated")  # what a step holds
# The learner and every producer are pinned to CPUs of their own (--pin), where polling
# before sleeping pays (docs/ring.md "Polling before sleeping"); "pop, no polling" is the
# ring's default.
SPIN_US = 200


def _set_pin(arg: str) -> None:
    """Place the learner and the producers the same way for every path: unpinned, the
    scheduler may put a producer on the learner's CPU for a whole run, which moved one
    path's ratio by 0.3 between runs (docs/ring.md "Where the rest goes")."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if arg == "none" or (arg == "auto" and len(cpus) < 2):
        return
    PIN[:] = cpus[:2] if arg == "auto" else [int(c) for c in arg.split(",")]
    os.sched_setaffinity(0, {PIN[0]})


def _stop(conn: Any, proc: Any) -> None:
    """Tell a producer to return, and make sure it did."""
    conn.send(None)
    proc.join(10)
    if proc.exitcode is None:
        proc.kill()
        proc.join()


def _pin(pid: int | None) -> None:
    import os

    if PIN and pid is not None:
        os.sched_setaffinity(pid, {PIN[1]})


class Side:
    """One producer process feeding either a ring or a Queue."""

    def __init__(self, kind: str, n: int, d: int, capacity: int = 4, batch: int = 0,
                 min_steps: int = 0, obs_rows: int | None = None, plain: bool = False,
                 spin_us: float = SPIN_US, stream: bool = True) -> None:
        ctx = mp.get_context("spawn")
        self.ring = Ring(RingSpec(n, (d,), (17,), capacity=capacity, spin_us=spin_us)) \
            if kind == "ring" else None
        self.queue = ctx.Queue(maxsize=capacity) if kind == "queue" else None
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=producer, args=(self.ring, self.queue, child, n, d),
                                daemon=True)
        self.proc.start()
        _pin(self.proc.pid)
        child.close()
        self.out = None
        if self.ring is not None:
            self.ring.watch(self.proc)
            # reused: no page faults per pop; the ring's own buffers free each slot as
            # soon as it is copied (ring/held.py), plain ones keep it until its successor
            self.out = (self.ring.buffers(batch or capacity - 1, rows=obs_rows, stream=stream)
                        if not plain
                        else _batch.buffers(self.ring.spec.fields(), batch or capacity - 1,
                                            obs_rows=obs_rows))
            self.min_steps = min_steps or max(1, capacity // 2)

    def turn(self, steps: int, borrow: bool = False) -> tuple[float, Any]:
        """Seconds from asking for ``steps`` steps to having them all in hand here: copied
        into reused buffers, or (``borrow``) as views into the ring, released right away."""
        t0 = time.perf_counter()
        self.conn.send(steps)
        got, last = 0, None
        while got < steps:
            if self.ring is not None and borrow:
                with self.ring.borrow(max_steps=steps - got, timeout=30,
                                      min_steps=min(self.min_steps, steps - got)) as b:
                    assert b is not None
                    got += b.steps
            elif self.ring is not None:
                b = self.ring.pop(max_steps=steps - got, timeout=30, out=self.out,
                                  min_steps=min(self.min_steps, steps - got))
                assert b is not None
                got += b.steps
                last = b
            else:
                last = self.queue.get(timeout=30)  # type: ignore[union-attr]
                got += 1
        return time.perf_counter() - t0, last

    def pop_turn(self, steps: int, read: Any = None) -> float:
        """turn() for pop(out=) in a loop as tight as the hand buffer's: what a learner
        that pops one batch after another writes, with none of turn()'s branches.
        ``read``: called with each batch's obs."""
        assert self.ring is not None
        if self.min_steps > 1:
            return self.turn(steps)[0]
        pop, out = self.ring.pop, self.out
        t0 = time.perf_counter()
        self.conn.send(steps)
        got = 0
        while got < steps:
            b = pop(steps - got, 30, out=out)
            assert b is not None
            got += b.steps
            if read is not None:
                read(b.obs)
        return time.perf_counter() - t0

    def close(self) -> None:
        _stop(self.conn, self.proc)
        if self.ring is not None:
            self.ring.close()


def bench_queue(turns: int, steps: int) -> None:
    n, d = 4096, 376
    ring, queue = Side("ring", n, d), Side("queue", n, d)
    t: dict[str, list[float]] = {"copy": [], "borrow": [], "queue": []}
    runs = {"copy": lambda: ring.turn(steps)[0], "borrow": lambda: ring.turn(steps, True)[0],
            "queue": lambda: queue.turn(steps)[0]}
    try:
        ring.turn(2)
        queue.turn(2)  # warm both paths
        for i in range(turns):
            for name in _order(runs, i):
                t[name].append(runs[name]())
    finally:
        ring.close()
        queue.close()
    mb = n * d * 4 / 1e6
    rate = {k: steps * mb / statistics.median(v) for k, v in t.items()}
    r_copy = statistics.median(q / r for r, q in zip(t["copy"], t["queue"], strict=True))
    r_borrow = statistics.median(q / r for r, q in zip(t["borrow"], t["queue"], strict=True))
    print(f"queue {n} x {d} float32 ({mb:.1f} MB obs per step), {turns} turns x {steps} "
          f"steps:\n      ring pop(out=) {rate['copy']:.0f} MB/s  ring borrow "
          f"{rate['borrow']:.0f} MB/s  Queue {rate['queue']:.0f} MB/s\n      ring/Queue: "
          f"pop {r_copy:.1f}x, borrow {r_borrow:.1f}x (target >= 10x)")


# ---- copy: the ring's two read paths vs a hand-written double buffer and mp.Queue -------------
def hand_producer(name: str, size: int, full: Any, empty: Any, conn: Any, n: int,
                  d: int) -> None:
    """The producer of :class:`HandBuffer`: wait for a slot to be empty, write, post full."""
    from pytest_perfgate.ring.segment import Segment

    seg = Segment(name, size, create=False)
    slots = _hand_slots(seg.map, n, d)
    data = _step_data(n, d)
    i = 0
    while True:
        msg = conn.recv()
        if msg is None:
            return
        for _ in range(msg):
            assert empty[i].acquire(timeout=30)
            for k, v in slots[i].items():
                np.copyto(v, data[k])
            full[i].release()
            i ^= 1


def _step_data(n: int, d: int) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    return {"obs": rng.standard_normal((n, d)).astype(np.float32),
            "action": np.zeros((n, 17), np.float32), "reward": np.zeros(n, np.float32),
            "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool)}


def _hand_slots(buf: Any, n: int, d: int) -> list[dict[str, Any]]:
    out, off = [], 0
    for _ in range(2):
        slot = {}
        for k, v in _step_data(n, 1).items():  # shapes and dtypes only
            shape = (n, d) if k == "obs" else v.shape
            slot[k] = np.ndarray(shape, v.dtype, buf, off)
            off += (slot[k].nbytes + 63) // 64 * 64
        out.append(slot)
    return out


class HandBuffer:
    """What a user writes by hand: two shared-memory slots of the five fields a step holds
    (no next_obs), one full and one empty semaphore per slot, the consumer copying each step
    into a preallocated batch of ``batch`` steps."""

    def __init__(self, n: int, d: int, batch: int) -> None:
        from pytest_perfgate.ring.segment import Segment, new_name

        ctx = mp.get_context("spawn")
        size = 2 * sum((v.nbytes + 63) // 64 * 64
                       for v in _hand_slots(bytearray(10**9), n, d)[0].values()) + 4096
        self.seg = Segment(new_name(), size, create=True)
        self.seg.populate(size)
        self.slots = _hand_slots(self.seg.map, n, d)
        self.full = [ctx.Semaphore(0), ctx.Semaphore(0)]
        self.empty = [ctx.Semaphore(1), ctx.Semaphore(1)]
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=hand_producer, daemon=True,
                                args=(self.seg.name, size, self.full, self.empty, child, n, d))
        self.proc.start()
        _pin(self.proc.pid)
        child.close()
        self.dst = {k: np.zeros((batch, *v.shape), v.dtype) for k, v in self.slots[0].items()}
        self.batch, self.i = batch, 0

    def turn(self, steps: int, copy: bool = True, stamps: list[float] | None = None,
             cp: Any = np.copyto, read: Any = None) -> float:
        """Seconds until ``steps`` steps are copied with ``cp(dst, src)`` (and, with
        ``read``, each step's obs row passed to it); ``stamps`` gets each one's time."""
        t0 = time.perf_counter()
        self.conn.send(steps)
        for j in range(steps):
            i = self.i
            assert self.full[i].acquire(timeout=30)
            for k, v in self.slots[i].items() if copy else ():
                cp(self.dst[k][j % self.batch], v)
            self.empty[i].release()
            self.i ^= 1
            if read is not None:
                read(self.dst["obs"][j % self.batch])
            if stamps is not None:
                stamps.append(time.perf_counter() - t0)
        return time.perf_counter() - t0

    def close(self) -> None:
        _stop(self.conn, self.proc)
        self.seg.unlink()
        self.seg.close()


def borrow_copy(ring: Ring, steps: int, dst: dict[str, Any], min_steps: int,
                next_obs: bool = False, cp: Any = stream.copy) -> int:
    """The learner's own copy of borrowed views, the same bytes the hand buffer's consumer
    copies: each step's five fields once, into rows ``j % rows`` of preallocated arrays
    (the next step's obs row is its next_obs), one copy per field for the steps that fit
    before the last row. Where an env ended (looked for with one count per flag array),
    its final observations go to that row of dst["next_obs"]. ``next_obs=False`` borrows
    each step as soon as it is written; True waits for its successor, as borrow() does by
    default: docs/ring.md "Borrowing without next_obs". ``cp(dst, src)`` copies: the
    ring's streaming copy by default (docs/ring.md "Streaming stores")."""
    rows = int(dst["action"].shape[0])
    outs = [(dst[f], f) for f in FIELDS5]
    count = np.count_nonzero
    got = 0
    borrow = ring.borrow
    while got < steps:
        with borrow(steps - got, 30, min_steps=min(min_steps, steps - got),
                    next_obs=next_obs) as b:
            assert b is not None
            t, n = 0, b.steps
            while t < n:
                j = (got + t) % rows
                m = min(n - t, rows - j)
                for d, f in outs:
                    cp(d[j:j + m], getattr(b, f)[t:t + m])
                t += m
            if count(b.terminated) or count(b.truncated):
                for e in np.flatnonzero((b.terminated | b.truncated).any(axis=1)):
                    if next_obs:
                        dst["next_obs"][(got + e) % rows] = b.next_obs[e]
                    else:
                        envs, final = b.finals(int(e))
                        dst["next_obs"][(got + e) % rows, envs] = final
            got += n
    return got


def bench_copy(turns: int, steps: int, cap: int, batch: int, min_steps: int,
               obs_rows: int | None, hand_rows: int | None = None) -> None:
    """pop(out=) and borrow + copy against the hand-written double buffer and mp.Queue, all
    interleaved in a balanced order, plus where a pop's time goes."""
    import resource

    n, d = 4096, 376
    ring = Side("ring", n, d, capacity=cap, batch=batch, min_steps=min_steps,
                obs_rows=obs_rows)
    # The same pops into plain arrays: the step stays in the ring until its successor
    # arrives, so a producer overlaps with the learner only from 3 slots on.
    kept = Side("ring", n, d, capacity=max(cap, 3), batch=batch, min_steps=min_steps,
                obs_rows=obs_rows, plain=True)
    queue = Side("queue", n, d)
    # borrow(next_obs=False) needs no successor: the hand buffer's two slots suffice.
    steps_side = Side("ring", n, d, capacity=cap, batch=batch, min_steps=1,
                      obs_rows=obs_rows, plain=True)
    still = Side("ring", n, d, capacity=cap, batch=batch, min_steps=min_steps,
                 obs_rows=obs_rows, spin_us=0)  # pop(out=) as a ring made with defaults
    numpy_cp = Side("ring", n, d, capacity=cap, batch=batch, min_steps=min_steps,
                    obs_rows=obs_rows, stream=False)  # pop(out=) copying with numpy
    assert ring.ring is not None and ring.out is not None
    hand = HandBuffer(n, d, batch=hand_rows or int(ring.out["obs"].shape[0]))
    dst = _batch.buffers(ring.ring.spec.fields(), hand.batch, obs_rows=hand.batch)

    def ring_turn(mode: str) -> float:
        # Held buffers on their own ring; the other read paths on the plain side's ring,
        # so no held step of one path is handed to another (ring/held.py _flush).
        side = {"pop": ring, "pop still": still, "pop numpy": numpy_cp,
                "borrow+copy": steps_side, "borrow+copy numpy": steps_side}.get(mode, kept)
        assert side.ring is not None
        t0 = time.perf_counter()
        if mode.startswith("borrow+copy"):
            side.conn.send(steps)
            borrow_copy(side.ring, steps, dst, side.min_steps,
                        next_obs=mode == "borrow+copy next_obs",
                        cp=stream.copy if mode == "borrow+copy" else stream.plain)
            return time.perf_counter() - t0
        if mode == "fresh":  # new arrays every pop: their pages fault in during the copy
            side.conn.send(steps)
            got = 0
            while got < steps:
                b = side.ring.pop(max_steps=min(steps - got, batch), timeout=30,
                                  min_steps=min(side.min_steps, steps - got))
                assert b is not None
                got += b.steps
            return time.perf_counter() - t0
        if mode == "plain":
            return side.turn(steps)[0]
        if mode.startswith("pop"):
            return side.pop_turn(steps)
        return side.turn(steps, borrow=True)[0]

    runs = {"pop(out=)": lambda: ring_turn("pop"),
            "pop, numpy copy": lambda: ring_turn("pop numpy"),
            "pop, no polling": lambda: ring_turn("pop still"),
            "pop(out=plain)": lambda: ring_turn("plain"),
            "borrow+copy": lambda: ring_turn("borrow+copy"),
            "b+c, numpy copy": lambda: ring_turn("borrow+copy numpy"),
            "b+c, next_obs": lambda: ring_turn("borrow+copy next_obs"),
            "borrow unread": lambda: ring_turn("borrow unread"),
            "pop() fresh": lambda: ring_turn("fresh"),
            "hand buffer": lambda: hand.turn(steps),
            "hand, streaming": lambda: hand.turn(steps, cp=stream.copy),
            "hand unread": lambda: hand.turn(steps, copy=False),
            "mp.Queue": lambda: queue.turn(steps)[0]}
    t: dict[str, list[float]] = {k: [] for k in runs}
    faults: dict[str, list[int]] = {k: [] for k in runs}
    try:
        for f in runs.values():
            f()  # warm every path
        for i in range(turns):
            for name in _order(runs, i):
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t[name].append(runs[name]())
                faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        stage = _pop_stages(ring, steps, turns)
    finally:
        for side in (ring, kept, queue, steps_side, still, numpy_cp):
            side.close()
        hand.close()
    mb = RingSpec(n, (d,), (17,)).slot_bytes() / 1e6
    print(f"copy  {n} x {d} float32 obs + action/reward/terminated/truncated ({mb:.2f} MB "
          f"per step), {steps} steps per turn, {turns} interleaved turns; ring capacity "
          f"{cap}, pops of {min_steps}-{batch} steps into buffers of {batch} steps "
          f"({ring.out['obs'].shape[0]} rows; plain arrays and borrow with next_obs: "
          f"capacity {max(cap, 3)}); borrow+copy: next_obs=False, capacity {cap}; hand "
          f"buffer: 2 slots, batch of {hand.batch}; streaming copy "
          f"{'built' if stream.available() else 'NOT built: numpy copies'}:")
    for name in runs:
        rate = steps * mb / statistics.median(t[name])
        vs_hand = statistics.median(h / r for r, h in zip(t[name], t["hand buffer"],
                                                           strict=True))
        vs_q = statistics.median(q / r for r, q in zip(t[name], t["mp.Queue"], strict=True))
        print(f"      {name:<15} {rate:>6.0f} MB/s  {vs_hand:>5.2f}x hand buffer  "
              f"{vs_q:>5.1f}x mp.Queue  {statistics.median(faults[name]) / steps:>6.0f} "
              "minor faults/step")
    print(f"      pop(out=) stages per step: {stage}")


def bench_read(turns: int, steps: int, cap: int, batch: int) -> None:
    """A learner that reads its batch right after the copy (sums its obs), interleaved:
    does copying with streaming stores, which leaves the batch out of the cache, still
    pay? pop(out=) with each copy, against the hand buffer with each copy."""
    n, d = 4096, 376
    sides = {s: Side("ring", n, d, capacity=cap, batch=batch, min_steps=1, stream=s)
             for s in (True, False)}
    rows = int(sides[True].out["obs"].shape[0])  # type: ignore[index]
    hand = HandBuffer(n, d, batch=rows)

    def read(obs: Any) -> None:
        obs.sum(dtype=np.float32)

    runs = {"pop(out=) + read": lambda: sides[True].pop_turn(steps, read),
            "pop, numpy + read": lambda: sides[False].pop_turn(steps, read),
            "hand + read": lambda: hand.turn(steps, read=read),
            "hand, stream + read": lambda: hand.turn(steps, cp=stream.copy, read=read)}
    try:
        t = _interleave(runs, turns)
    finally:
        for side in sides.values():
            side.close()
        hand.close()
    print(f"read  {n} x {d} float32 obs, {steps} steps per turn, {turns} interleaved turns, "
          f"the learner summing each batch's obs after the copy; ring capacity {cap}, "
          f"buffers of {batch} steps ({rows} rows), hand buffer batch of {rows}; streaming "
          f"copy {'built' if stream.available() else 'NOT built'}:")
    for name in runs:
        vs = statistics.median(h / r for r, h in zip(t[name], t["hand + read"], strict=True))
        print(f"      {name:<20} {statistics.median(t[name]) / steps * 1e3:.3f} ms per step  "
              f"{vs:.2f}x the hand buffer + read")


def _pop_stages(side: Side, steps: int, turns: int) -> str:
    """Median split of a pop(out=) turn: waiting for the producer vs copying."""
    ring = side.ring
    assert ring is not None
    wait, total = [], []
    for _ in range(max(3, turns // 3)):
        w0 = ring.waited_ns
        total.append(side.pop_turn(steps) / steps * 1e3)
        wait.append((ring.waited_ns - w0) / steps / 1e6)
    tot, w = statistics.median(total), statistics.median(wait)
    return f"{tot:.2f} ms, of which waiting for the producer {w:.2f} ms, copying {tot - w:.2f} ms"


def bench_timeline(turns: int, steps: int, cap: int, batch: int) -> None:
    """Per turn: the time until the first transition is in hand (the producer woken, a
    step written and copied) and the median gap between the later ones (steady state),
    pop(out=) against the hand buffer, with mp.Queue turns between them, in a balanced order."""
    n, d = 4096, 376
    ring = Side("ring", n, d, capacity=cap, batch=batch, min_steps=1)
    assert ring.ring is not None and ring.out is not None
    hand = HandBuffer(n, d, batch=int(ring.out["obs"].shape[0]))
    queue = Side("queue", n, d)

    def ring_turn() -> list[float]:
        assert ring.ring is not None
        ts: list[float] = []
        t0 = time.perf_counter()
        ring.conn.send(steps)
        while len(ts) < steps:
            b = ring.ring.pop(max_steps=steps - len(ts), timeout=30, out=ring.out)
            assert b is not None
            ts += [time.perf_counter() - t0] * b.steps
        return ts

    def hand_turn() -> list[float]:
        ts: list[float] = []
        hand.turn(steps, stamps=ts)
        return ts

    runs = {"pop(out=)": ring_turn, "hand buffer": hand_turn,
            "mp.Queue": lambda: [queue.turn(steps)[0]]}
    try:
        got = _interleave(runs, turns)
    finally:
        ring.close()
        hand.close()
        queue.close()
    print(f"timeline {steps} steps per turn, {turns} balanced turns with mp.Queue; ring "
          f"capacity {cap}, buffers of {batch} steps, hand buffer {hand.batch} rows:")
    steady = {k: [statistics.median(b - a for a, b in itertools.pairwise(t[1:])) for t in got[k]]
              for k in ("pop(out=)", "hand buffer")}
    for k in steady:
        first = statistics.median(t[0] for t in got[k]) * 1e3
        print(f"      {k:<12} first step in hand {first:.3f} ms, then "
              f"{statistics.median(steady[k]) * 1e3:.3f} ms per step")
    ratio = statistics.median(h / r for r, h in zip(steady["pop(out=)"],
                                                      steady["hand buffer"], strict=True))
    print(f"      steady state: pop(out=) {ratio:.2f}x the hand buffer's rate")


def floor_producer(ring: Any, conn: Any, n: int, d: int) -> None:
    """A producer with the least Python on the ring's protocol: wait for a free slot and
    publish under the mutex, ring a waiting side's bell; no checks, no episode ends."""
    from pytest_perfgate.ring.mapping import CONSUMED, PUBLISHED, W_CONS, W_PROD

    data = _step_data(n, d)
    m, side = ring._map, ring._producer
    pairs = [(m.a[k], data[k]) for k in FIELDS5]
    h, lock, cap = m.h, m.lock, ring.spec.capacity
    m.claim_role("producer")

    def push() -> None:
        while True:
            with lock:
                pub, con = h[PUBLISHED], h[CONSUMED]
                if pub - con < cap:
                    break
                h[W_PROD] = 1
            side.waits.sleep(None)
        for dst, src in pairs:
            dst[pub % cap] = src
        with lock:
            h[PUBLISHED] = pub + 1
            bell = h[W_CONS]
            h[W_CONS] = 0
        if bell:
            side.data_bell.post()

    push()  # priming, as producer() does
    while (msg := conn.recv()) is not None:
        for _ in range(msg):
            push()


class FloorSide:
    """A learner with the least Python on the ring's protocol (wait under the mutex, copy
    each step's five fields into row i % rows, free the slot), fed by the shipped push
    (``minimal=False``) or by :func:`floor_producer`."""

    def __init__(self, n: int, d: int, rows: int, minimal: bool) -> None:
        ctx = mp.get_context("spawn")
        self.ring = Ring(RingSpec(n, (d,), (17,), capacity=2))
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=floor_producer if minimal else producer, daemon=True,
                                args=(self.ring, child, n, d) if minimal
                                else (self.ring, None, child, n, d))
        self.proc.start()
        _pin(self.proc.pid)
        child.close()
        self.ring.watch(self.proc)
        self.dst = {k: np.zeros((rows, *v.shape), v.dtype)
                    for k, v in _step_data(n, d).items()}
        self.pairs = [(self.dst[k], self.ring._map.a[k]) for k in FIELDS5]
        self.rows, self.row = rows, 0

    def turn(self, steps: int) -> float:
        from pytest_perfgate.ring.mapping import CONSUMED, PUBLISHED, W_CONS, W_PROD

        m, claims = self.ring._map, self.ring._claims
        h, lock = m.h, m.lock
        m.claim_role("consumer")
        t0 = time.perf_counter()
        self.conn.send(steps)
        r = self.row
        for _ in range(steps):
            while True:
                with lock:
                    con, pub = h[CONSUMED], h[PUBLISHED]
                    if pub > con:
                        break
                    h[W_CONS] = 1
                claims.waits.sleep(None)
            for dst, src in self.pairs:
                dst[r] = src[con % 2]
            with lock:
                h[CONSUMED] = con + 1
                bell = h[W_PROD]
                h[W_PROD] = 0
            if bell:
                claims.free_bell.post()
            r = (r + 1) % self.rows
        self.row = r
        return time.perf_counter() - t0

    def close(self) -> None:
        _stop(self.conn, self.proc)
        self.ring.close()


def bench_floor(turns: int, steps: int) -> None:
    """The ring's protocol (counters under the ring mutex, a bell rung for a waiting side)
    with the least Python on the learner side, fed by the shipped push and by a minimal
    producer, interleaved with the hand buffer and mp.Queue: the bound that any read path
    on this protocol can reach. Not a read path users get (no successor, no stats)."""
    n, d, rows = 4096, 376, 7
    sides = {"floor, shipped push": FloorSide(n, d, rows, minimal=False),
             "floor, minimal push": FloorSide(n, d, rows, minimal=True)}
    held = Side("ring", n, d, capacity=2, batch=3, min_steps=1)  # 7 rows: the default
    hand = HandBuffer(n, d, batch=rows)
    queue = Side("queue", n, d)
    runs: dict[str, Any] = {k: (lambda s=s: s.turn(steps)) for k, s in sides.items()}
    runs["pop(out=)"] = lambda: held.pop_turn(steps)
    runs["hand buffer"] = lambda: hand.turn(steps)
    runs["mp.Queue"] = lambda: queue.turn(steps)[0]
    try:
        t = _interleave(runs, turns)
    finally:
        for s in sides.values():
            s.close()
        held.close()
        hand.close()
        queue.close()
    print(f"floor {steps} steps per turn, {turns} balanced turns with mp.Queue, "
          f"{rows} destination rows each:")
    for name in (*sides, "pop(out=)", "hand buffer"):
        ratio = statistics.median(hd / f for f, hd in zip(t[name], t["hand buffer"],
                                                           strict=True))
        print(f"      {name:<20} {statistics.median(t[name]) / steps * 1e3:.3f} ms per "
              f"step  {ratio:.2f}x the hand buffer")


def bench_stages(turns: int, steps: int, cap: int, batch: int, min_steps: int,
                 obs_rows: int | None, hand_rows: int | None = None) -> None:
    """Where a step's time goes on the consumer side, ring pop(out=) vs the hand buffer,
    interleaved: each stage timed with perf_counter_ns (this VM exposes no hardware
    counters to perf), summed per step."""

    n, d = 4096, 376
    t: dict[str, list[int]] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapped(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                t.setdefault(name, []).append(time.perf_counter_ns() - t0)
        return wrapped

    from pytest_perfgate.ring.claims import Claims

    saved = (_batch.copy_rows, _batch.finish, Claims.claim, Claims.release, Buffers.copy_run,
             Buffers.deliver, Claims.free)
    _batch.copy_rows = timed("ring: copy_rows (steps' fields)", _batch.copy_rows)
    _batch.finish = timed("ring: finish (successor obs row)", _batch.finish)
    Claims.claim = timed("ring: claim/take (wait + mutex)", Claims.claim)  # type: ignore[method-assign]
    Claims.release = timed("ring: release (mutex + bell)", Claims.release)  # type: ignore[method-assign]
    Buffers.copy_run = timed("ring: copy_run (whole steps)", Buffers.copy_run)  # type: ignore[method-assign]
    Buffers.deliver = timed("ring: deliver (batch views)", Buffers.deliver)  # type: ignore[method-assign]
    Claims.free = timed("ring: free (mutex + bell)", Claims.free)  # type: ignore[method-assign]
    ring = Side("ring", n, d, capacity=cap, batch=batch, min_steps=min_steps,
                obs_rows=obs_rows)
    assert ring.out is not None
    hand = HandBuffer(n, d, batch=hand_rows or int(ring.out["obs"].shape[0]))

    def hand_turn() -> float:
        t0 = time.perf_counter()
        hand.conn.send(steps)
        for j in range(steps):
            i = hand.i
            a = time.perf_counter_ns()
            assert hand.full[i].acquire(timeout=30)
            b = time.perf_counter_ns()
            for k, v in hand.slots[i].items():
                np.copyto(hand.dst[k][j % hand.batch], v)
            c = time.perf_counter_ns()
            hand.empty[i].release()
            t.setdefault("hand: acquire full (wait)", []).append(b - a)
            t.setdefault("hand: copy (5 fields)", []).append(c - b)
            t.setdefault("hand: release empty (post)", []).append(time.perf_counter_ns() - c)
            hand.i ^= 1
        return time.perf_counter() - t0

    tr: list[float] = []
    th: list[float] = []
    try:
        ring.turn(2)
        hand_turn()
        t.clear()
        for i in range(turns):
            if i % 2:
                tr.append(ring.turn(steps)[0])
                th.append(hand_turn())
            else:
                th.append(hand_turn())
                tr.append(ring.turn(steps)[0])
    finally:
        (_batch.copy_rows, _batch.finish, Claims.claim, Claims.release, Buffers.copy_run,  # type: ignore[method-assign]
         Buffers.deliver, Claims.free) = saved  # type: ignore[method-assign]
        ring.close()
        hand.close()
    total = turns * steps
    pops = len(t.get("ring: release (mutex + bell)", t.get("ring: deliver (batch views)", [])))
    assert ring.out is not None
    print(f"stages ring capacity {cap}, pops of {min_steps}-{batch} steps into "
          f"{ring.out['obs'].shape[0]} obs rows ({pops / total:.2f} pops per step); hand "
          f"buffer 2 slots, batch of {hand.batch}; {turns} interleaved turns x {steps} steps:\n"
          f"      turn per step: ring {statistics.median(tr) / steps * 1e3:.3f} ms, hand "
          f"{statistics.median(th) / steps * 1e3:.3f} ms (hand/ring "
          f"{statistics.median(h / r for r, h in zip(tr, th, strict=True)):.2f}x)")
    for name, v in sorted(t.items()):
        print(f"      {name:<34} {sum(v) / total / 1e3:7.1f} us per step  (median call "
              f"{statistics.median(v) / 1e3:6.1f} us)")


def bench_footprint(reps: int) -> None:
    """One process, no IPC: write a 6.16 MB obs row into slot i % S (the producer) and copy
    the row written one step before into dst row i % R (the consumer). The bytes per step
    are fixed; only the working set (S + R rows, + the source) changes: the cost of cache
    misses without hardware counters."""
    row = 4096 * 376
    src_data = np.random.default_rng(3).standard_normal(row).astype(np.float32)
    print(f"footprint one process, {row * 4 / 1e6:.2f} MB per write + copy, medians of "
          f"{reps} passes x 40 steps (L3 32 MB here):")
    for s_rows, d_rows in ((2, 3), (3, 4), (4, 4), (2, 7), (4, 7), (8, 7)):
        src = np.zeros((s_rows, row), np.float32)
        dst = np.zeros((d_rows, row), np.float32)
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for i in range(40):
                np.copyto(src[i % s_rows], src_data)
                np.copyto(dst[i % d_rows], src[(i - 1) % s_rows])
            out.append((time.perf_counter() - t0) / 40 * 1e3)
        mb = (s_rows + d_rows + 1) * row * 4 / 1e6
        print(f"      {s_rows} slots + {d_rows} dst rows ({mb:4.0f} MB): "
              f"{statistics.median(out):.3f} ms per step")


def bench_bw(turns: int) -> None:
    for n, steps in ((2048, 24), (32768, 4)):  # 3.2 MB and 52 MB per step; L3 is 32 MB here
        _bw_one(n, steps, turns)


def _bw_one(n: int, steps: int, turns: int) -> None:
    d = 376
    side = Side("ring", n, d, capacity=8)
    slot = RingSpec(n, (d,), (17,)).slot_bytes()
    src = np.random.default_rng(2).standard_normal(steps * slot // 4).astype(np.float32)
    dst = np.empty_like(src)

    def memcpy() -> float:
        t0 = time.perf_counter()
        np.copyto(dst, src)
        return time.perf_counter() - t0

    runs = {"copy": lambda: side.turn(steps)[0],
            "borrow": lambda: side.turn(steps, True)[0], "memcpy": memcpy}
    t: dict[str, list[float]] = {k: [] for k in runs}
    try:
        side.turn(2)
        for i in range(turns):
            for name in _order(runs, i):
                t[name].append(runs[name]())
    finally:
        side.close()
    gb = {k: steps * slot / statistics.median(v) / 1e9 for k, v in t.items()}
    eff = {k: statistics.median(m / r for r, m in zip(t[k], t["memcpy"], strict=True))
           for k in ("copy", "borrow")}
    print(f"bw    {n} envs x {d} float32 ({slot / 1e6:.1f} MB per step, {steps} steps "
          f"per turn, {turns} turns):\n      memcpy {gb['memcpy']:.2f} GB/s  ring "
          f"pop(out=) {gb['copy']:.2f} GB/s ({eff['copy']:.0%})  ring borrow "
          f"{gb['borrow']:.2f} GB/s ({eff['borrow']:.0%})  (target >= 70%)")


def bench_pair(turns: int, envs: int) -> None:
    from pytest_perfgate.ring import pinning_table
    from pytest_perfgate.ring.workloads import humanoid_spec

    spec = humanoid_spec(envs, 8)
    rows = pinning_table.compare(spec, pinning_table.plan(), turns=turns, window_s=1.0,
                                 settle_s=0.5)
    print(pinning_table.table(rows, spec))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="push,copy,queue,bw,pair")
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument("--pair-envs", type=int, default=256)
    ap.add_argument("--copy-capacity", type=int, default=2,
                    help="ring slots (default 2: the hand buffer's)")
    ap.add_argument("--copy-batch", type=int, default=3, help="max steps per pop / batch")
    ap.add_argument("--copy-steps", type=int, default=16, help="steps per turn")
    ap.add_argument("--copy-min", type=int, default=1, help="min_steps per pop")
    ap.add_argument("--hand-rows", type=int, default=None,
                    help="rows the hand buffer's consumer copies into (default: as many as "
                         "the ring's buffers have, the same destination footprint)")
    ap.add_argument("--copy-obs-rows", type=int, default=None,
                    help="obs rows of the pop(out=) buffers (default 2 * batch + 1)")
    ap.add_argument("--pin", default="auto",
                    help="CONSUMER,PRODUCER: this process on one CPU, every producer on "
                         "another (default: the first two usable CPUs); 'none': unpinned")
    args = ap.parse_args()
    _set_pin(args.pin)
    only = set(args.only.split(","))
    if "push" in only:
        bench_push(args.turns * 2, 10)
    if "copy" in only:
        bench_copy(args.turns, args.copy_steps, args.copy_capacity, args.copy_batch, args.copy_min,
                   args.copy_obs_rows, args.hand_rows)
    if "read" in only:
        bench_read(args.turns, args.copy_steps, args.copy_capacity, args.copy_batch)
    if "queue" in only:
        bench_queue(args.turns, 8)
    if "floor" in only:
        bench_floor(args.turns, args.copy_steps)
    if "timeline" in only:
        bench_timeline(args.turns, args.copy_steps, args.copy_capacity, args.copy_batch)
    if "stages" in only:
        bench_stages(args.turns, 8, args.copy_capacity, args.copy_batch, args.copy_min,
                     args.copy_obs_rows, args.hand_rows)
    if "footprint" in only:
        bench_footprint(args.turns)
    if "bw" in only:
        bench_bw(args.turns)
    if "pair" in only:
        bench_pair(max(4, args.turns // 3), args.pair_envs)


if __name__ == "__main__":
    main()
