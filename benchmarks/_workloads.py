"""The workloads the suite measures, shared by the in-process and the worker benchmarks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks._perfgate import SETTLE_SUBSTEPS


def held_humanoid_pool(num_envs: int, seed: int = 0, **kw: Any) -> tuple[Any, Any]:
    """gymnasium Humanoid-v5 physics (frame_skip 5) in a MujocoPool, held in a settled
    contact-rich state with fixed in-range actions, as perf/test_perf_mujoco.py holds it."""
    import numpy as np

    from pytest_perfgate.sim.models import humanoid_xml_path
    from pytest_perfgate.sim.pool import MujocoPool
    from pytest_perfgate.sim.sweep import settled_state

    pool = MujocoPool(humanoid_xml_path(), num_envs, frame_skip=5, **kw)
    pool.hold(settled_state(pool.model, num_envs, SETTLE_SUBSTEPS, seed=seed,
                            keyframe=pool.keyframe_id))
    lo, hi = pool.model.actuator_ctrlrange.T
    actions = np.random.default_rng(seed + 1).uniform(lo, hi, (num_envs, pool.model.nu))
    return pool, actions


def humanoid_step(num_envs: int = 128) -> Callable[[], object]:
    """Worker factory (``benchmarks._workloads:humanoid_step``): one held pool per worker,
    sized to the worker's CPU slice."""
    pool, actions = held_humanoid_pool(num_envs)
    return lambda: pool.step(actions)
