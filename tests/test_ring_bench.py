"""tools/bench_ring.py's learners copy what they claim: a benchmark row that copied too
little (or the wrong rows) would make the ring look faster than it is (docs/ring.md)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from helpers import load_file

from pytest_perfgate.ring import batch as _batch
from pytest_perfgate.ring.layout import RingSpec
from pytest_perfgate.ring.shm_ring import Ring

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> ModuleType:
    return load_file("perfgate_bench_ring", ROOT / "tools" / "bench_ring.py")


@pytest.mark.parametrize("next_obs", [False, True])
def test_borrow_copy_copies_each_step_once_and_next_obs_where_an_env_ended(
        next_obs: bool) -> None:
    n, d, steps, rows = 3, 4, 5, 3
    rng = np.random.default_rng(7)
    obs = [rng.standard_normal((n, d)).astype(np.float32) for _ in range(steps + 1)]
    act = [rng.standard_normal((n, 17)).astype(np.float32) for _ in range(steps + 1)]
    rew = [rng.standard_normal(n).astype(np.float32) for _ in range(steps + 1)]
    term = [np.zeros(n, bool) for _ in range(steps + 1)]
    term[1][2] = True  # env 2 ends at step 1: its next_obs is the final obs, not slot 2's
    final = rng.standard_normal((1, d)).astype(np.float32)
    no = np.zeros(n, bool)
    ring = Ring(RingSpec(n, (d,), (17,), capacity=8))
    try:
        for t in range(steps + 1):
            ring.push(obs[t], act[t], rew[t], term[t], no,
                      final_obs=final if term[t].any() else None)
        dst = _batch.buffers(ring.spec.fields(), rows, obs_rows=rows)
        assert _bench().borrow_copy(ring, steps, dst, 1, next_obs=next_obs) == steps
        assert ring.stats()["consumed"] == steps
    finally:
        ring.close()
    for t in range(steps - rows, steps):  # the last `rows` steps are in row t % rows
        j = t % rows
        np.testing.assert_array_equal(dst["obs"][j], obs[t])
        np.testing.assert_array_equal(dst["action"][j], act[t])
        np.testing.assert_array_equal(dst["reward"][j], rew[t])
        np.testing.assert_array_equal(dst["terminated"][j], term[t])
    if next_obs:  # the patched next_obs row whole
        want = obs[2].copy()
        want[2] = final[0]
        np.testing.assert_array_equal(dst["next_obs"][1 % rows], want)
    else:  # only the ended env's final obs: the others are the next obs row
        np.testing.assert_array_equal(dst["next_obs"][1 % rows][2], final[0])
        assert not dst["next_obs"][1 % rows][:2].any()


def test_every_path_follows_every_other_in_the_interleaved_order() -> None:
    """A rotation would keep one predecessor per path (the one after mp.Queue inheriting
    its leftovers every turn); the shuffled order gives each path every predecessor."""
    order = _bench()._order
    runs = {name: None for name in ("pop", "borrow", "hand", "queue")}
    after_queue = set()
    for turn in range(40):
        names = order(runs, turn)
        assert sorted(names) == sorted(runs)
        if "queue" in names[:-1]:
            after_queue.add(names[names.index("queue") + 1])
    assert after_queue == {"pop", "borrow", "hand"}
