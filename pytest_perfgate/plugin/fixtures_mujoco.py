"""pytest fixtures over MujocoPool and the sweep: thin wrappers, closed at teardown.

The only MuJoCo module that imports pytest; plugin.py re-exports these fixtures. When mujoco
(or mujoco.batch) is missing, each fixture skips with a reason naming the extra to install,
so a perf suite runs everywhere and says why it measured nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


def _require_or_skip() -> None:
    from pytest_perfgate.sim.models import MujocoUnavailable, require_mujoco

    try:
        require_mujoco()
    except MujocoUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def mujoco_pool() -> Iterator[Callable[..., Any]]:
    """Factory ``mujoco_pool(model, num_envs, **kw) -> MujocoPool``; pools close at teardown.

    ``model`` is a path, MJCF text or an MjModel; keywords are MujocoPool's (cpu_ids,
    threads, frame_skip, obs, reward_fn, seed, hold_state, keyframe, reset_noise).
    """
    _require_or_skip()
    from pytest_perfgate.sim.pool import MujocoPool

    pools: list[MujocoPool] = []

    def make(model: Any, num_envs: int, **kw: Any) -> MujocoPool:
        pool = MujocoPool(model, num_envs, **kw)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


@pytest.fixture
def mujoco_sweep(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Factory ``mujoco_sweep(model, num_envs, **kw) -> SweepResult`` (see sweep.run_sweep).

    The table is attached to the test report (user_properties "mujoco_sweep") and printed
    in the terminal summary section of the test's captured output.
    """
    _require_or_skip()
    from pytest_perfgate.sim.thread_sweep import run_sweep

    def sweep(model: Any, num_envs: int, **kw: Any) -> Any:
        result = run_sweep(model, num_envs, **kw)
        request.node.user_properties.append(("mujoco_sweep", result.to_dict()))
        print(result.table())
        return result

    return sweep


@pytest.fixture
def humanoid_xml() -> str:
    """Path of gymnasium's humanoid.xml; skips (naming the extra) when it is not installed."""
    _require_or_skip()
    from pytest_perfgate.sim.models import humanoid_xml_path

    try:
        return humanoid_xml_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def g1_scene() -> str:
    """Path of the Unitree G1 scene; skips naming its optional package when it is missing."""
    _require_or_skip()
    from pytest_perfgate.sim.models import G1_MISSING, g1_scene_path

    path = g1_scene_path()
    if path is None:
        pytest.skip(G1_MISSING)
    return path
