"""Harness cost: a bare loop vs the same loop under perfgate's measure() with two phases.

Interleaved: bare and measured turns alternate (short turns, same minute), and the ratio is
the median of per-pair ratios, so the machine's drift cancels (docs/design.md §1).

    python tools/bench_harness.py [--turns 40] [--turn-s 0.25] [--step-ms 1.0]

Targets: <= 1% throughput cost for a step of >= 1 ms; <= 2 us per phase entry.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from pytest_perfgate.core.loop import LoopSource
from pytest_perfgate.core.timing import PhaseRecorder, phase


def make_work(step_ms: float) -> tuple[Callable[[int], int], int]:
    """A pure-Python workload of about step_ms, split into two halves."""

    def spin(n: int) -> int:
        acc = 0
        for i in range(n):
            acc += i * i
        return acc

    n = 1000
    while True:
        t0 = time.perf_counter()
        spin(n)
        if time.perf_counter() - t0 > step_ms / 1e3 / 2:
            break
        n *= 2
    return spin, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--turn-s", type=float, default=0.25)
    ap.add_argument("--step-ms", type=float, default=1.0)
    a = ap.parse_args()
    spin, n = make_work(a.step_ms)

    def bare_step() -> None:
        spin(n)
        spin(n)

    def phased_step() -> None:
        with phase("physics"):
            spin(n)
        with phase("observe"):
            spin(n)

    def bare_turn(duration: float) -> float:
        calls = 0
        t0 = time.perf_counter()
        while True:
            bare_step()
            calls += 1
            if time.perf_counter() - t0 >= duration:
                return calls / (time.perf_counter() - t0)

    src = LoopSource(phased_step, 1, PhaseRecorder())

    def measured_turn(duration: float) -> float:
        w = src.run_window(duration)
        return w.calls / w.wall_s

    bare_turn(0.5), measured_turn(0.5)  # warm up both
    ratios, bare, meas = [], [], []
    for i in range(a.turns):
        order = (bare_turn, measured_turn) if i % 2 == 0 else (measured_turn, bare_turn)
        r = {f: f(a.turn_s) for f in order}
        bare.append(r[bare_turn])
        meas.append(r[measured_turn])
        ratios.append(r[measured_turn] / r[bare_turn])
    q = statistics.quantiles(ratios, n=4)
    step_ms = 1e3 / statistics.median(bare)
    print(f"step: {step_ms:.3f} ms (two phases of ~{step_ms / 2:.3f} ms), {a.turns} interleaved "
          f"turns of {a.turn_s}s each side")
    print(f"bare loop      median {statistics.median(bare):9.1f} calls/s")
    print(f"under measure  median {statistics.median(meas):9.1f} calls/s")
    print(f"throughput ratio measured/bare: median {statistics.median(ratios):.4f} "
          f"(IQR {q[0]:.4f}-{q[2]:.4f}) -> cost {1 - statistics.median(ratios):+.2%} "
          "(target <= 1%)")

    rec = PhaseRecorder()
    ph = rec.phase("p")
    reps, k = 200_000, 15
    per_entry, empty = [], []
    for _ in range(k):  # interleave the empty loop and the phased loop
        t0 = time.perf_counter_ns()
        for _ in range(reps):
            pass
        empty.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        for _ in range(reps):
            with ph:
                pass
        per_entry.append(time.perf_counter_ns() - t0)
    cost = statistics.median(p - e for p, e in zip(per_entry, empty, strict=True)) / reps
    print(f"phase entry+exit: median {cost / 1e3:.3f} us over {k} x {reps} "
          "(target <= 2 us)")
    rec2 = PhaseRecorder()
    from pytest_perfgate.core.timing import activate

    with activate(rec2):
        t0 = time.perf_counter_ns()
        for _ in range(reps):
            with phase("p"):
                pass
        t1 = time.perf_counter_ns()
    print(f"module-level phase() lookup + entry+exit: {(t1 - t0) / reps / 1e3:.3f} us "
          "(single pass)")


if __name__ == "__main__":
    main()
