"""Cost of the spawn-worker path: the same MuJoCo batch in-process vs in one spawn worker.

Both sides step gymnasium's humanoid with mujoco.batch.Batch, restoring a fixed state before
every call so each call does identical physics (docs/design.md §7). The machine's speed drifts
by up to 1.5x over seconds (§1), so the two paths are measured INTERLEAVED in short turns (ABBA
order) and compared by the median of per-pair ratios; back-to-back runs would measure drift.

    python tools/bench_worker_path.py [--turns 40] [--turn-s 0.5]

With several usable NUMA nodes it also measures one worker per node (whole-machine rate).
Target: worker path within 3% of in-process at steady state.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def make_humanoid(num_envs: int = 256, nthread: int = 1) -> Callable[[], None]:
    """A step() advancing ``num_envs`` humanoids once from the same state every call."""
    import gymnasium
    import mujoco
    import mujoco.batch

    from pytest_perfgate.core.timing import phase

    xml = os.path.join(os.path.dirname(gymnasium.__file__), "envs/mujoco/assets/humanoid.xml")
    model = mujoco.MjModel.from_xml_path(xml)
    batch = mujoco.batch.Batch(model, num_envs, nthread)
    fields = ["qpos", "qvel", "qacc_warmstart", "time"]
    live = {f: batch.bind(f) for f in fields}
    batch.step(nstep=20)  # off the keyframe, into contact: a representative state
    snapshot = {f: live[f].copy() for f in fields}

    def step() -> None:
        with phase("restore"):
            for f in fields:
                live[f][...] = snapshot[f]
        with phase("physics"):
            batch.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=40, help="pairs of interleaved windows")
    ap.add_argument("--turn-s", type=float, default=0.5, help="seconds per window")
    ap.add_argument("--num-envs", type=int, default=256)
    ap.add_argument("--nthread", type=int, default=1)
    args = ap.parse_args()
    sys.path.insert(0, HERE)

    from pytest_perfgate.core.loop import LoopSource
    from pytest_perfgate.placement import cpus, numa
    from pytest_perfgate.placement.launchers import NumaWorkers
    from pytest_perfgate.placement.workers import WorkerGroup, WorkerSpec

    kw = {"num_envs": args.num_envs, "nthread": args.nthread}
    local = LoopSource(make_humanoid(**kw), transitions=args.num_envs)
    spec = WorkerSpec("bench_worker_path:make_humanoid", threads=args.nthread,
                      transitions=args.num_envs, kwargs=kw)
    nodes = numa.discover().usable_nodes(cpus.usable_cpus())
    print(f"mujoco humanoid x{args.num_envs}, nthread={args.nthread}, {args.turns} turns of "
          f"{args.turn_s} s each side, usable CPUs {cpus.format_cpus(cpus.usable_cpus())}, "
          f"{len(nodes)} usable NUMA node(s)")
    with WorkerGroup([spec]) as group:
        for _ in range(3):  # warm-up both paths
            local.run_window(args.turn_s)
            group.run_window(args.turn_s)
        rates: dict[str, list[float]] = {"in-process": [], "1 spawn worker": []}
        ratios = []
        for turn in range(args.turns):
            order: list[tuple[str, Any]] = [("in-process", local), ("1 spawn worker", group)]
            if turn % 2:
                order.reverse()  # ABBA: neither side always runs first
            got = {}
            for name, src in order:
                w = src.run_window(args.turn_s)
                got[name] = w.transitions / w.wall_s
                rates[name].append(got[name])
            ratios.append(got["1 spawn worker"] / got["in-process"])
        print("\n".join(group.report_lines()))
    for name, r in rates.items():
        q = statistics.quantiles(r, n=4)
        print(f"{name:>16}: median {statistics.median(r):9.0f} env-steps/s "
              f"(IQR {q[0]:.0f}-{q[2]:.0f})")
    q = statistics.quantiles(ratios, n=4)
    med = statistics.median(ratios)
    print(f"worker / in-process, median of {len(ratios)} paired turns: {med:.4f} "
          f"(IQR {q[0]:.4f}-{q[2]:.4f}); worker-path cost {100 * (1 - med):+.2f}% "
          f"(target <= 3%): {'OK' if 1 - med <= 0.03 else 'OVER TARGET'}")
    if len(nodes) > 1:
        total = args.num_envs * len(nodes)
        with NumaWorkers() as launcher:
            g = launcher.start("bench_worker_path:make_humanoid", total_batch=total,
                               kwargs={"nthread": args.nthread})
            for _ in range(3):
                g.run_window(args.turn_s)
            ws = [g.run_window(args.turn_s) for _ in range(args.turns)]
            print(f"one worker per node ({len(nodes)} nodes, {total} envs): median "
                  f"{statistics.median(w.transitions / w.wall_s for w in ws):.0f} env-steps/s")
            print("\n".join(g.report_lines()))


if __name__ == "__main__":
    main()
