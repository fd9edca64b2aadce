"""The workloads the suite measures: one definition for the asv suite (in-process and worker
benchmarks) and the shipped perf suite (perf/test_perf_mujoco.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SETTLE_SUBSTEPS = 300  # x 3 ms = 0.9 s of sim: gymnasium humanoids are down, in contact (§7)


def hold_settled(pool: Any, substeps: int = SETTLE_SUBSTEPS, seed: int = 0) -> Any:
    """Hold ``pool`` in a representative state (64 trajectories settled ``substeps``, tiled)
    and return fixed in-range actions: every measured call then steps identical physics
    (docs/design.md §1, §7). The settled state is cached by content
    (pytest_perfgate/sim/settled.py)."""
    import numpy as np

    from pytest_perfgate.sim.thread_sweep import settled_state

    pool.hold(settled_state(pool.model, pool.num_envs, substeps, seed=seed,
                            keyframe=pool.keyframe_id))
    lo, hi = pool.model.actuator_ctrlrange.T
    return np.random.default_rng(seed + 1).uniform(lo, hi, (pool.num_envs, pool.model.nu))


def held_humanoid_pool(num_envs: int, seed: int = 0, **kw: Any) -> tuple[Any, Any]:
    """gymnasium Humanoid-v5 physics (frame_skip 5) in a MujocoPool, held in a settled
    contact-rich state with fixed in-range actions."""
    from pytest_perfgate.sim.models import humanoid_xml_path
    from pytest_perfgate.sim.pool import MujocoPool

    pool = MujocoPool(humanoid_xml_path(), num_envs, frame_skip=5, **kw)
    return pool, hold_settled(pool, SETTLE_SUBSTEPS, seed)


def humanoid_step(num_envs: int = 128) -> Callable[[], object]:
    """Worker factory (``benchmarks._workloads:humanoid_step``): one held pool per worker,
    sized to the worker's CPU slice."""
    pool, actions = held_humanoid_pool(num_envs)
    return lambda: pool.step(actions)
