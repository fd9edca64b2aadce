"""The transition ring's figures, each measured INTERLEAVED (A and B alternated in short
turns, medians of many turns; docs/design.md §1):

  push   6-field successor ring vs an 8-field ring that also stores next_obs/next_critic_obs
         (2048 envs x 376 float32 obs and critic obs; target <= 0.6x)
  queue  ring vs multiprocessing.Queue carrying the same batches between two spawn
         processes (4096 x 376 float32; target >= 10x)
  bw     push-to-batch-in-hand bandwidth (producer process -> learner's own copy) vs one
         plain memcpy of the same bytes, at a batch below and one above the L3 cache
         (target >= 70%)
  pair   the default humanoid/SAC pair pinned vs unpinned on this machine

    flock /tmp/perfgate-timing.lock python tools/bench_ring.py [--only push,queue,bw,pair]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from typing import Any

import numpy as np

from pytest_perfgate.ring.layout import RingSpec
from pytest_perfgate.ring.ring import Ring


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
        slot = self._acquire("push", None)
        assert slot is not None
        a = self._a
        for name, v in (("obs", obs), ("critic_obs", critic), ("action", action),
                        ("reward", reward), ("terminated", term), ("truncated", trunc),
                        ("next_obs", nxt), ("next_critic_obs", cnxt)):
            a[name][slot] = v
        self._publish(closed=False)


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


class Side:
    """One producer process feeding either a ring or a Queue."""

    def __init__(self, kind: str, n: int, d: int, capacity: int = 4) -> None:
        ctx = mp.get_context("spawn")
        self.ring = Ring(RingSpec(n, (d,), (17,), capacity=capacity)) if kind == "ring" \
            else None
        self.queue = ctx.Queue(maxsize=capacity) if kind == "queue" else None
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=producer, args=(self.ring, self.queue, child, n, d),
                                daemon=True)
        self.proc.start()
        child.close()
        self.out = None
        if self.ring is not None:
            self.ring.watch(self.proc)
            self.out = self.ring.buffers(capacity - 1)  # reused: no page faults per pop
            self.min_steps = max(1, capacity // 2)

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

    def close(self) -> None:
        self.conn.send(None)
        self.proc.join(10)
        if self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join()
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
            names = list(runs)[i % 3:] + list(runs)[:i % 3]
            for name in names:
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
            for name in list(runs)[i % 3:] + list(runs)[:i % 3]:
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
    from pytest_perfgate.ring import compare
    from pytest_perfgate.ring.workloads import humanoid_spec

    spec = humanoid_spec(envs, 8)
    rows = compare.compare(spec, compare.plan(), turns=turns, window_s=1.0, settle_s=0.5)
    print(compare.table(rows, spec))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="push,queue,bw,pair")
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument("--pair-envs", type=int, default=256)
    args = ap.parse_args()
    only = set(args.only.split(","))
    if "push" in only:
        bench_push(args.turns * 2, 10)
    if "queue" in only:
        bench_queue(args.turns, 8)
    if "bw" in only:
        bench_bw(args.turns)
    if "pair" in only:
        bench_pair(max(4, args.turns // 3), args.pair_envs)


if __name__ == "__main__":
    main()
