"""The ``ring_pair`` fixture: collector/learner pairs over a shared-memory ring.

A thin wrapper over :class:`pytest_perfgate.ring.pair.RingPair`: every pair a test starts
is closed at teardown, even when the test failed, so no side process and no /dev/shm
segment outlives its test (docs/design.md §9). The ring modules (numpy, multiprocessing,
ctypes, torch, mujoco) are imported only when a test asks for the fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_perfgate.ring.pair import RingPair


@pytest.fixture
def ring_pair() -> Iterator[Callable[..., RingPair]]:
    """Factory ``ring_pair(spec=None, *, num_envs=256, capacity=8, collector_cpus=None,
    learner_cpus=None, collectors=1, **kw) -> RingPair`` (started). ``spec=None`` is the
    default humanoid collector's RingSpec; the pair is a WindowSource for
    ``perfgate.measure_source``. ``collectors=N`` starts N collectors, each with its own
    ring, and ``collector_cpus`` is then one core spec per collector (docs/ring.md)."""
    from pytest_perfgate.ring.pair import RingPair

    pairs: list[RingPair] = []

    def start(spec: Any = None, *, num_envs: int = 256, capacity: int = 8,
              **kw: Any) -> RingPair:
        if spec is None:
            from pytest_perfgate.sim.models import MujocoUnavailable

            try:
                from pytest_perfgate.ring.workloads import humanoid_spec

                spec = humanoid_spec(num_envs, capacity)
            except (MujocoUnavailable, ImportError, FileNotFoundError) as exc:
                pytest.skip(f"the default ring_pair collector needs the mujoco extra: {exc}")
        pair = RingPair(spec, **kw)
        pairs.append(pair)
        pair.start()
        return pair

    try:
        yield start
    finally:
        for pair in pairs:
            pair.close()
