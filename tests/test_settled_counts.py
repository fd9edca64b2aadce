"""The parent settles (and caches) before its counting worker starts: a real callgrind run.

The worker's copy of the test asserts the cached state is already there when it reaches the
settling, so a worker that had to settle under valgrind fails the run instead of passing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_perfgate.sim.settled import CACHE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("need_valgrind")]
pytest_plugins = ["pytester"]
pytest.importorskip("mujoco.batch")

SETTLE = """
import os
from pathlib import Path

import numpy as np

from pytest_perfgate.sim.models import tiny_xml
from pytest_perfgate.sim.thread_sweep import settled_state


def test_settle(perfgate, mujoco_pool):
    pool = mujoco_pool(tiny_xml(), 8)
    found = sorted(Path(os.environ["PERFGATE_CACHE_DIR"]).rglob("*.npy"))
    if os.environ.get("PERFGATE_COUNTS_OUT"):
        assert found, "the counting worker started before its parent cached the settled state"
    else:
        assert not found, f"the cache was not empty: {found}"
    held = settled_state(pool.model, 8, substeps=50, distinct=4)
    if not os.environ.get("PERFGATE_COUNTS_OUT"):
        np.save("parent-held.npy", held)
    pool.hold(held)
    actions = np.zeros((8, pool.model.nu))
    perfgate.measure(lambda: pool.step(actions), transitions=8, name="tiny", windows=2,
                     window_time=0.1)
"""


def test_the_worker_reads_the_state_its_parent_settled(pytester: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cache = pytester.path / "empty-cache"  # a fresh CI runner: nothing cached yet
    monkeypatch.setenv(CACHE_ENV, str(cache))
    pytester.makepyfile(test_settle=SETTLE)
    res = pytester.runpytest_subprocess("--perfgate", "--perfgate-counts",
                                        "-p", "no:cacheprovider", timeout=300)
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*tiny.counts *NO BASELINE*"])
    (entry,) = list(cache.rglob("*.npy"))
    parent = np.load(Path(pytester.path / "parent-held.npy"))
    assert parent.shape == (8, np.load(entry).shape[1])
    assert np.load(entry).tobytes() == parent[:4].tobytes()
