"""The MuJoCo pool, in process and over pinned workers (docs/design.md §4, §7)."""

from __future__ import annotations

import os

from benchmarks._perfgate import (
    importable_in_workers,
    loop,
    perfgate_track,
    require_mujoco,
    seconds_per_step,
)


@perfgate_track("humanoid_batch_256")
def track_humanoid_batch_256() -> float:
    """perf/test_perf_mujoco.py's humanoid_batch_256: 256 envs, pool sized to the CPUs."""
    require_mujoco()
    from benchmarks._workloads import held_humanoid_pool

    pool, actions = held_humanoid_pool(256)
    try:
        return seconds_per_step(loop(lambda: pool.step(actions), pool.num_envs))
    finally:
        pool.close()


@perfgate_track("humanoid_pinned_workers_256")
def track_humanoid_pinned_workers_256() -> float:
    """256 envs split over one spawn worker per usable CPU (at most 2), each pinned to its
    CPU with its own held pool: a WorkerGroup measured in lockstep windows."""
    require_mujoco()
    importable_in_workers()
    from pytest_perfgate.placement.launchers import PinnedWorkers

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    n = max(1, min(2, usable))
    with PinnedWorkers() as launcher:
        group = launcher.start("benchmarks._workloads:humanoid_step", n=n,
                               transitions=256 // n, kwargs={"num_envs": 256 // n})
        return seconds_per_step(group)
