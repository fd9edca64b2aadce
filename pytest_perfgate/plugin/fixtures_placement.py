"""The ``pinned_workers`` and ``numa_workers`` fixtures: thin wrappers over the launchers.

Import them into plugin.py. Every group a test starts is stopped at teardown, even when the
test failed, so no worker outlives its test.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from pytest_perfgate.placement.launchers import NumaWorkers, PinnedWorkers


@pytest.fixture
def pinned_workers() -> Iterator[PinnedWorkers]:
    """Start pinned spawn workers: ``group = pinned_workers.start("pkg.mod:make", n=2,
    cpus="0:3")``; the group is a WindowSource for ``perfgate``."""
    with PinnedWorkers() as launcher:
        yield launcher


@pytest.fixture
def numa_workers() -> Iterator[NumaWorkers]:
    """One spawn worker per usable NUMA node with the batch split across them:
    ``group = numa_workers.start("pkg.mod:make", total_batch=4096)``."""
    with NumaWorkers() as launcher:
        yield launcher


__all__ = ["pinned_workers", "numa_workers"]
