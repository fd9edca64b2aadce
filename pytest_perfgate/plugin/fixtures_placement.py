"""The ``pinned_workers`` and ``numa_workers`` fixtures: thin wrappers over the launchers.

The plugin module imports them. Every group a test starts is stopped at teardown, even when
the test failed, so no worker outlives its test. The launchers (and multiprocessing, ctypes
with them) are imported only when a test asks for a fixture: importing the plugin stays
cheap (docs/design.md §4).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_perfgate.placement.launchers import NumaWorkers, PinnedWorkers


@pytest.fixture
def pinned_workers() -> Iterator[PinnedWorkers]:
    """Start pinned spawn workers: ``group = pinned_workers.start("pkg.mod:make", n=2,
    cpus="0:3")``; the group is a WindowSource for ``perfgate``."""
    from pytest_perfgate.placement.launchers import PinnedWorkers

    launcher = PinnedWorkers()
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture
def numa_workers() -> Iterator[NumaWorkers]:
    """One spawn worker per usable NUMA node with the batch split across them:
    ``group = numa_workers.start("pkg.mod:make", total_batch=4096)``."""
    from pytest_perfgate.placement.launchers import NumaWorkers

    launcher = NumaWorkers()
    try:
        yield launcher
    finally:
        launcher.close()
