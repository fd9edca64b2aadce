"""A collector/learner pair over the shared-memory ring (docs/design.md §9)."""

from __future__ import annotations

import os

from benchmarks._perfgate import perfgate_track, require_mujoco, seconds_per_step


@perfgate_track("ring_pair_humanoid_256")
def track_ring_pair_humanoid_256() -> float:
    """perf/test_perf_ring.py's pair: the humanoid collector (256 envs) on one half of the
    usable CPUs, the SAC learner on the other; collector env-steps are what is counted."""
    require_mujoco()
    try:
        import torch  # noqa: F401  (the learner's; asv's env installs it, see asv.conf.json)
    except ImportError as exc:
        raise NotImplementedError(f"the ring pair's learner needs torch: {exc}") from None
    from pytest_perfgate.ring.pair import RingPair
    from pytest_perfgate.ring.workloads import humanoid_spec

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    half = len(cpus) // 2
    collector, learner = ((",".join(map(str, cpus[half:])), ",".join(map(str, cpus[:half])))
                          if len(cpus) >= 2 else (None, None))
    pair = RingPair(humanoid_spec(256, 8), collector_cpus=collector, learner_cpus=learner)
    try:
        pair.start()
        return seconds_per_step(pair)
    finally:
        pair.close()
